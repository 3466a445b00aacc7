"""Symbolic sizes against static shapes: one graph of B against one graph per batch size.

For each batch size, one training step (forward, backward, update) replayed from a
graph traced with dynamic=True (sizes symbolic) and from one traced with
dynamic=False at that size, on the same backend; the ratio is the symbolic replay's
time over the static one's, timed in turns in one process (timing.py). Also the time
to prepare each (record, optimise, compile: the first call); the kernel cache is warm
for the first size of both, the static graph of each later size compiles kernels of
its own. Models: MLPs with Adam (spiral 2-10-3, 784-1000-10) and a GPT (vocab 65,
block 64, 4 layers, 4 heads, n_embd 128; AdamW, clip_grad_norm) on windows of 64.

    python benchmarks/bench_symbolic.py                 # spiral and 784 (--model all: and gpt)
    python benchmarks/bench_symbolic.py --model gpt --sizes 4,8,16
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
from dezero import models, optimizers  # noqa: E402
from dezero.utils import clip_grad_norm  # noqa: E402


def mlp(features, hidden):
    """(model, optimizer factory, batch(n, rng) -> (x, t)) of an MLP classifier."""
    model = models.MLP(hidden)
    model(np.zeros((1, features), np.float32))
    return model, optimizers.Adam, lambda n, rng: (
        rng.standard_normal((n, features)).astype(np.float32),
        rng.integers(0, hidden[-1], n))


def gpt():
    """The GPT of bench_gpt.py, trained on windows of 64 random tokens."""
    model = models.GPT(65, 64, 4, 4, 128)
    return model, lambda: optimizers.AdamW(alpha=3e-4), lambda n, rng: (
        rng.integers(0, 65, (n, 64)), rng.integers(0, 65, (n, 64)))


MODELS = {"spiral": lambda: mlp(2, (10, 3)), "784": lambda: mlp(784, (1000, 10)),
          "gpt": gpt}


def training_step(model, optimizer, clip):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        if clip:
            clip_grad_norm(model, 1.0)
        optimizer.update()
        return loss
    return step


def prepared(dynamic, model, make_optimizer, x, t):
    """A traced step on its own copy of the model, recorded on (x, t): (step, seconds)."""
    model = copy.deepcopy(model)
    step = dezero.trace(training_step(model, make_optimizer().setup(model),
                                      isinstance(model, models.GPT)), dynamic=dynamic)
    start = time.perf_counter()
    step(x, t)
    step.graph.compile().wait()
    return step, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*MODELS, "mlps", "all"], default="mlps")
    parser.add_argument("--sizes", default=None,
                        help="batch sizes (default 7,32,100,257; the GPT's 3,8,16)")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    names = {"mlps": ["spiral", "784"], "all": list(MODELS)}.get(args.model, [args.model])
    for name in names:
        sizes = [int(n) for n in (args.sizes or ("3,8,16" if name == "gpt" else
                                                 "7,32,100,257")).split(",")]
        np.random.seed(0)
        model, make_optimizer, batch = MODELS[name]()
        x0, t0 = batch(sizes[0], rng)
        for dynamic in (False, True):  # kernels compiled into the cache: compared warm
            prepared(dynamic, model, make_optimizer, x0, t0)
        symbolic, prep_symbolic = prepared(True, model, make_optimizer, x0, t0)
        print(f"{name} ({os.environ.get('DEZERO_BACKEND', 'cpu')} backend): symbolic graph "
              f"prepared in {prep_symbolic * 1e3:.1f} ms")
        print(f"{'batch':>6} {'static ms':>10} {'symbolic ms':>12} {'ratio':>6} "
              f"{'prep static ms':>15} {'prep ratio':>11}")
        for n in sizes:
            x, t = batch(n, rng)
            static, prep_static = prepared(False, model, make_optimizer, x, t)
            calls = [lambda f=f, x=x, t=t: f(x, t) for f in (static, symbolic)]
            fixed, moving = interleaved_median(calls, seconds=args.seconds, rounds=7)
            print(f"{n:>6} {fixed * 1e3:>10.3f} {moving * 1e3:>12.3f} {moving / fixed:>6.2f} "
                  f"{prep_static * 1e3:>15.1f} {prep_symbolic / prep_static:>11.2f}")
        print(f"graphs: symbolic {symbolic.entries}, one static step per size")


if __name__ == "__main__":
    main()
