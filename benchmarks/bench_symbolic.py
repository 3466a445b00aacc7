"""Symbolic sizes against static shapes: one graph of B against one graph per batch size.

For each batch size, one training step (forward, backward, update) of an MLP
replayed from a graph traced with dynamic=True (sizes symbolic) and from one traced
with dynamic=False at that size, on the same backend; the ratio is the symbolic
replay's time over the static one's, timed in turns in one process (timing.py).
Also the time to prepare each (record, optimise, compile: the first call), with the
kernel cache warm for both.

    python benchmarks/bench_symbolic.py                 # spiral 2-10-3 and 784-1000-10, Adam
    DEZERO_BACKEND=python python benchmarks/bench_symbolic.py --model spiral
"""
import argparse
import copy
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_median  # noqa: E402

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import optimizers  # noqa: E402

MODELS = {"spiral": ((2,), (10, 3)), "784": ((784,), (1000, 10))}


def training_step(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def prepared(dynamic, model, x, t):
    """A traced step on its own copy of the model, recorded on (x, t): (step, seconds)."""
    model = copy.deepcopy(model)
    step = dezero.trace(training_step(model, optimizers.Adam().setup(model)), dynamic=dynamic)
    start = time.perf_counter()
    step(x, t)
    step.graph.compile().wait()
    return step, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*MODELS, "all"], default="all")
    parser.add_argument("--sizes", default="7,32,100,257")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    for name in MODELS if args.model == "all" else [args.model]:
        (features,), hidden = MODELS[name]
        model = dezero.models.MLP(hidden)
        model(np.zeros((1, features), np.float32))
        x0 = rng.standard_normal((sizes[0], features)).astype(np.float32)
        t0 = rng.integers(0, hidden[-1], sizes[0])
        for dynamic in (False, True):  # kernels compiled into the cache: compared warm
            prepared(dynamic, model, x0, t0)
        symbolic, prep_symbolic = prepared(True, model, x0, t0)
        print(f"{name} ({os.environ.get('DEZERO_BACKEND', 'cpu')} backend): symbolic graph "
              f"prepared in {prep_symbolic * 1e3:.1f} ms")
        print(f"{'batch':>6} {'static ms':>10} {'symbolic ms':>12} {'ratio':>6} "
              f"{'prep static ms':>15} {'prep ratio':>11}")
        for n in sizes:
            x = rng.standard_normal((n, features)).astype(np.float32)
            t = rng.integers(0, hidden[-1], n)
            static, prep_static = prepared(False, model, x, t)
            calls = [lambda f=f, x=x, t=t: f(x, t) for f in (static, symbolic)]
            fixed, moving = interleaved_median(calls, seconds=args.seconds, rounds=7)
            print(f"{n:>6} {fixed * 1e3:>10.3f} {moving * 1e3:>12.3f} {moving / fixed:>6.2f} "
                  f"{prep_static * 1e3:>15.1f} {prep_symbolic / prep_static:>11.2f}")
        print(f"graphs: symbolic {symbolic.entries}, one static step per size")


if __name__ == "__main__":
    main()
