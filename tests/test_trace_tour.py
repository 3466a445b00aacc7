"""The tour of dezero.static's docstring, run: its printed graph and code stay true."""
from backend_helpers import python_code
from train_helpers import linear_regression_step

import dezero
from dezero.kernels.codegen import kernel_spec
from dezero.static import backends


def indented(text):
    return "\n".join(("    " + line) if line else "" for line in text.rstrip("\n").splitlines())


def test_docstring_tour_shows_the_real_graph_and_replay_code(monkeypatch):
    # As users print it before its kernels are measured (the python backend measures
    # none, whatever DEZERO_BACKEND the suite runs with), not as the tests run them.
    monkeypatch.setenv("DEZERO_KERNELS", "measure")
    monkeypatch.setattr(backends, "DEFAULT", "python")
    step, x, t = linear_regression_step()
    losses = [float(step(x, t).data) for _ in range(30)]
    assert losses[-1] < 0.1 * losses[0]  # the replayed steps do learn
    graph = step.lower(x, t)
    doc = dezero.static.__doc__
    assert indented(str(graph)) in doc
    assert indented(python_code(graph)) in doc
    assert indented(str(graph.program)) in doc
    spec = kernel_spec(graph.groups[1]).segments[0]
    assert indented(spec.body) in doc
