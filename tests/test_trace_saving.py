"""Saving and loading static graphs: round trip, standalone runs, damaged files."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.static import GraphFileError, StaticGraph


def training_graph():
    W = Variable(np.arange(6, dtype=np.float32).reshape(2, 3) / 10, name="W")
    b = Variable(np.zeros(3, np.float32), name="b")
    lr = Variable(np.array(0.1, np.float32), name="lr")

    def step(x, t):
        y = F.linear(x, W, b)
        loss = F.sum((y - t) ** 2)
        W.cleargrad()
        b.cleargrad()
        loss.backward()
        with dezero.no_grad():
            W.data = (W - lr * W.grad).data
            b.data = (b - lr * b.grad).data
        return loss, y

    x = np.ones((4, 2), np.float32)
    t = np.zeros((4, 3), np.float32)
    traced = dezero.trace(step)
    graph = traced.lower(x, t)
    return graph, traced, (W, b), (x, t)


def test_round_trip_runs_like_the_original(tmp_path):
    graph, traced, (W, b), (x, t) = training_graph()
    graph.save(str(tmp_path / "step"))
    assert (tmp_path / "step.json").exists() and (tmp_path / "step.npz").exists()
    loaded = StaticGraph.load(str(tmp_path / "step.json"))
    assert str(loaded) == str(graph)
    assert loaded.input_names == ["x", "t"]
    for _ in range(3):
        loss, y = traced(x, t)
        loss2, y2 = loaded(x, t)
        np.testing.assert_allclose(loss2.data, loss.data, rtol=1e-6)
        np.testing.assert_allclose(loaded.state["W"].data, W.data, rtol=1e-6)
    assert loaded.state["W"] is not W  # the loaded graph owns its state


@pytest.mark.slow
def test_loaded_graph_runs_standalone_in_a_fresh_process(tmp_path):
    graph, traced, _, (x, t) = training_graph()
    graph.save(str(tmp_path / "step.json"))
    expected = [float(traced(x, t)[0].data) for _ in range(2)]
    script = (
        "import numpy as np, dezero.static as S\n"
        f"g = S.load({str(tmp_path / 'step.json')!r})\n"
        "x = np.ones((4, 2), np.float32); t = np.zeros((4, 3), np.float32)\n"
        "print(*[float(g(x, t)[0].data) for _ in range(2)])\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(dezero.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, env=env, check=True).stdout.split()
    np.testing.assert_allclose([float(v) for v in out], expected, rtol=1e-6)


def test_an_in_place_state_write_round_trips(tmp_path):
    W = Variable(np.ones(3, np.float32), name="W")

    @dezero.trace
    def bump(x):
        W.data += x  # the book's in-place idiom: a write marked in_place
        return W * 2

    x = np.arange(3, dtype=np.float32)
    graph = bump.lower(x)
    assert [n.attrs for n in graph.of_kind("write")] == [{"field": "data", "in_place": True}]
    graph.save(str(tmp_path / "bump"))
    loaded = dezero.static.load(str(tmp_path / "bump"))
    assert [n.attrs for n in loaded.of_kind("write")] == [{"field": "data", "in_place": True}]
    expected = np.ones(3, np.float32)
    for _ in range(3):
        expected = expected + x
        np.testing.assert_array_equal(loaded(x).data, expected * 2)
    np.testing.assert_array_equal(next(iter(loaded.state.values())).data, expected)


def test_json_format_is_documented_and_versioned(tmp_path):
    graph, *_ = training_graph()
    graph.save(str(tmp_path / "g.json"))
    description = json.loads((tmp_path / "g.json").read_text())
    assert description["format"] == "dezero.static-graph" and description["version"] == 2
    kinds = [n["kind"] for n in description["nodes"]]
    assert kinds[:2] == ["input", "input"] and kinds[-1] == "output" and "write" in kinds
    ops = [n for n in description["nodes"] if n["kind"] == "op"]
    assert all(isinstance(n["op"], str) for n in ops)


@pytest.mark.parametrize("damage, message", [
    (lambda j, z: j.write_text(j.read_text()[:100]), "corrupt or truncated JSON"),
    (lambda j, z: z.write_bytes(z.read_bytes()[:50]), "hash differs"),
    (lambda j, z: z.unlink(), "missing"),
    (lambda j, z: j.write_text(j.read_text().replace('"version": 2', '"version": 7')),
     "format version 7; this dezero reads versions up to 3"),
    (lambda j, z: j.write_text('{"hello": 1}'), "not a dezero static graph file"),
])
def test_damaged_files_give_clear_errors(tmp_path, damage, message):
    graph, *_ = training_graph()
    graph.save(str(tmp_path / "g.json"))
    damage(tmp_path / "g.json", tmp_path / "g.npz")
    with pytest.raises(GraphFileError, match=message):
        StaticGraph.load(str(tmp_path / "g.json"))


def test_attributes_of_every_kind_survive_the_round_trip(tmp_path):
    def f(x):
        y = F.get_item(x, (slice(1, None), slice(None, None, 2)))
        y = F.transpose(y, (1, 0))
        return F.sum(y, axis=(0,), keepdims=True)

    graph = dezero.trace(f).lower(np.arange(12, dtype=np.float32).reshape(3, 4))
    graph.save(str(tmp_path / "g"))
    loaded = dezero.static.load(str(tmp_path / "g"))
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * 2
    np.testing.assert_array_equal(loaded(x).data, graph(x).data)
    assert str(loaded) == str(graph)


def test_returned_python_numbers_of_every_kind_round_trip(tmp_path):
    returned = (float("nan"), float("inf"), -float("inf"), 1.5, 3, True, None, "done")

    @dezero.trace
    def f(x):
        return (F.exp(x), *returned)

    f(Variable(np.ones(2)))
    f.graph.save(str(tmp_path / "f"))
    text = (tmp_path / "f.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    y, *numbers = StaticGraph.load(str(tmp_path / "f.json"))(np.ones(2))
    np.testing.assert_allclose(y.data, np.exp(np.ones(2)))
    assert np.isnan(numbers[0]) and numbers[1:3] == [np.inf, -np.inf]
    assert numbers[3:] == [1.5, 3, True, None, "done"]
    assert [type(n) for n in numbers] == [type(r) for r in returned]
