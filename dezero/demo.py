"""The demo behind `python -m dezero demo`: train the spiral network, show its graphs.

It trains the book's spiral classifier (MLP((10, 3)), here with Adam, whose update
of each parameter is long enough to pay as a compiled kernel) three times from the
same initial weights: eagerly, then with the training step wrapped in
`dezero.trace` and replayed as generated Python code (the python backend), then
replayed with its elementwise chains as fused, compiled C++ kernels (the cpu
backend). It prints accuracy and the steady-state time of each (the one-time
recording and compiling of the traced step on a line of its own, so a cold kernel
cache gives the same ratios as a warm one), and writes three pictures as .dot files,
plus .svg when Graphviz's `dot` is installed: the dynamic graph of the loss, the
static graph of the traced step, and the same static graph with its fused kernels
drawn as clusters.

    python -m dezero demo --out dezero-demo
"""
import argparse
import contextlib
import os
import sys
import time

import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers, utils
from dezero.datasets import get_spiral
from dezero.models import MLP

# Adam's step size for the spiral: it fits the data in the demo's 300 epochs.
ALPHA = 0.03

# =============================================================================
# Command line: build_parser, main
# =============================================================================


def build_parser(parser=None):
    """The options of the demo, added to `parser` (a new one when None)."""
    if parser is None:
        parser = argparse.ArgumentParser(prog="python -m dezero demo")
    parser.description = ("Train the spiral classifier eagerly, traced and fused, print "
                          "accuracy and timings, and write the dynamic graph, the static "
                          "graph and its fused kernels.")
    parser.add_argument("--out", metavar="DIR", default="dezero-demo",
                        help="folder for the graph files (default: ./dezero-demo)")
    parser.add_argument("--epochs", type=int, default=300,
                        help="training epochs of 10 batches each (default: 300)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed for the initial weights and the batch order (default: 0)")
    return parser


def main(args):
    """Run the demo for parsed `args`; return the exit status."""
    if args.epochs < 1:
        print(f"dezero demo: --epochs must be at least 1, got {args.epochs}", file=sys.stderr)
        return 2
    x, t = get_spiral(train=True)
    x_test, t_test = get_spiral(train=False)
    print(f"dezero demo: spiral classification, {len(x)} points in 3 classes; "
          f"MLP((10, 3)), Adam(alpha={ALPHA}), {args.epochs} epochs of 10 batches")

    with _seeded(args.seed):
        initial = MLP((10, 3))
        initial(x[:1])      # the layers make their weights at the first call
    # The traced step replays with the python backend (the replay code, a numpy call
    # per node) and with the cpu backend (each fused group one compiled kernel).
    runs = [("eager", None)] + ([("traced", "python"), ("fused", "cpu")]
                                if hasattr(dezero, "trace") else [])
    print(f"seconds for the {args.epochs * 10 - 1} training steps after the first, in "
          f"the steady state (a traced step's first call records and compiles it, "
          f"timed below)")
    results = {}
    for name, backend in runs:
        model = _copy_of(initial)
        seconds, loss, traced = _train(model, x, t, args.epochs, args.seed, backend, name)
        with dezero.no_grad():
            accuracy = float(F.accuracy(model(x), t).data)
            test_accuracy = float(F.accuracy(model(x_test), t_test).data)
        results[name] = (seconds, traced)
        print(f"{name:6s}: {seconds:6.2f} s   final loss {loss:.4f}   "
              f"train accuracy {accuracy:.3f}   test accuracy {test_accuracy:.3f}"
              + ("" if traced is None else f"   ({_how_it_replays(traced)})"))
    if "traced" in results:
        eager = results["eager"][0]
        print(f"traced / eager: {eager / max(results['traced'][0], 1e-9):.1f}x as fast; "
              f"fused / eager: {eager / max(results['fused'][0], 1e-9):.1f}x as fast")
        print(_first_call_text(results["fused"][1]))
    else:
        print("traced: skipped, this build of dezero has no trace mode (dezero.trace)")

    written = _write_graphs(args.out, _dynamic_graph(initial, x, t), results)
    print(f"wrote {', '.join(written)} to {args.out}")
    return 0


# =============================================================================
# Training: _train, _copy_of, _seeded, _progress
# =============================================================================


@contextlib.contextmanager
def _seeded(seed):
    # The layers draw their initial weights from the global numpy RNG (as in the
    # book); seed it for a repeatable demo and give the caller its state back.
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _copy_of(model):
    """A new MLP((10, 3)) with the same weights as `model`, named W0, b0, W1, b1."""
    copy = MLP((10, 3))
    for i, (source, target) in enumerate(zip(model.layers, copy.layers)):
        target.W = dezero.Parameter(source.W.data.copy(), name=f"W{i}")
        target.b = dezero.Parameter(source.b.data.copy(), name=f"b{i}")
    return copy


def _train(model, x, t, epochs, seed, backend, name):
    """Train `model`, eagerly or (backend named) traced and replayed with that backend;
    return (seconds of every step but the first, mean loss of the last epoch, the
    traced function or None). The first step is left out of the time: for a traced
    step it is the recording and the compiling, done once (see _first_call_text)."""
    optimizer = optimizers.Adam(alpha=ALPHA).setup(model)

    def step(xb, tb):
        loss = F.softmax_cross_entropy(model(xb), tb)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    traced = None
    if backend is not None:
        traced = dezero.trace(step)
        step = _replayed_with(traced, backend)
    # The same batch order for every run, from a private generator.
    rng = np.random.RandomState(seed)
    batch_size = 30
    seconds, first = 0.0, True
    with _progress(epochs, name) as progress:
        for _ in range(epochs):
            order = rng.permutation(len(x))
            total = 0.0
            for i in range(0, len(x), batch_size):
                batch = order[i:i + batch_size]
                xb, tb = x[batch], t[batch]
                start = time.perf_counter()
                loss = step(xb, tb)
                if not first:
                    seconds += time.perf_counter() - start
                first = False
                total += float(loss.data) * len(batch)
            progress(total / len(x))
    return seconds, total / len(x), traced


def _replayed_with(traced, backend):
    """A step that records through `traced` at its first call, then replays the graph
    compiled by `backend` (every batch of the demo has one shape: one graph). The
    recording and the compiling are timed apart, in traced.first_call."""
    plan = None

    def step(xb, tb):
        nonlocal plan
        if plan is None:
            start = time.perf_counter()
            with _recording_compiles_with("python"):  # the kernels are compiled below
                loss = traced(xb, tb)       # runs eagerly once, recording the graph
            recorded, wall = time.perf_counter(), time.time()
            plan = traced.graph.compile(backend).wait()  # the compiler, timed alone
            traced.plan = plan
            traced.first_call = (recorded - start, time.perf_counter() - recorded, wall)
            return loss
        return plan(xb, tb)
    return step


@contextlib.contextmanager
def _recording_compiles_with(backend):
    # A recording compiles its graph with the default backend; the demo compiles the
    # one it replays with itself, so that the time of compiling is measured alone.
    from dezero.static import backends
    default, backends.DEFAULT = backends.DEFAULT, backend
    try:
        yield
    finally:
        backends.DEFAULT = default


def _first_call_text(traced):
    """The one-time cost of the fused run's first call: recording and compiling."""
    record, compile_seconds, compile_began = traced.first_call
    text = f"first call of the traced step, once: recording {record:.2f} s"
    library = getattr(traced.plan, "library", None)
    if library is None:
        return text
    cached = os.path.getmtime(library.path) < compile_began
    return (text + f"; {len(library.specs)} C++ kernels " +
            (f"loaded from the kernel cache in {compile_seconds:.2f} s" if cached else
             f"compiled in {compile_seconds:.2f} s (kept in the kernel cache "
             f"{library.path.parent}: later runs load them)"))


def _how_it_replays(traced):
    library = getattr(traced.plan, "library", None)  # the cpu backend's kernels
    if library is None:
        return "replayed unfused: generated Python code, one numpy call per node"
    # The backend compiles every group, then times each kernel against its group's
    # numpy calls; those measured faster run compiled (kernels/measure.py).
    compiled = sum(g.compiled for g in traced.graph.groups)
    return (f"replayed with {compiled} of its {len(traced.graph.groups)} fused groups as "
            f"compiled C++ kernels")


@contextlib.contextmanager
def _progress(epochs, name):
    """A callable taking the epoch's loss: a tqdm bar when tqdm is installed,
    otherwise a line every tenth of the run."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar = tqdm(total=epochs, desc=f"{name:6s}", unit="epoch", leave=False,
                   file=sys.stderr, mininterval=0.2)

        def update(loss):
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        try:
            yield update
        finally:
            bar.close()
        return
    count = 0
    every = max(1, epochs // 10)

    def report(loss):
        nonlocal count
        count += 1
        if count % every == 0 or count == epochs:
            print(f"  {name} epoch {count}/{epochs}  loss {loss:.4f}", file=sys.stderr)
    yield report


# =============================================================================
# Graphs: _dynamic_graph, _static_graph_dots, _write_graphs
# =============================================================================


def _dynamic_graph(model, x, t):
    """DOT text of the dynamic graph of one batch's loss, with shapes."""
    model = _copy_of(model)
    loss = F.softmax_cross_entropy(model(x[:30]), t[:30])
    loss.name = "loss"
    return utils.get_dot_graph(loss, verbose=True)


def _static_graph_dots(traced_step):
    """DOT texts of the static graph a traced function recorded: plain, then with its
    fused kernels drawn as clusters."""
    graph = traced_step.graph
    return graph.with_nodes(graph.nodes).to_dot(), graph.to_dot()  # with_nodes: no groups


def _write_graphs(out, dynamic_dot, results):
    """Write the graphs as .dot (and .svg with Graphviz); return the file names."""
    os.makedirs(out, exist_ok=True)
    graphs = [("dynamic_graph", dynamic_dot)]
    if "traced" in results:
        static, fused = _static_graph_dots(results["fused"][1])
        graphs += [("static_graph", static), ("fused_kernels", fused)]
    render = utils.find_dot() is not None
    written = []
    for stem, text in graphs:
        utils.render_dot(text, os.path.join(out, stem + ".dot"))
        written.append(stem + ".dot")
        if render:
            utils.render_dot(text, os.path.join(out, stem + ".svg"))
            written.append(stem + ".svg")
    if not render:
        print("no .svg files: Graphviz's `dot` was not found (install Graphviz, or "
              "pip install 'dezero[viz]' for graphviz-pure); the .dot files hold the graphs",
              file=sys.stderr)
    return written
