"""Kernels of symbolic sizes: a graph whose shapes hold B or T fuses as a static one,
its C++ kernels take the sizes' values as an array beside the arrays (the loops read
their extents from it), and its replays at any size equal eager code; graph files
keep the sizes and the relations between them."""
import json

import numpy as np
import pytest
from backend_helpers import assert_within_ulps
from train_helpers import training_step

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.errors import GraphError, GraphFileError
from dezero.kernels import cpu
from dezero.static import passes

needs_compiler = pytest.mark.skipif(cpu.missing_reason() is not None,
                                    reason=str(cpu.missing_reason()))


def _mlp_step(seed=0):
    """An MLP's Adam training step (forward, loss, backward, update), and its model."""
    np.random.seed(seed)
    model = dezero.models.MLP((16, 3))
    model(np.zeros((1, 2), np.float32))
    return model, training_step(model, optimizers.Adam().setup(model))


def _batch(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 2)).astype(np.float32), rng.integers(0, 3, n)


def test_a_symbolic_graph_fuses_as_the_static_one_does():
    _, step = _mlp_step()
    static = dezero.trace(step, dynamic=False).lower(*_batch(8, 0))
    _, step = _mlp_step()
    symbolic = dezero.trace(step, dynamic=True).lower(*_batch(8, 0))
    assert "x: f32[B,2], t: i64[B]" in str(symbolic)
    assert [[n.op for n in g.nodes] for g in symbolic.groups] == \
        [[n.op for n in g.nodes] for g in static.groups]
    sized = [g for g in symbolic.groups if g.sizes]
    assert sized and all(g.sizes == ("B",) for g in sized)
    assert any(g.axes is not None for g in sized)  # the loss's rows and its mean over B
    assert not any(g.sizes for g in symbolic.groups if g.segments)  # Adam: fixed shapes


def test_a_size_that_may_be_zero_stays_out_of_kernels():
    def f(x):
        return F.tanh(x[1:] * 2.0)  # x[1:] has B - 1 rows: none where B is 1

    graph = dezero.trace(f, dynamic=True).lower(dezero.Variable(np.ones((5, 3), np.float32)))
    node, = [n for n in graph.of_kind("op") if n.op == "tanh"]
    assert "B - 1" in str(node) and "may be 0" in passes.fusion_refusal(node)
    assert not graph.groups


@needs_compiler
@pytest.mark.parametrize("sizes", [(8, 2, 5, 17, 64, 3, 128), (3, 31, 2, 7)])
def test_kernels_of_symbolic_batch_size_replay_as_eager(sizes):
    (eager_model, eager), (model, step) = _mlp_step(), _mlp_step()
    traced = dezero.trace(step, dynamic=True)
    graph = traced.lower(*_batch(sizes[0], 0))
    plan = graph.compile("cpu").wait()
    assert "_S[0]" in plan.kernel_source and "sizes=(_n_B,)" in plan.source
    for i, n in enumerate(sizes):
        x, t = _batch(n, i + 1)
        want = eager(x, t).data
        got = plan.run((x, t))
        assert_within_ulps(got.data, want, scale=8.0, ulps=64, err_msg=f"B={n}")
        for p, q in zip(model.params(), eager_model.params(), strict=True):
            np.testing.assert_allclose(p.data, q.data, rtol=1e-4, atol=1e-6,
                                       err_msg=f"B={n}")


@needs_compiler
def test_a_kernel_refuses_sizes_that_are_not_its_array_of_sizes():
    graph = dezero.trace(lambda x: F.sum(F.tanh(x) * 2.0, axis=1),
                         dynamic=True).lower(np.ones((4, 5), np.float32))
    plan = graph.compile("cpu").wait()
    (group,) = graph.groups
    run = plan.library.kernel(group.spec)
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    y, = run(x, np.float32(2), sizes=(3, 7))
    np.testing.assert_allclose(y, np.sum(np.tanh(x) * 2, axis=1), rtol=1e-5)
    for wrong in ((), (3,), (3, "7"), (3, -7), [3, 7], np.array([3, 7])):
        with pytest.raises(TypeError, match=r"takes the values of its sizes \(B, T\) as "
                                            r"sizes=, a tuple of 2 ints"):
            run(x, np.float32(2), sizes=wrong)
    # the array of sizes the C entry reads: one of another type or length is refused
    call, two = plan.library._builtin(group.spec, 1), np.array(2, np.float32)
    out = np.empty(3, np.float32)
    assert call(x, two, out, np.array([3, 7], np.intp)) == 0
    np.testing.assert_array_equal(out, y)
    for wrong in (np.array([3, 7], np.int32), np.array([3], np.intp), [3, 7]):
        assert call(x, two, out, wrong) == -1  # "another number of arrays"
    assert call(x, two, out) == -1


def test_tautologies_among_relations_are_dropped():
    def f(x):
        b, t, c = x.shape
        heads = F.reshape(x, (b, t, 2, c // 2))  # and back: B*T*2*4 is B*T*8
        return F.sum(F.reshape(heads, (b, t, c)), axis=2)

    traced = dezero.trace(f)  # B and T symbolic at the second call, 8 stays
    for shape in [(3, 5, 8), (4, 6, 8)]:
        traced(np.ones(shape, np.float32))
    (entry,) = traced._symbolic
    assert [str(r) for r in entry.graph.relations] == ["B >= 2", "T >= 2"]


def _saved_symbolic_step(tmp_path):
    _, step = _mlp_step()
    graph = dezero.trace(step, dynamic=True).lower(*_batch(5, 0))
    graph.save(str(tmp_path / "step.json"))
    return tmp_path / "step.json"


def test_a_symbolic_graph_saves_and_loads_with_its_sizes(tmp_path):
    path = _saved_symbolic_step(tmp_path)
    description = json.loads(path.read_text())
    assert description["version"] == 3 and description["relations"] == ["B >= 2"]
    assert description["nodes"][0]["outputs"][0]["shape"] == [{"$size": "B"}, 2]
    loaded = dezero.static.load(str(path))
    assert "x: f32[B,2], t: i64[B]" in str(loaded)
    model, eager = _mlp_step()
    for n in (2, 9, 4):
        x, t = _batch(n, n)
        np.testing.assert_array_equal(loaded.compile("python")(x, t).data, eager(x, t).data)
    with pytest.raises(TypeError, match="B >= 2"):
        loaded(*_batch(1, 0))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["nodes"][0]["outputs"][0]["shape"].__setitem__(0, {"$size": "__import__('os')"}),
     r"nodes\[0\]\.outputs\[0\]\.shape\[0\]\.\$size: not a size"),
    (lambda d: d["nodes"][0]["outputs"][0]["shape"].__setitem__(0, {"$size": "1/B"}),
     r"shape\[0\]: expected a size of names, ints"),
    (lambda d: d.update(relations=["B >= 2", "Q > 3"]),
     r"relations\[1\]: expected a relation of the graph's sizes \(B\)"),
    (lambda d: d.update(relations=["B >= 2; import os"]),
     r"relations\[0\]: not a size"),
    (lambda d: d.update(relations=["B // 0 > 1"]), r"relations\[0\]: .*a division by 0"),
    (lambda d: d.update(relations=["B > 5", "B < 3"]), r"relations: B > 5, B < 3 hold at no sizes"),
    (lambda d: d["nodes"][0]["outputs"][0]["shape"].__setitem__(0, {"$size": "B - 10"}),
     r"nodes\[0\] \(x: f32\[B - 10,2\] = input\) at B=\d+: a size is negative"),
    (lambda d: d["nodes"][0]["outputs"][0]["shape"].__setitem__(0, {"$size": "N"}),
     r"nodes\[\d+\] .* at B=\d+, N=\d+: linear of f32\[\d+,2\], f32\[2,16\] makes"),
    (lambda d: [n["outputs"][0].update(shape=[{"$size": "Q"}]) for n in d["nodes"][:2]],
     r"nodes\[\d+\] .*: the size B is no size of an input's shape"),
])
def test_a_graph_file_with_bad_sizes_is_refused(tmp_path, edit, message):
    path = _saved_symbolic_step(tmp_path)
    description = json.loads(path.read_text())
    edit(description)
    path.write_text(json.dumps(description))
    with pytest.raises(GraphFileError, match=message):
        dezero.static.load(str(path))


def _random_program(rng, n_ops=10):
    """A random program over x (B, 4) and r (B, 1): elementwise ops, row sums and
    softmaxes, means over the batch (1/B a number of the graph); what kernels of
    symbolic sizes are made of."""
    unary = [F.tanh, F.sin, lambda v: F.exp(v * 0.1), lambda v: -v,
             lambda v: F.sum(v, axis=1, keepdims=True) * 0.5, lambda v: F.softmax(v, axis=1),
             lambda v: F.broadcast_to(F.sum(v, axis=0, keepdims=True) / v.shape[0], v.shape)]
    binary = [F.add, F.mul, F.sub]
    steps = [(int(rng.integers(len(unary))), int(rng.integers(len(binary))),
              int(rng.integers(8))) for _ in range(n_ops)]

    def program(x, r):
        values = [x, r]
        for u, b, other in steps:
            v = unary[u](values[-1])
            values.append(binary[b](v, values[other % len(values)]))
        return F.sum(values[-1], axis=1)
    return program


@pytest.mark.slow  # a library of kernels compiled for each program
@needs_compiler
def test_random_programs_of_symbolic_batch_size_run_fused_as_the_interpreter():
    rng = np.random.default_rng(5)
    for k in range(6):
        program = _random_program(rng)
        graph = dezero.trace(program, dynamic=True).lower(
            rng.standard_normal((5, 4)).astype(np.float32),
            rng.standard_normal((5, 1)).astype(np.float32))
        plan = graph.compile("cpu").wait()
        assert any(g.sizes for g in graph.groups), f"program {k}"
        for n in (1, 2, 3, 7, 31, 128):
            if n == 1:  # a traced graph's names are 2 or more: refused, by name
                with pytest.raises(TypeError, match="B >= 2"):
                    plan(np.ones((1, 4), np.float32), np.ones((1, 1), np.float32))
                continue
            x = rng.standard_normal((n, 4)).astype(np.float32)
            r = rng.standard_normal((n, 1)).astype(np.float32)
            want = graph.interpret(x, r).data
            # A random program may cancel: the bound is what float32 itself loses in
            # it (the interpreter against float64), a few times over, and some ulps.
            exact = dezero.trace(program).lower(x.astype(np.float64), r.astype(np.float64))
            lost = np.abs(want - exact.interpret(x.astype(np.float64), r.astype(np.float64)).data)
            bound = 4 * lost + 16 * np.finfo(np.float32).eps * (1 + np.abs(want))
            assert np.all(np.abs(plan(x, r).data - want) <= bound), f"program {k}, B={n}"


@needs_compiler
def test_kernels_of_symbolic_sizes_are_measured_and_fall_back_to_numpy_with_them(
        monkeypatch, tmp_path):
    """Timed against their numpy statements at the recording's sizes (the statements
    of a sum_to read B and T), and a sum over an input laid out column by column runs
    the numpy statements, given the sizes, as numpy adds such sums otherwise."""
    monkeypatch.setenv("DEZERO_KERNELS", "measure")
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))

    def f(x, b):
        y = F.tanh(x + b) * 2.0
        return F.sum(y, axis=1), F.sum_to(y * x, (1, x.shape[1]))

    graph = dezero.trace(f, dynamic=True).lower(np.ones((6, 5), np.float32),
                                               np.ones(5, np.float32))
    assert graph.hints == {"B": 6, "T": 5}
    plan = graph.compile("cpu").wait()
    assert all("us a call" in g.decision or "numpy calls" in g.decision for g in graph.groups)
    rng = np.random.default_rng(0)
    for x in (rng.standard_normal((9, 7)).astype(np.float32),
              np.asfortranarray(rng.standard_normal((4, 3)).astype(np.float32))):
        b = rng.standard_normal(x.shape[1]).astype(np.float32)
        for got, want in zip(plan(x, b), f(dezero.Variable(x), dezero.Variable(b))):
            np.testing.assert_allclose(got.data, want.data, rtol=1e-5, atol=1e-5)


def test_a_graph_file_whose_sizes_hold_for_one_number_only_is_refused(tmp_path):
    """x[:3] declared of length B, where the load check's first number for B is 3:
    checked at a second number too, it is refused (else a replay computes 6, where
    the file declares a sum of 2 B)."""
    traced = dezero.trace(lambda x: F.sum(x * 2.0), dynamic=True)
    traced(np.ones(5, np.float32))
    path = tmp_path / "s.json"
    traced.graph.save(str(path))
    description = json.loads(path.read_text())
    mul = next(n for n in description["nodes"] if n.get("op") == "mul")
    description["nodes"].insert(description["nodes"].index(mul), {
        "kind": "op", "op": "get_item", "attrs": {"slices": {"$slice": [None, 3, None]}},
        "inputs": ["x"], "outputs": [{"name": "xs", "shape": [{"$size": "B"}],
                                      "dtype": "float32"}]})
    mul["inputs"] = ["xs" if v == "x" else v for v in mul["inputs"]]
    path.write_text(json.dumps(description))
    with pytest.raises(GraphFileError, match=r"get_item\(x\) \[slices=:3\]\) at B=\d+: get_item "
                                             r"of f32\[\d+\] makes f32\[3\]"):
        dezero.static.load(str(path))


def test_a_graph_whose_relations_bound_a_size_saves_and_loads(tmp_path):
    table = dezero.Parameter(np.arange(20, dtype=np.float32).reshape(4, 5))  # 4 rows
    traced = dezero.trace(lambda x: x + table[:x.shape[0]])
    for n in (2, 3, 4):
        traced(np.ones((n, 5), np.float32))
    assert [str(r) for r in traced.graph.relations] == ["B >= 2", "B <= 4"]
    traced.graph.save(str(tmp_path / "rows.json"))
    loaded = dezero.static.load(str(tmp_path / "rows.json"))
    for n in (2, 3, 4):
        np.testing.assert_array_equal(loaded(np.ones((n, 5), np.float32)).data,
                                      1 + table.data[:n])


@needs_compiler
def test_a_state_set_to_none_is_refused_by_name_on_the_kernels_too():
    np.random.seed(0)
    net = dezero.models.MLP((16, 3))
    net(np.zeros((1, 4), np.float32))
    plan = dezero.trace(lambda x: net(x)).lower(np.ones((5, 4), np.float32)).compile("cpu")
    plan.wait()
    net.layers[0].b.data = None  # eager code takes it as no bias; the graph adds one
    with pytest.raises(GraphError, match="reads the .*b, which is None now"):
        plan(np.ones((5, 4), np.float32))  # (the kernel read None as NaN, in silence)
