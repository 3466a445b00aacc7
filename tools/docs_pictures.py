"""Draw the pictures of the documentation pages into docs/pictures/.

Each picture is a small example, so that it is legible at the width of a page
(tests/test_docs.py checks the width of every picture a page shows): the dynamic
and static graphs of one layer (index), of a loop (define-by-run), of a linear
regression's training step (trace mode, define-and-run), of a user op fused
into a kernel, of an MLP's SGD updates before and after horizontal fusion and of
a batch's loss and gradient before and after they fuse (fusion and kernels). The
demo's full-size spiral pictures stay in docs/define-and-run/pictures/ (python -m
dezero demo --out ...), linked, not shown.
Needs Graphviz's `dot` (or graphviz-pure).

    python tools/docs_pictures.py
"""
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
import dezero.layers as L  # noqa: E402
from dezero import Function, Variable, cuda, optimizers, utils  # noqa: E402
from dezero.static import passes  # noqa: E402

OUT = ROOT / "docs" / "pictures"


def layer(x, W, b):
    h = F.tanh(F.matmul(x, W) + b)
    return F.sum(h * h)


def series(x, n=4):
    y = x
    for k in range(2, n + 1):
        y = y + x ** k / k
    return y


class Swish(Function):
    """y = x * sigmoid(x), the user op of the kernels page."""
    cpp = "{x} / (1 + exp(-{x}))"

    def forward(self, x):
        xp = cuda.get_array_module(x)
        return x / (1 + xp.exp(-x))


def regression():
    """A linear regression, its SGD optimizer and its training step."""
    np.random.seed(0)
    fc = L.Linear(1)  # the graph names state by where the step finds it (fc_W, opt_lr)
    opt = optimizers.SGD(lr=0.1).setup(fc)

    def train_step(x, t):
        loss = F.mean_squared_error(fc(x), t)
        fc.cleargrads()
        loss.backward()
        opt.update()
        return loss
    return fc, train_step


def pictures():
    """(file stem, DOT text) of every picture."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    W = rng.standard_normal((3, 5)).astype(np.float32)
    b = np.zeros(5, np.float32)
    y = layer(Variable(x, name="x"), Variable(W, name="W"), Variable(b, name="b"))
    y.name = "y"
    yield "layer_dynamic", utils.get_dot_graph(y, verbose=False)
    yield "layer_fused", dezero.trace(layer).lower(x, W, b).to_dot()

    s = series(Variable(np.array(0.5), name="x"))
    s.name = "y"
    yield "series_dynamic", utils.get_dot_graph(s, verbose=False)
    yield "series_static", dezero.trace(series).lower(np.array(0.5)).to_dot()

    xs = rng.standard_normal((8, 1)).astype(np.float32)
    ts = 2 * xs + 1
    model, train_step = regression()
    loss = F.mean_squared_error(model(xs), ts)
    loss.name = "loss"
    yield "step_dynamic", utils.get_dot_graph(loss, verbose=False)
    graph = dezero.trace(train_step).lower(xs, ts)
    yield "step_static", graph.with_nodes(graph.nodes).to_dot()  # with_nodes: no groups
    # Scaled down by Graphviz where wider than a page (8.3 inches: about 600 pt).
    yield "step_fused", graph.to_dot().replace("rankdir=TB;", 'rankdir=TB; size="8.3,30";', 1)

    def with_swish(x, b):
        return F.sum(Swish()(x + b) * 2.0)
    yield "swish_fused", dezero.trace(with_swish).lower(x, b[:3]).to_dot()
    yield from updates(xs)
    yield from losses(rng)


def updates(x):
    """The SGD updates of a two-layer MLP (the graph's last nodes, from the first
    update on): four kernels of two ops, then the one horizontal kernel they merge into."""
    np.random.seed(0)
    model = dezero.models.MLP((4, 1))
    opt = optimizers.SGD(lr=0.1).setup(model)

    def train_step(x, t):
        loss = F.mean_squared_error(model(x), t)
        model.cleargrads()
        loss.backward()
        opt.update()
        return loss
    graph = dezero.trace(train_step).lower(x, 2 * x + 1)
    update, = [g for g in graph.groups if g.segments]
    nodes = graph.nodes[graph.nodes.index(update.nodes[0]):]
    reads = {id(v) for n in nodes for v in n.inputs} - {id(v) for n in nodes for v in n.outputs}
    inputs = [dezero.static.ir.Node("input", outputs=[v]) for v in update.inputs
              if id(v) in reads]
    tail = graph.with_nodes(inputs + [n for n in nodes if n.kind == "op" or
                                      n.kind == "write" and n.attrs["field"] == "data"])
    first = int(update.name[1:])  # without the rule, the segments were kernels of their own
    tail.groups = [dataclasses.replace(s, name=f"k{first + j}")
                   for j, s in enumerate(update.segments)]
    yield "updates_apart", _fit(tail.to_dot())
    tail.groups = [update]
    yield "updates_horizontal", _fit(tail.to_dot())


def losses(rng):
    """A batch's softmax_cross_entropy and its gradient after a bias add: the op
    whole (as on the GPU, where the passes leave it so), then split into its steps
    and fused into one reduction kernel (on the CPU)."""
    def loss_step(y, b, t):
        loss = F.softmax_cross_entropy(y + b, t)
        loss.backward()
        return loss, y.grad
    args = (Variable(rng.standard_normal((4, 3)).astype(np.float32)),
            np.zeros(3, np.float32), rng.integers(0, 3, 4))
    trace_module = sys.modules["dezero.static.trace"]  # dezero.static.trace: the function
    whole = tuple(p for p in passes.PIPELINE if p is not passes.split_parts)
    trace_module.optimize = lambda graph: passes.optimize(graph, whole)
    try:
        unsplit = dezero.trace(loss_step).lower(*args)
    finally:
        trace_module.optimize = passes.optimize
    yield "loss_whole", unsplit.to_dot()
    yield "loss_fused", dezero.trace(loss_step).lower(*args).to_dot()


def _fit(dot):
    """Scaled down by Graphviz where wider than a page (8.3 inches: about 600 pt)."""
    return dot.replace("rankdir=TB;", 'rankdir=TB; size="8.3,30";', 1)


def main():
    OUT.mkdir(exist_ok=True)
    for stem, dot in pictures():
        utils.render_dot(dot, str(OUT / f"{stem}.svg"))
        print("wrote", (OUT / f"{stem}.svg").relative_to(ROOT))


if __name__ == "__main__":
    main()
