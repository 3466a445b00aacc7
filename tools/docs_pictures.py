"""Draw the pictures of the documentation pages into docs/pictures/.

Each picture is a small example, so that it is legible at the width of a page
(tests/test_docs.py checks the width of every picture a page shows): the dynamic
and static graphs of one layer (index), of a loop (define-by-run), of a linear
regression's training step (trace mode, define-and-run) and of a user op fused
into a kernel (fusion and kernels). The demo's full-size spiral pictures stay in
docs/define-and-run/pictures/ (python -m dezero demo --out ...), linked, not shown.
Needs Graphviz's `dot` (or graphviz-pure).

    python tools/docs_pictures.py
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
import dezero.layers as L  # noqa: E402
from dezero import Function, Variable, cuda, optimizers, utils  # noqa: E402

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


def main():
    OUT.mkdir(exist_ok=True)
    for stem, dot in pictures():
        utils.render_dot(dot, str(OUT / f"{stem}.svg"))
        print("wrote", (OUT / f"{stem}.svg").relative_to(ROOT))


if __name__ == "__main__":
    main()
