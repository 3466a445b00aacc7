"""Trace mode against eager dezero (and JAX's jit where it is installed).

Run by hand: python benchmarks/bench_trace.py. Prints, in one run: the spiral MLP
training step and the 784-1000-10 MLP step, eager against replayed, with the time
to record and prepare each graph; and the 11-op expression
sum(tanh(x*a+b) * (1/(1+exp(-x))) + x**2) forward and backward on (10,) arrays.
"""
import os
import sys
import time

# One BLAS thread: the large MLP is mostly matrix products, and a machine shared
# with other work times multi-threaded BLAS erratically.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import Variable, models, optimizers  # noqa: E402
from dezero.datasets import get_spiral  # noqa: E402


def per_call(*fns, seconds=2.0, rounds=10):
    """Best time per call (microseconds) of each function. The functions take turns
    in short rounds, so that load from other processes hits them alike."""
    counts = []
    for fn in fns:
        fn()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / rounds / len(fns):
            fn()
            n += 1
        counts.append(max(n, 1))
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, (fn, n) in enumerate(zip(fns, counts)):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / n * 1e6)
    return best if len(fns) > 1 else best[0]


def twins(make, x):
    a, b = make(), make()
    with dezero.no_grad(), dezero.test_mode():
        a(x), b(x)
    for pa, pb in zip(a.params(), b.params()):
        pb.data = pa.data.copy()
    return a, b


def training_step(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def bench_training(title, make_model, x, t, lr):
    a, b = twins(make_model, x)
    eager = training_step(a, optimizers.SGD(lr).setup(a))
    traced = dezero.trace(training_step(b, optimizers.SGD(lr).setup(b)))
    start = time.perf_counter()
    graph = traced.lower(x, t)
    lowered = time.perf_counter() - start
    traced(x, t)  # replays: the step clears the grads before backward() reads them
    t_eager, t_replay = per_call(lambda: eager(x, t), lambda: traced(x, t))
    ops = len(graph.of_kind("op"))
    print(f"{title}: eager {t_eager:8.1f} us, replay {t_replay:8.1f} us, "
          f"speed-up {t_eager / t_replay:5.2f}x  ({ops} ops; record+prepare "
          f"{lowered * 1e3:.1f} ms)")


def expression(x, a, b):
    return F.sum(F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2)


def bench_expression():
    rng = np.random.default_rng(0)
    xs, a_, b_ = (rng.standard_normal(10).astype(np.float32) for _ in range(3))
    x, a, b = Variable(xs), Variable(a_), Variable(b_)

    def value_and_grad(x, a, b):
        y = expression(x, a, b)
        y.backward()
        return y, x.grad

    traced = dezero.trace(value_and_grad)

    def run(f):
        def call():
            x.grad = a.grad = b.grad = None
            return f(x, a, b)
        return call

    run(traced)()
    t_eager, t_replay = per_call(run(value_and_grad), run(traced))
    ops = len(traced.graph.of_kind("op"))
    print(f"expression (10,) fwd+bwd: eager {t_eager:7.1f} us, replay {t_replay:7.1f} us "
          f"({ops} ops), speed-up {t_eager / t_replay:5.2f}x")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("  JAX is not installed (pip install jax): no jit comparison")
        return

    def jexpr(x, a, b):
        return jnp.sum(jnp.tanh(x * a + b) * (1 / (1 + jnp.exp(-x))) + x ** 2)

    jitted = jax.jit(jax.value_and_grad(jexpr))
    jx, ja, jb = (jnp.asarray(v) for v in (xs, a_, b_))

    def jax_call():
        value, grad = jitted(jx, ja, jb)
        grad.block_until_ready()

    t_replay, t_jax = per_call(run(traced), jax_call)
    print(f"  against JAX {jax.__version__} jit(value_and_grad) on the CPU: replay "
          f"{t_replay:7.1f} us, JAX {t_jax:7.1f} us, replay / JAX = {t_replay / t_jax:4.2f}")


def main():
    x, t = get_spiral(train=True)
    x, t = x[:30], t[:30]
    # Small learning rates keep the models near where they start while the steps
    # repeat on one batch: saturated (inf, denormal) values would time differently.
    bench_training("spiral MLP (10, 3), batch 30 ", lambda: models.MLP((10, 3)), x, t, 1e-3)
    rng = np.random.default_rng(0)
    x = rng.random((100, 784), dtype=np.float32)
    t = rng.integers(0, 10, 100)
    bench_training("MLP 784-1000-10, batch 100   ", lambda: models.MLP((1000, 10)), x, t, 1e-3)
    bench_expression()


if __name__ == "__main__":
    main()
