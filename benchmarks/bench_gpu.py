"""Fused replay on a GPU: cupy kernels against unfused replay, eager dezero and cupy.

Chains on float32 vectors of 1e5, 1e6 and 1e7 elements, with the GPU's triad
bandwidth (a = b + s * c, 12 bytes an element) measured alongside:
    arithmetic      ((x * a + b) * (x - a) + b * b) * x + a
    transcendental  tanh(x * a + b) * (1 / (1 + exp(-x))) + x ** 2
two training steps with Adam: the spiral 2-10-3 sigmoid MLP (batch 30) and a
784-1000-10 ReLU MLP (batch 100), and softmax_cross_entropy's loss and gradient on
scores of several shapes (a row kernel, one thread a row, and the ReductionKernel of
the mean; rows of more than passes.GPU_ROW_MAX run op by op). Columns: the fused
replay (backend "cupy", one ElementwiseKernel per fused group), the unfused replay
(backend "python" on cupy arrays: one cupy call per node), eager dezero, and the
chain written with cupy by hand. Times are medians of calls with the device
synchronised around each.

Then the targets, measured and printed against what they ask for (--json writes
them too, for benchmarks/gpu_check.sh):
- the arithmetic chain fused on --n float32 elements (1e8) at 80% or more of the
  device's memory bandwidth (its peak from the device's properties where they give
  it, else the triad's), and at least as fast as cupy.fuse on the same chain;
- the traced 784-1000-10 Adam step at least 2x as fast as eager dezero on cupy;
- the kernel launches of that step's replay (fused kernels plus library calls).

    python benchmarks/bench_gpu.py [--repeat 50] [--json results.json]
    python benchmarks/bench_gpu.py --cpu    # the same on numpy (unfused): checks the script
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import optimizers  # noqa: E402
from dezero.models import MLP  # noqa: E402

CHAINS = {
    "arithmetic": (lambda x, a, b: ((x * a + b) * (x - a) + b * b) * x + a,
                   lambda xp, x, a, b: ((x * a + b) * (x - a) + b * b) * x + a),
    "transcendental": (lambda x, a, b: F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2,
                       lambda xp, x, a, b: xp.tanh(x * a + b) * (1 / (1 + xp.exp(-x))) + x ** 2),
}


def median_time(sync, repeat, fn, *args):
    """Median seconds of fn(*args), the device synchronised after each call."""
    fn(*args)  # the first call records the trace or compiles the kernels
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def triad_bandwidth(xp, sync, n, repeat):
    """Bytes per second of a = b + s * c on n float32 elements."""
    b, c = xp.ones(n, xp.float32), xp.ones(n, xp.float32)
    s = xp.asarray(0.5, xp.float32)
    if xp is np:
        out = np.empty_like(b)
        seconds = median_time(sync, repeat, lambda: np.add(b, np.multiply(c, s, out=out),
                                                          out=out))
    else:
        kernel = xp.ElementwiseKernel("float32 b, float32 c, float32 s", "float32 a",
                                      "a = b + s * c", "triad")
        seconds = median_time(sync, repeat, kernel, b, c, s)
    return 12 * n / seconds


def plans(graph, xp):
    """(fused plan or None, unfused plan) of a traced graph."""
    fused = graph.compile("cupy") if xp is not np else None
    return fused, graph.compile("python")


def bench_chains(xp, sync, repeat):
    print("| chain | n | fused | unfused | eager dezero | by hand | fused GB/s "
          "| of triad |\n|---|---|---|---|---|---|---|---|")
    for n in (10 ** 5, 10 ** 6, 10 ** 7):
        triad = triad_bandwidth(xp, sync, n, repeat)
        x = xp.asarray(np.random.default_rng(0).standard_normal(n), xp.float32)
        a, b = xp.asarray(0.5, xp.float32), xp.asarray(0.25, xp.float32)
        for name, (chain, by_hand) in CHAINS.items():
            traced = dezero.trace(chain)
            traced(x, a, b)
            fused, unfused = plans(traced.graph, xp)
            times = [median_time(sync, repeat, p, x, a, b) if p else None
                     for p in (fused, unfused)]
            with dezero.no_grad():
                times.append(median_time(sync, repeat, chain, x, a, b))
            times.append(median_time(sync, repeat, by_hand, xp, x, a, b))
            cells = [f"{t * 1e3:.3f} ms" if t else "-" for t in times]
            rate = 8 * n / times[0] if times[0] else None  # read x, write y
            print(f"| {name} | {n:.0e} | {' | '.join(cells)} | "
                  + (f"{rate / 1e9:.0f} | {rate / triad:.0%} |" if rate else "- | - |"))
        print(f"| triad | {n:.0e} | {triad / 1e9:.0f} GB/s | | | | | |")


def step_function(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def bench_steps(xp, sync, repeat):
    print("\n| Adam step | fused | unfused | eager dezero | kernels |\n|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    problems = [("spiral 2-10-3 sigmoid, batch 30", (10, 3), F.sigmoid, 2, 30),
                ("MLP 784-1000-10 ReLU, batch 100", (1000, 10), F.relu, 784, 100)]
    for name, sizes, activation, features, batch in problems:
        x = xp.asarray(rng.standard_normal((batch, features)), xp.float32)
        t = xp.asarray(rng.integers(0, sizes[-1], batch))
        model = MLP(sizes, activation=activation)
        model(x[:1] if xp is np else dezero.cuda.as_numpy(x[:1]))
        if xp is not np:
            model.to_gpu()
        step = step_function(model, optimizers.Adam().setup(model))
        traced = dezero.trace(step)
        traced(x, t)
        print(f"| {name} | {timed_cells(traced.graph, step, xp, sync, repeat, x, t)} | "
              f"{len(traced.graph.groups)} |")


def timed_cells(graph, eager, xp, sync, repeat, *args) -> str:
    """The table cells of one row: the graph replayed fused and unfused, and eager."""
    fused, unfused = plans(graph, xp)
    times = [median_time(sync, repeat, p, *args) if p else None for p in (fused, unfused)]
    times.append(median_time(sync, repeat, eager, *args))
    return " | ".join(f"{s * 1e6:.0f} us" if s else "-" for s in times)


def loss_and_gradient(x, t):
    loss = F.softmax_cross_entropy(x, t)
    loss.backward()
    return loss, x.grad


def bench_losses(xp, sync, repeat):
    print("\n| softmax_cross_entropy, loss and gradient | fused | unfused | eager dezero "
          "| launches |\n|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for rows, classes in ((100, 10), (1000, 1000), (10000, 100), (8, 4096), (8, 16384)):
        x = dezero.Variable(xp.asarray(rng.standard_normal((rows, classes)), xp.float32))
        t = xp.asarray(rng.integers(0, classes, rows))
        traced = dezero.trace(loss_and_gradient)
        traced(x, t)
        cells = timed_cells(traced.graph, loss_and_gradient, xp, sync, repeat, x, t)
        print(f"| {rows} x {classes} | {cells} | "
              f"{launches(traced.graph) if xp is not np else '-'} |")


def peak_bandwidth(xp):
    """Bytes per second the device's memory moves at its peak (DDR: two transfers a
    clock), or None where its properties do not say (CUDA 13 dropped the clock)."""
    props = xp.cuda.runtime.getDeviceProperties(0)
    clock_khz, bus_bits = props.get("memoryClockRate", 0), props.get("memoryBusWidth", 0)
    return 2 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None


def launches(graph):
    """Kernel launches of one replay: each cupy kernel of the compiled groups (a row
    kernel's sum over all rows is one more), each node outside them a library call
    (at least one launch)."""
    kernels = re.findall(r"^// kernel \w+: cupy\.", graph.compile("cupy").kernel_source, re.M)
    grouped = {id(n) for g in graph.groups if g.compiled for n in g.nodes}
    return len(kernels) + sum(1 for n in graph.of_kind("op") if id(n) not in grouped)


def bench_targets(xp, sync, repeat, n):
    """The measured targets, as a list of dicts (name, measured, target, met)."""
    chain, by_hand = CHAINS["arithmetic"]
    x = xp.asarray(np.random.default_rng(0).standard_normal(n), xp.float32)
    a, b = xp.asarray(0.5, xp.float32), xp.asarray(0.25, xp.float32)
    traced = dezero.trace(chain)
    traced(x, a, b)
    fused = median_time(sync, repeat, traced.graph.compile("cupy"), x, a, b)
    fuse = xp.fuse(kernel_name="chain")(lambda x, a, b: by_hand(xp, x, a, b))
    cupy_fuse = median_time(sync, repeat, fuse, x, a, b)
    peak = peak_bandwidth(xp) or triad_bandwidth(xp, sync, n, repeat)
    rate = 8 * n / fused  # x read, y written

    rng = np.random.default_rng(0)
    xs = xp.asarray(rng.standard_normal((100, 784)), xp.float32)
    t = xp.asarray(rng.integers(0, 10, 100))
    model = MLP((1000, 10), activation=F.relu)
    model(dezero.cuda.as_numpy(xs[:1]))
    model.to_gpu()
    step = step_function(model, optimizers.Adam().setup(model))
    traced_step = dezero.trace(step)
    traced_step(xs, t)
    replay = median_time(sync, repeat, traced_step, xs, t)
    eager = median_time(sync, repeat, step, xs, t)
    return [
        {"name": f"fused chain, {n:.0e} float32: share of memory bandwidth",
         "measured": rate / peak, "target": ">= 0.80", "met": rate / peak >= 0.8,
         "detail": f"{rate / 1e9:.0f} GB/s of {peak / 1e9:.0f} GB/s"},
        {"name": "fused chain against cupy.fuse (time ratio, fused / cupy.fuse)",
         "measured": fused / cupy_fuse, "target": "<= 1.00", "met": fused <= cupy_fuse,
         "detail": f"{fused * 1e3:.3f} ms against {cupy_fuse * 1e3:.3f} ms"},
        {"name": "traced MLP Adam step against eager on cupy (speed-up)",
         "measured": eager / replay, "target": ">= 2.0", "met": eager / replay >= 2,
         "detail": f"{replay * 1e6:.0f} us against {eager * 1e6:.0f} us"},
        {"name": "kernel launches per traced MLP Adam step", "measured":
         launches(traced_step.graph), "target": "as few as fusion allows", "met": None,
         "detail": f"{len(traced_step.graph.groups)} fused kernels"},
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--cpu", action="store_true", help="run on numpy, unfused")
    parser.add_argument("--n", type=float, default=1e8, help="elements of the target chain")
    parser.add_argument("--json", help="write the targets' measurements to this file")
    args = parser.parse_args()
    if args.cpu:
        xp, sync = np, (lambda: None)
    elif not dezero.cuda.gpu_enable:
        sys.exit(f"no GPU: {dezero.cuda.no_gpu_reason} (--cpu runs the script on numpy)")
    else:
        xp = dezero.cuda.cupy
        sync = xp.cuda.Device().synchronize
        print(f"{xp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, "
              f"cupy {xp.__version__}")
    bench_chains(xp, sync, args.repeat)
    bench_steps(xp, sync, args.repeat)
    bench_losses(xp, sync, args.repeat)
    if xp is np:
        return
    targets = bench_targets(xp, sync, args.repeat, int(args.n))
    print("\n| target | measured | asked | met | |\n|---|---|---|---|---|")
    for row in targets:
        met = {True: "yes", False: "NO", None: "-"}[row["met"]]
        print(f"| {row['name']} | {row['measured']:.3g} | {row['target']} | {met} "
              f"| {row['detail']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(targets, f, indent=1)


if __name__ == "__main__":
    main()
