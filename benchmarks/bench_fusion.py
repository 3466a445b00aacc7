"""Fused kernels (the "cpu" backend) against unfused replay, numpy eager and others.

Run by hand: python benchmarks/bench_fusion.py [--quick] [--steps]. Prints, in one run
(--steps: the training steps alone):
- two elementwise chains on float32 arrays of 1e5, 1e6 and 1e7 elements, with the
  machine's triad bandwidth (a[i] = b[i] + s * c[i], compiled the same way)
  measured alongside: arithmetic ((x*a+b)*(x-a)+b*b)*x+a and transcendental
  tanh(x*a+b)*(1/(1+exp(-x)))+x**2; fused, unfused replay, numpy eager, and
  numexpr, PyTorch eager and JAX jit where installed;
- the spiral 2-10-3 MLP training step with SGD and with Adam, and the 784-1000-10
  ReLU one with Adam: fused replay (the compiled plan called), the traced function
  as a user calls it (its signature and guards, then the fused replay), fused
  without horizontal fusion (each parameter's update a kernel of its own), unfused
  replay, eager, numpy by hand and JAX jit;
- the first call (record, passes, compile) of the chains and steps with a cold
  and a warm kernel cache, and of an RNN's training step unrolled over 60 and 120
  inputs (about 2000 and 4000 ops): when it is ready to replay unfused, and when its
  kernels are.
Times are the best wall time of interleaved rounds (kernels may use OpenMP threads).
The training steps run with the whole process on one core (timing.one_core): one
thread each, JAX's thread pool and dezero's kernels included. They run before the
chains (printed in the order run), so JAX's pool has one thread in both.
"""
# ruff: noqa: B023 - every closure below runs within its own loop iteration
import os
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # matrix products: one thread
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["DEZERO_CACHE_DIR"] = tempfile.mkdtemp(prefix="dezero-bench-")  # cold

import numpy as np  # noqa: E402
from timing import interleaved_best, one_core  # noqa: E402

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import layers, models, optimizers  # noqa: E402
from dezero.kernels import cpu  # noqa: E402
from dezero.kernels.codegen import KernelSpec, Param  # noqa: E402
from dezero.static import backends, horizontal  # noqa: E402


def best_time(*fns, rounds=7, budget=1.0):
    """Best wall time per call (seconds) of each function, taking turns (timing.py):
    wall time, as kernels may run on several OpenMP threads."""
    return interleaved_best(fns, budget, rounds)


def optional(name):
    try:
        return __import__(name)
    except ImportError:
        return None


# =============================================================================
# Chains
# =============================================================================


def arithmetic(x, a, b):
    return ((x * a + b) * (x - a) + b * b) * x + a


def transcendental(x, a, b):
    return F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2


def numpy_transcendental(x, a, b):
    return np.tanh(x * a + b) * (1 / (1 + np.exp(-x))) + x ** 2


def triad_kernel(n):
    p = [Param(name, "float", "float32", shape) for name, shape in
         (("b", (n,)), ("s", ()), ("c", (n,)), ("y", (n,)))]
    spec = KernelSpec("triad", tuple(p[:3]), (p[3],), (n,), "y = b + s * c;\n")
    return cpu.KernelLibrary([spec]).kernel(spec)


def bench_chains(sizes):
    torch, numexpr, jax = optional("torch"), optional("numexpr"), optional("jax")
    print("chains on float32; GB/s counts 8 bytes an element (x read, y written), triad "
          "12 (b, c read, y written); times in ms")
    a, b = np.float32(0.5), np.float32(0.25)
    for n in sizes:
        rng = np.random.default_rng(0)
        x, c = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
        triad, s = triad_kernel(n), np.asarray(a)
        for name, fn, by_hand in (("arithmetic", arithmetic, arithmetic),
                                  ("transcendental", transcendental, numpy_transcendental)):
            traced = dezero.trace(lambda x, fn=fn: fn(x, a, b))
            graph = traced.lower(x)
            fused, unfused = graph.compile("cpu").wait(), graph.compile("python")
            rows = {"fused": lambda: fused(x), "unfused": lambda: unfused(x),
                    "numpy": lambda: by_hand(x, a, b), "triad": lambda: triad(x, s, c)}
            if torch is not None:
                tx = torch.from_numpy(x)
                rows["torch"] = (lambda: arithmetic(tx, 0.5, 0.25)) if name == "arithmetic" \
                    else (lambda: torch.tanh(tx * 0.5 + 0.25) * (1 / (1 + torch.exp(-tx)))
                          + tx ** 2)
            if numexpr is not None:
                expr = "((x*a+b)*(x-a)+b*b)*x+a" if name == "arithmetic" else \
                    "tanh(x*a+b)*(1/(1+exp(-x)))+x**2"
                rows["numexpr"] = lambda expr=expr: numexpr.evaluate(expr)
            if jax is not None:
                jx = jax.device_put(x)
                jnp = jax.numpy
                jfn = jax.jit((lambda v: arithmetic(v, a, b)) if name == "arithmetic" else
                              (lambda v: jnp.tanh(v * a + b) / (1 + jnp.exp(-v)) + v ** 2))
                rows["jax jit"] = lambda: jfn(jx).block_until_ready()
            times = dict(zip(rows, best_time(*rows.values())))
            bw, triad_bw = 8 * n / times["fused"] / 1e9, 12 * n / times["triad"] / 1e9
            others = "  ".join(f"{k} {t * 1e3:.3f}" for k, t in times.items())
            print(f"  {name:14s} n={n:.0e}  {others}  | fused {bw:5.1f} GB/s = "
                  f"{bw / triad_bw:4.0%} of triad ({triad_bw:.1f} GB/s)  numpy/fused "
                  f"{times['numpy'] / times['fused']:4.1f}x  unfused/fused "
                  f"{times['unfused'] / times['fused']:4.1f}x")


# =============================================================================
# Training steps
# =============================================================================


def training_step(model, optimizer):
    optimizer.setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def problems(optimizers_too=False):
    """(name, sizes, activation, x, t), with the optimizer's name where asked: the
    spiral step with SGD and with Adam, the larger one with Adam."""
    x, t = dezero.datasets.get_spiral(train=True)
    rng = np.random.default_rng(0)
    spiral = ("spiral 2-10-3 sigmoid", (10, 3), F.sigmoid, x[:30], t[:30])
    large = ("784-1000-10 ReLU", (1000, 10), F.relu, rng.random((100, 784), np.float32),
             rng.integers(0, 10, 100))
    if not optimizers_too:
        yield from (spiral, large)
        return
    yield *spiral, "SGD"
    yield *spiral, "Adam"
    yield *large, "Adam"


# The same step written by hand: numpy with in-place updates, and JAX jit.
ALPHA, BETA1, BETA2, EPS = 0.001, 0.9, 0.999, 1e-8
LR = 0.1  # SGD's


def activation_pair(activation, xp):
    """(f, f') of the hidden activation, on arrays of xp (numpy or jax.numpy)."""
    if activation is F.relu:
        return (lambda h: xp.maximum(h, 0)), (lambda h, a: (h > 0).astype(h.dtype))
    return (lambda h: 1 / (1 + xp.exp(-h))), (lambda h, a: a * (1 - a))


def numpy_step(params, x, t):
    """One MLP step with Adam (SGD where there are no moments) in numpy as a careful
    person writes it by hand."""
    (W1, b1, W2, b2), moments, act, grad_act, count = params
    count[0] += 1
    n, rows = len(x), np.arange(len(x))
    h = x @ W1
    h += b1
    a = act(h)
    y = a @ W2
    y += b2
    y -= y.max(axis=1, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)
    loss = -np.log(y[rows, t]).mean()
    y[rows, t] -= 1
    y /= n
    gh = y @ W2.T
    gh *= grad_act(h, a)
    grads = (x.T @ gh, gh.sum(axis=0), a.T @ y, y.sum(axis=0))
    if moments is None:
        for p, g in zip((W1, b1, W2, b2), grads):
            g *= LR
            p -= g
        return loss
    k = count[0]
    lr = ALPHA * (1 - BETA2 ** k) ** 0.5 / (1 - BETA1 ** k)  # a Python float: no upcast
    for p, g, (m, v) in zip((W1, b1, W2, b2), grads, moments):
        m += (1 - BETA1) * (g - m)
        v += (1 - BETA2) * (g * g - v)
        p -= lr * m / (np.sqrt(v) + EPS)
    return loss


def jax_step(jax, activation, sgd=False):
    """The step as one jitted JAX function of (params, moments, count, x, t) (with
    SGD, the moments pass through unchanged)."""
    jnp = jax.numpy
    act = activation_pair(activation, jnp)[0]

    def loss_fn(params, x, t):
        W1, b1, W2, b2 = params
        y = act(x @ W1 + b1) @ W2 + b2
        log_p = y - jax.scipy.special.logsumexp(y, axis=1, keepdims=True)
        return -jnp.mean(jnp.take_along_axis(log_p, t[:, None], axis=1))

    @jax.jit
    def step(params, ms, vs, count, x, t):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, t)
        if sgd:
            return [p - LR * g for p, g in zip(params, grads)], ms, vs, count, loss
        count = count + 1
        lr = ALPHA * jnp.sqrt(1 - BETA2 ** count) / (1 - BETA1 ** count)
        ms = [m + (1 - BETA1) * (g - m) for m, g in zip(ms, grads)]
        vs = [v + (1 - BETA2) * (g * g - v) for v, g in zip(vs, grads)]
        params = [p - lr * m / (jnp.sqrt(v) + EPS) for p, m, v in zip(params, ms, vs)]
        return params, ms, vs, count, loss
    return step


def by_hand(model, activation, x, t, jax=None, sgd=False):
    """A call that runs one step by hand on copies of the model's weights."""
    weights = [p.data.copy() for layer in model.layers for p in (layer.W, layer.b)]
    if jax is None:
        moments = None if sgd else [(np.zeros_like(w), np.zeros_like(w)) for w in weights]
        state = (weights, moments, *activation_pair(activation, np), [0])
        return lambda: numpy_step(state, x, t)
    step = jax_step(jax, activation, sgd)
    box = [weights, [0 * w for w in weights], [0 * w for w in weights],
           np.float32(0), jax.device_put(x), jax.device_put(t.astype(np.int32))]

    def run():
        box[:4] = step(*box)[:4]
        box[0][0].block_until_ready()
    return run


def bench_steps():
    print("training steps (one step, ms; the process on one core)")
    jax = optional("jax")
    for name, sizes, activation, x, t, optimizer in problems(optimizers_too=True):
        plans, sgd, fused = {}, optimizer == "SGD", None
        name = f"{name} {optimizer}"
        for kind in ("cpu", "vertical", "python", "eager"):
            np.random.seed(0)
            model = models.MLP(sizes, activation=activation)
            step = training_step(model, optimizers.SGD(LR) if sgd else optimizers.Adam(ALPHA))
            if kind == "eager":
                plans[kind] = lambda step=step: step(x, t)
                continue
            traced = dezero.trace(step)
            # vertical: fused without the horizontal rule (no kernel is small enough)
            kept, horizontal.MAX_SEGMENT = horizontal.MAX_SEGMENT, (
                0 if kind == "vertical" else horizontal.MAX_SEGMENT)
            traced(x, t)
            horizontal.MAX_SEGMENT = kept
            plan = traced.graph.compile("cpu" if kind == "vertical" else kind).wait()
            plans[kind] = lambda plan=plan: plan(x, t)
            fused = plan if kind == "cpu" else fused
            if kind == "cpu":  # the step as called: signature, guards, the fused replay
                plans["traced"] = lambda traced=traced: traced(x, t)
        plans["eager"]()  # the eager model's weights exist now: the others copy them
        plans["numpy by hand"] = by_hand(model, activation, x, t, sgd=sgd)
        if jax is not None:
            plans["jax jit"] = by_hand(model, activation, x, t, jax, sgd)
        times = dict(zip(plans, best_time(*plans.values(), budget=2.0)))
        kernels = len(fused.source.split("= _k")) - 1
        print(f"  {name:27s} fused {times['cpu'] * 1e3:.3f} ({kernels} kernels)  traced "
              f"{times['traced'] * 1e3:.3f}  without horizontal {times['vertical'] * 1e3:.3f}"
              f"  unfused {times['python'] * 1e3:.3f}  eager {times['eager'] * 1e3:.3f}  "
              f"numpy by hand {times['numpy by hand'] * 1e3:.3f}" + (
                  f"  jax jit {times['jax jit'] * 1e3:.3f}" if jax else "  (no JAX)"))
        print(f"  {'':27s} eager/fused {times['eager'] / times['cpu']:.2f}x  eager/traced "
              f"{times['eager'] / times['traced']:.2f}x  without horizontal/fused "
              f"{times['vertical'] / times['cpu']:.2f}x  unfused/fused "
              f"{times['python'] / times['cpu']:.2f}x  fused/by hand "
              f"{times['cpu'] / times['numpy by hand']:.2f}x  traced/by hand "
              f"{times['traced'] / times['numpy by hand']:.2f}x" + (
                  f"  fused/jax {times['cpu'] / times['jax jit']:.2f}x" if jax else ""))


def bench_first_calls():
    """Record + passes + compile: the first call of a new trace, kernel cache cold
    (a fresh DEZERO_CACHE_DIR: the library compiles in the background, and how long
    that takes is shown apart) and warm (the same graph traced again)."""
    print("first call (record, passes, compile), ms")
    x = np.random.default_rng(0).standard_normal(1000, np.float32)
    cases = [("transcendental chain", lambda: (transcendental, (x,)))]
    for name, sizes, activation, bx, bt in problems():
        cases.append((name, lambda s=sizes, a=activation, bx=bx, bt=bt: (
            training_step(models.MLP(s, activation=a), optimizers.Adam()), (bx, bt))))
    for name, make in cases:
        times = []
        for _ in range(2):
            fn, args = make()
            if fn is transcendental:
                fn = lambda x: transcendental(x, np.float32(0.5), np.float32(0.25))  # noqa: E731
            traced = dezero.trace(fn)
            start = time.perf_counter()
            traced(*args)
            times.append(time.perf_counter() - start)
            traced.graph.compile().wait()
            times.append(time.perf_counter() - start)
        print(f"  {name:22s} cold {times[0] * 1e3:7.1f} (kernels ready after "
              f"{times[1] * 1e3:7.1f})  warm {times[2] * 1e3:7.1f}")


def unrolled_rnn_step(length):
    """(step, xs): a training step of a tanh RNN unrolled over `length` inputs,
    forward, backward and SGD update, about 33 ops an input."""
    x2h, h2h, h2y = layers.Linear(8), layers.Linear(8, nobias=True), layers.Linear(1)
    xs = dezero.Variable(np.random.default_rng(0).standard_normal((length, 1), np.float32))
    h2y(h2h(x2h(xs[:1])))  # the parameters exist before the trace
    params = [*x2h.params(), *h2h.params(), *h2y.params()]

    def step(xs):
        h, loss = x2h(xs[:1]) * 0, 0
        for t in range(length):
            h = F.tanh(x2h(xs[t:t + 1]) + h2h(h))
            loss = loss + F.sum(h2y(h) ** 2) / length
        for p in params:
            p.cleargrad()
        loss.backward()
        for p in params:
            p.data -= 1e-3 * p.grad.data
        return loss
    return step, xs


def bench_unrolled(lengths=(60, 120)):
    """Large graphs, each with a cold kernel cache of its own: the first call returns
    once the graph is ready to replay unfused; its kernels compile meanwhile."""
    print("unrolled RNN step, cold cache, ms: first call (record, passes, ready "
          "unfused), a replay while kernels compile, kernels ready, fused replay, eager")
    for length in lengths:
        os.environ["DEZERO_CACHE_DIR"] = tempfile.mkdtemp(prefix="dezero-bench-")
        step, xs = unrolled_rnn_step(length)
        traced = dezero.trace(step)
        times, start = [], time.perf_counter()
        for _ in range(2):
            xs.cleargrad()  # backward gives xs a gradient, which would change the call
            begin = time.perf_counter()
            traced(xs)
            times.append(time.perf_counter() - begin)
        traced.graph.compile().wait()
        ready = time.perf_counter() - start
        fused, eager = best_time(lambda: (xs.cleargrad(), traced(xs)),
                                 lambda: (xs.cleargrad(), step(xs)), rounds=5)
        print(f"  {length:3d} inputs, {len(traced.graph.of_kind('op'))} ops, "
              f"{len(traced.graph.groups)} kernels: first {times[0] * 1e3:7.1f}  replay "
              f"{times[1] * 1e3:6.1f}  ready {ready * 1e3:8.1f}  fused {fused * 1e3:6.2f}  "
              f"eager {eager * 1e3:6.2f}")


def main():
    quick = "--quick" in sys.argv
    print(f"compiler: {cpu.compiler()[1]}; OpenMP threads: "
          f"{os.environ.get('OMP_NUM_THREADS', os.cpu_count())}; default backend "
          f"{backends.DEFAULT}")
    if "--steps" not in sys.argv:
        bench_first_calls()
        bench_unrolled()
    # The steps before the chains: JAX's thread pool, made on its first call, then has
    # one thread, not one per core that would spin on the step's one core.
    with one_core():
        bench_steps()
    if "--steps" not in sys.argv:
        bench_chains((10**5, 10**6) if quick else (10**5, 10**6, 10**7))


if __name__ == "__main__":
    main()
