"""Graph files are data: crafted text in a saved graph never runs, and load() names
the field it rejects."""
import numpy as np
import pytest

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Variable
from dezero.static import GraphError
from dezero.static.backends.pycode import generate

# Code that leaves a trace if it ever runs: a file in the working directory.
RUN_MARKER = "PWNED"
ESCAPE = "\n    pass\nopen('PWNED', 'w').close()\ndef after():  #"


class Carry(L.Layer):
    """Keeps a value between calls in an attribute, as LSTM keeps h."""

    def __init__(self):
        super().__init__()
        self.h = None

    def __call__(self, y):
        self.h = y if self.h is None else self.h * 0.5 + y
        return self.h


def small_graph():
    """A graph whose file holds every kind of field: inputs; state read from .data,
    from .grad and from an attribute; a constant; op attributes (a slice, an
    ellipsis, a float infinity, ints, bools); state writes; an output tree with a
    static value."""
    W = Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="W")
    W.grad = Variable(np.ones((2, 3), np.float32))
    carry = Carry()

    def f(x):
        y = F.get_item(x, (slice(1, None), Ellipsis))
        z = F.sum(F.clip(y, -np.inf, 2.5) * W, axis=1)
        W.data = (W - W.grad * 0.5).data
        return {"z": z, "c": carry(z), "n": 3}

    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    traced = dezero.trace(f)
    traced(x)  # the first call sets carry.h, which later calls read
    return traced.lower(x), x


def test_the_code_generator_refuses_or_escapes_unsafe_text_itself(tmp_path, monkeypatch):
    # Graphs built in memory (not loaded) with hostile names: the generator checks
    # what it emits, so such text is refused or escaped, never run.
    monkeypatch.chdir(tmp_path)
    for hostile in ("print(1)", "_xp", "import", "sum", "a\nb", "ｐｒｉｎｔ"):
        graph, x = small_graph()
        graph.of_kind("op")[0].outputs[0].name = hostile
        with pytest.raises(GraphError, match="not a safe name"):
            generate(graph)
    graph, x = small_graph()
    graph.name = "f" + ESCAPE
    get_item = graph.of_kind("op")[0]
    get_item.attrs["k" + ESCAPE] = 1
    get_item.attrs["slices"] = (slice(ESCAPE, None),)
    source, env, *_ = generate(graph)
    exec(compile(source, "<replay>", "exec"), env)
    assert len(source.splitlines()) == len(generate(small_graph()[0])[0].splitlines())
    assert not (tmp_path / RUN_MARKER).exists()
