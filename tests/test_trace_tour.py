"""The tour of dezero.static's docstring, run: its printed graph and code stay true."""
import numpy as np
from backend_helpers import python_code

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.static.codegen import kernel_spec


def indented(text):
    return "\n".join(("    " + line) if line else "" for line in text.rstrip("\n").splitlines())


def test_docstring_tour_shows_the_real_graph_and_replay_code():
    W = Variable(np.zeros((3, 1), np.float32), name="W")
    b = Variable(np.zeros(1, np.float32), name="b")
    lr = Variable(np.array(0.1, np.float32), name="lr")

    @dezero.trace
    def step(x, t):
        loss = F.mean_squared_error(F.linear(x, W, b), t)
        W.cleargrad()
        b.cleargrad()
        loss.backward()
        with dezero.no_grad():
            W.data = (W - lr * W.grad).data
            b.data = (b - lr * b.grad).data
        return loss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    t = x @ np.array([[1.0], [2.0], [3.0]], np.float32) + 0.5
    losses = [float(step(x, t).data) for _ in range(30)]
    assert losses[-1] < 0.1 * losses[0]  # the replayed steps do learn
    graph = step.lower(x, t)
    doc = dezero.static.__doc__
    assert indented(str(graph)) in doc
    assert indented(python_code(graph)) in doc
    assert indented(str(graph.program)) in doc
    spec = kernel_spec(graph.groups[1]).segments[0]
    assert indented(spec.body) in doc
