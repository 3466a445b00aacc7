"""Trace mode against eager dezero (and JAX's jit where it is installed).

Run by hand: python benchmarks/bench_trace.py. Prints, in one run, eager against
replayed: the spiral MLP training step, the 784-1000-10 MLP step (sigmoid and SGD;
ReLU and Adam), an elementwise chain of 9 ops on 10^7 float32 values (forward only),
each with the time to record and prepare its graph and the minor page faults per
call in a fresh process; and the 11-op expression sum(tanh(x*a+b) * (1/(1+exp(-x)))
+ x**2) forward and backward on (10,) arrays, against JAX's jit where installed.
"""
import os
import resource
import subprocess
import sys
import time

# One BLAS thread: the large MLP is mostly matrix products, and a machine shared
# with other work times multi-threaded BLAS erratically.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from timing import interleaved_best  # noqa: E402

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import Variable, models, optimizers  # noqa: E402
from dezero.datasets import get_spiral  # noqa: E402


def per_call(*fns, seconds=2.0, rounds=10):
    """Best CPU time per call (microseconds) of each function, taking turns (see
    timing.py); CPU time (one BLAS thread) does not count the time other processes
    hold the core."""
    best = [t * 1e6 for t in interleaved_best(fns, seconds, rounds, time.process_time)]
    return best if len(fns) > 1 else best[0]


def faults_per_call(fn, calls=20):
    """Minor page faults per call of fn (fresh pages from the kernel), after two
    calls that record and warm up."""
    fn(), fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def fresh_faults(name, mode):
    """faults_per_call of one workload in a fresh process: in a process that has run
    other work, freed memory is at hand and every count reads 0."""
    out = subprocess.run([sys.executable, __file__, "--faults", name, mode],
                         capture_output=True, text=True, check=True).stdout
    return float(out)


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


def training(make_model, make_optimizer, x, t):
    """(eager step, traced step, its graph, ms to record and prepare it) on twin models."""
    a, b = twins(make_model, x)
    eager = training_step(a, make_optimizer().setup(a))
    traced = dezero.trace(training_step(b, make_optimizer().setup(b)))
    start = time.perf_counter()
    graph = traced.lower(x, t)
    lowered = (time.perf_counter() - start) * 1e3
    traced(x, t)  # replays: the step clears the grads before backward() reads them
    return lambda: eager(x, t), lambda: traced(x, t), graph, lowered


def spiral():
    x, t = get_spiral(train=True)
    # Small learning rates keep the models near where they start while the steps
    # repeat on one batch: saturated (inf, denormal) values would time differently.
    return training(lambda: models.MLP((10, 3)), lambda: optimizers.SGD(1e-3), x[:30], t[:30])


def mnist_batch():
    rng = np.random.default_rng(0)
    return rng.random((100, 784), dtype=np.float32), rng.integers(0, 10, 100)


def mlp_sgd():
    return training(lambda: models.MLP((1000, 10)), lambda: optimizers.SGD(1e-3),
                    *mnist_batch())


def mlp_relu_adam():
    return training(lambda: models.MLP((1000, 10), activation=F.relu),
                    lambda: optimizers.Adam(1e-4), *mnist_batch())


def chain(x):
    y = x * 0.5 + 1.0
    y = F.exp(-(y * y))
    y = F.tanh(y * x - 0.25)
    return y + x


def big_chain(size=10 ** 7):
    x = Variable(np.random.default_rng(0).standard_normal(size, dtype=np.float32))
    traced = dezero.trace(chain)
    start = time.perf_counter()
    graph = traced.lower(x)
    return lambda: chain(x), lambda: traced(x), graph, (time.perf_counter() - start) * 1e3


# name -> (title, setup returning (eager, replay, graph, ms to prepare), seconds to time)
WORKLOADS = {
    "spiral": ("spiral MLP (10, 3) step, SGD, batch 30", spiral, 2.0),
    "mlp": ("MLP 784-1000-10 step, SGD, batch 100  ", mlp_sgd, 2.0),
    "mlp-adam": ("MLP 784-1000-10 ReLU step, Adam       ", mlp_relu_adam, 2.0),
    "chain": ("elementwise chain on 1e7 float32, fwd ", big_chain, 6.0),
}


def bench_workload(name):
    title, setup, seconds = WORKLOADS[name]
    eager, replay, graph, prepare = setup()
    t_eager, t_replay = per_call(eager, replay, seconds=seconds)
    faults = fresh_faults(name, "eager"), fresh_faults(name, "replay")
    print(f"{title}: eager {t_eager:8.1f} us, replay {t_replay:8.1f} us, speed-up "
          f"{t_eager / t_replay:5.2f}x  ({len(graph.of_kind('op'))} ops, prepared in "
          f"{prepare:.1f} ms; page faults per call in a fresh process {faults[0]:.0f} "
          f"/ {faults[1]:.0f})")


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
    if sys.argv[1:2] == ["--faults"]:  # one count, asked by fresh_faults
        eager, replay, _, _ = WORKLOADS[sys.argv[2]][1]()
        print(faults_per_call(eager if sys.argv[3] == "eager" else replay))
        return
    for name in WORKLOADS:
        bench_workload(name)
    bench_expression()


if __name__ == "__main__":
    main()
