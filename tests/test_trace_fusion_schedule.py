"""Fusion never makes kernels that wait for each other: random programs of
elementwise ops and boundaries (transposes, reductions) are fused, their schedule
checked (each kernel one run of consecutive nodes, in a topological order), and their
fused replays compared with the interpreter and with eager code."""
import random

import numpy as np
import pytest
from backend_helpers import assert_replay_equal
from fusion_helpers import cpu_plans, reference_factory

import dezero
import dezero.functions as F
from dezero.errors import GraphError
from dezero.kernels import cpu
from dezero.static import passes
from dezero.static.backends.pycode import Compiled
from dezero.static.graph import StaticGraph
from dezero.static.ir import Node, Value


def crossed(x, v):
    """Two chains that meet twice: e's kernel feeds h's through a transpose, and j
    reads both; j may join h's kernel but not e's (e's would then wait for h's)."""
    e = x * 2 + 1
    g = F.transpose(e)
    h = v * 3
    return h + g, e * h


def check_schedule(graph):
    """graph.check() and: no kernel reads a value made after it starts; the segments
    of a horizontal kernel read nothing another segment makes, and their inputs are
    the kernel's."""
    graph.check()
    at = {id(v): i for i, n in enumerate(graph.nodes) for v in n.outputs}
    start = {id(n): graph.nodes.index(g.nodes[0]) for g in graph.groups for n in g.nodes}
    for group in graph.groups:
        assert all(at[id(v)] < start[id(group.nodes[0])] for v in group.inputs)
        made = {id(v) for s in group.segments for n in s.nodes for v in n.outputs}
        for segment in group.segments:
            inside = {id(v) for n in segment.nodes for v in n.outputs}
            assert not any(id(v) in made - inside for n in segment.nodes for v in n.inputs)
            assert all(any(v is w for w in group.inputs) for v in segment.inputs)


BACKENDS = ["interpreter", "python"] + (["cpu"] if cpu.missing_reason() is None else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_chains_that_meet_twice_trace_and_replay_like_eager(backend):
    rng = np.random.default_rng(0)
    x, v = (rng.standard_normal((3, 3)).astype(np.float32) for _ in range(2))
    graph = dezero.trace(crossed).lower(x, v)
    check_schedule(graph)
    assert [[n.outputs[0].name for n in g.nodes] for g in graph.groups] == \
        [["d", "e"], ["g", "h", "i"]]
    x2, v2 = x - 1, v * 2
    got = graph.compile(backend).run((x2, v2))
    for a, b in zip(got, crossed(dezero.Variable(x2), dezero.Variable(v2))):
        assert_replay_equal(a.data, b.data)
    fused = Compiled(graph, reference_factory(graph)).run((x2, v2))
    for a, b in zip(fused, got):
        assert_replay_equal(a.data, b.data)


def test_a_grouping_whose_kernels_wait_for_each_other_is_a_clear_error():
    graph = dezero.trace(crossed).lower(*[np.ones((3, 3), np.float32)] * 2)
    d, e, f, g, h, i = [n for n in graph.nodes if n.kind == "op"]
    assert f.op == "transpose"
    with pytest.raises(GraphError, match=r"groups wait for each other: \[d, e, i\]; \[g, h\]"):
        passes._schedule(graph.nodes, [[d, e, i], [g, h]])


# =============================================================================
# Random programs: steps (op, operands) built as a graph or as Python code
# =============================================================================

F32 = np.dtype(np.float32)
INPUTS = (("x", (3, 3)), ("v", (3, 3)), ("r", (3, 1)))
# op -> (the dezero function, its attrs in the graph); weights favour chains that
# meet again after a transpose, where a wrong grouping makes a cycle.
OPS = {"add": (lambda a, b: a + b, {}), "mul": (lambda a, b: a * b, {}),
       "sub": (lambda a, b: a - b, {}), "tanh": (F.tanh, {}), "neg": (lambda a: -a, {}),
       "transpose": (F.transpose, {"axes": None}),
       "sum": (lambda a: F.sum(a, axis=1, keepdims=True), {"axis": 1, "keepdims": True})}
WEIGHTS = (3, 3, 3, 1, 1, 2, 1)


def random_steps(seed):
    """([(op, operand indexes)], output indexes, shapes); index i is the i-th value
    (inputs first). The first operand is one of the six latest values, the second
    any. transpose and sum take 3x3 values only (a 3x1 operand makes them tanh)."""
    rng = random.Random(seed)
    shapes = [s for _, s in INPUTS]
    steps = []
    for op in rng.choices(list(OPS), WEIGHTS, k=rng.randrange(8, 24)):
        operands = [len(shapes) - 1 - rng.randrange(min(len(shapes), 6))]
        if op in ("add", "mul", "sub"):
            operands.append(rng.randrange(len(shapes)))
        if op in ("transpose", "sum") and shapes[operands[0]] != (3, 3):
            op = "tanh"
        shape = max(shapes[i] for i in operands)  # (3, 1) and (3, 3) broadcast to (3, 3)
        shapes.append((3, 1) if op == "sum" else shape)
        steps.append((op, operands))
    outputs = [len(shapes) - 1] + [rng.randrange(len(INPUTS), len(shapes)) for _ in "ab"]
    return steps, outputs, shapes


def as_graph(steps, outputs, shapes):
    values = [Value(n, s, F32) for n, s in INPUTS]
    nodes = [Node("input", outputs=[v]) for v in values]
    for k, (op, operands) in enumerate(steps):
        values.append(Value(f"t{k}", shapes[len(INPUTS) + k], F32))
        nodes.append(Node("op", op, [values[i] for i in operands], OPS[op][1], [values[-1]]))
    nodes.append(Node("output", inputs=[values[i] for i in outputs]))
    tree = ("tuple", [("array", i) for i in range(len(outputs))])
    return StaticGraph("program", nodes, tree)


def as_function(steps, outputs):
    def program(*inputs):
        values = list(inputs)
        for op, operands in steps:
            values.append(OPS[op][0](*(values[i] for i in operands)))
        return tuple(values[i] for i in outputs)
    return program


def random_arrays(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for _, s in INPUTS]


def fuse_random_graphs(seeds, replay_every):
    for seed in seeds:
        graph = as_graph(*random_steps(seed))
        fused = passes.fuse(graph)
        check_schedule(fused)
        if seed % replay_every == 0:
            arrays = random_arrays(seed)
            want = graph.interpret(*arrays)
            got = Compiled(fused, reference_factory(fused)).run(arrays)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"seed {seed}")


def test_fusion_of_a_thousand_random_graphs_has_an_acyclic_schedule():
    fuse_random_graphs(range(1000), replay_every=20)


@pytest.mark.slow
def test_fusion_of_five_thousand_random_graphs_replays_like_the_interpreter():
    fuse_random_graphs(range(1000, 6000), replay_every=4)


def trace_random_programs(seeds):
    """Traced and lowered, each program replays (python backend, and its kernels as
    numpy reference kernels: g++ on thousands of kernels would take minutes) what
    eager code returns."""
    for seed in seeds:
        steps, outputs, _ = random_steps(seed)
        program = as_function(steps, outputs)
        graph = dezero.trace(program).lower(*random_arrays(seed))
        check_schedule(graph)
        arrays = random_arrays(seed + 1)
        want = program(*arrays)
        for plan in (graph.compile("python"), Compiled(graph, reference_factory(graph))):
            for a, b in zip(plan.run(arrays), want, strict=True):
                np.testing.assert_array_equal(a.data, b.data, err_msg=f"seed {seed}")


def test_random_traced_programs_replay_like_eager():
    trace_random_programs(range(100))


@pytest.mark.slow
def test_four_hundred_random_traced_programs_replay_like_eager():
    trace_random_programs(range(100, 500))


# =============================================================================
# Horizontal kernels: groups of one body merge only where no path joins them
# =============================================================================


def test_updates_that_wait_for_each_other_stay_apart():
    """p - s * g of x, then of a value computed from the first update's result
    (through a sum, which joins the first's kernel): the second waits for the first,
    so they are two kernels; the update of v, independent of both, joins the second
    (a kernel with a reduction runs no horizontal segments)."""
    def program(x, v, s):
        x, v, s = map(dezero.as_variable, (x, v, s))  # s * y is mul(s, y) for every y
        a = x - s * v
        b = v - s * F.broadcast_to(F.sum(a, axis=0), (3, 3))
        return b, v - s * x
    arrays = [np.float32(k + 1) * np.ones((3, 3), np.float32) for k in range(2)]
    s = np.asarray(0.5, np.float32)  # an array: an input, not a constant
    graph = dezero.trace(program).lower(*arrays, s)
    check_schedule(graph)
    assert [len(g.nodes) for g in graph.groups] == [3, 4]
    assert graph.groups[0].axes == (0,) and graph.groups[0].nodes[-1].op == "sum"
    first, second = graph.groups[1].segments
    assert [s.nodes[0].inputs[1].name for s in (first, second)] == ["d", "x"]
    got = graph.compile("python").run((*arrays, s))
    for a, b in zip(got, program(*(dezero.Variable(a) for a in (*arrays, s)))):
        assert_replay_equal(a.data, b.data)


def test_two_merges_that_together_close_a_cycle_are_not_both_made():
    """a1 feeds b2's kernel (through a transpose), b1 feeds a2's: merging the a's, and
    then the b's, would make two kernels that wait for each other."""
    def program(x, v, s):
        a1 = x * s + v              # body A
        b1 = v * v - s              # body B
        b2 = F.transpose(a1) * F.transpose(a1) - s
        a2 = F.transpose(b1) * s + x
        return a2, b2
    x, v = (np.arange(9, dtype=np.float32).reshape(3, 3) + k for k in range(2))
    s = np.asarray(2, np.float32)
    graph = dezero.trace(program).lower(x, v, s)
    check_schedule(graph)
    assert sum(1 for g in graph.groups if g.segments) == 1  # one of the two merges
    got = graph.compile("python").run((x, v, s))
    want = program(*(dezero.Variable(a) for a in (x, v, s)))
    for a, b in zip(got, want):
        assert_replay_equal(a.data, b.data)


UPDATE_INPUTS = (("x", (3, 3)), ("v", (3, 3)), ("r", (3, 1)), ("w", (3, 1)), ("s", ()))


def random_updates(seed):
    """A random graph of updates p - s * g (the same two-op body on (3, 3) and (3, 1)
    arrays) of inputs and of transposes, sums and tanh of earlier values, which make
    paths between the updates."""
    rng = random.Random(seed)
    values = [Value(n, shape, F32) for n, shape in UPDATE_INPUTS]
    nodes = [Node("input", outputs=[v]) for v in values]
    scalar, sources = values[-1], values[:-1]  # sources: what updates read

    def add(op, inputs, shape, attrs=None):
        values.append(Value(f"t{len(values)}", shape, F32))
        nodes.append(Node("op", op, inputs, attrs or {}, [values[-1]]))
        return values[-1]
    for _ in range(rng.randrange(6, 18)):
        kind = rng.choices(["update", "transpose", "sum", "tanh"], (4, 2, 1, 1))[0]
        if kind == "update":
            p = rng.choice(sources[-6:])
            g = rng.choice([v for v in sources if v.shape == p.shape])
            add("sub", [p, add("mul", [scalar, g], p.shape)], p.shape)
            continue
        p = rng.choice(values[len(UPDATE_INPUTS):] or sources)
        if kind == "transpose" and p.shape == (3, 3):
            sources.append(add("transpose", [p], (3, 3), {"axes": None}))
        elif kind == "sum" and p.shape == (3, 3):
            sources.append(add("sum", [p], (3, 1), {"axis": 1, "keepdims": True}))
        else:
            add("tanh", [p], p.shape)
    made = values[len(UPDATE_INPUTS):]
    outputs = [values[-1]] + rng.sample(made, min(2, len(made)))
    nodes.append(Node("output", inputs=outputs))
    tree = ("tuple", [("array", i) for i in range(len(outputs))])
    return StaticGraph("updates", nodes, tree)


def fuse_random_updates(seeds, replay_every):
    merged = 0
    for seed in seeds:
        graph = random_updates(seed)
        fused = passes.fuse(graph)
        check_schedule(fused)
        merged += sum(1 for g in fused.groups if g.segments)
        if seed % replay_every == 0:
            rng = np.random.default_rng(seed)
            arrays = [rng.standard_normal(s).astype(np.float32) for _, s in UPDATE_INPUTS]
            want = graph.interpret(*arrays)
            got = Compiled(fused, reference_factory(fused)).run(arrays)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"seed {seed}")
    return merged


def test_horizontal_fusion_of_four_hundred_random_graphs_has_an_acyclic_schedule():
    assert fuse_random_updates(range(400), replay_every=20) > 200  # merges do happen


@pytest.mark.slow
def test_horizontal_fusion_of_two_thousand_random_graphs_replays_like_the_interpreter():
    assert fuse_random_updates(range(400, 2400), replay_every=4) > 1000


# =============================================================================
# Random programs compiled: reductions, softmaxes, scalars, odd layouts
# =============================================================================

# op -> (the dezero function, whether it is arithmetic: exact in a kernel). Rows of
# one and 0-d values broadcast; `pick` values come from any earlier step.
ROW_OPS = {
    "add": (lambda a, b: a + b, True), "mul": (lambda a, b: a * b, True),
    "sub": (lambda a, b: a - b, True), "neg": (lambda a: -a, True),
    "clip": (lambda a: F.clip(a, -0.5, 0.5), True), "relu": (F.relu, True),
    "half": (lambda a: a / 2.0, True), "rowsum": (lambda a: F.sum(a, axis=-1, keepdims=True), True),
    "colsum": (lambda a: F.sum(a, axis=0, keepdims=True), True), "total": (F.sum, True),
    "mean": (F.mean, True), "rowmax": (lambda a: F.max(a, axis=-1, keepdims=True), True),
    "rowmin": (lambda a: F.min(a, axis=-1, keepdims=True), True),
    "tanh": (F.tanh, False), "exp": (lambda a: F.exp(a * 0.1), False),
    "softmax": (lambda a: F.softmax(a, axis=-1), False),
    "log_softmax": (lambda a: F.log_softmax(a, axis=0), False)}
ROW_INPUTS = ((4, 20), (4, 1), ())


def random_row_program(seed):
    """(function of x: (4, 20), r: (4, 1), s: 0-d, arithmetic only?)."""
    rng = random.Random(seed)
    exact = seed % 2 == 0
    names = [n for n, (_, arithmetic) in ROW_OPS.items() if arithmetic or not exact]
    steps = [(rng.choice(names), rng.randrange(4), rng.randrange(50))
             for _ in range(rng.randrange(2, 9))]

    def program(x, r, s):
        values = [dezero.as_variable(v) for v in (x, r, s)]
        for op, i, j in steps:
            fn, _ = ROW_OPS[op]
            a, b = values[-1 - i % len(values)], values[j % len(values)]
            values.append(fn(a, b) if fn.__code__.co_argcount == 2 else fn(a))
        return values[-1], values[len(values) // 2] * 2.0
    return program, exact


def row_arrays(seed, layout):
    rng = np.random.default_rng(seed)
    x, r, s = (np.asarray(rng.standard_normal(shape), np.float32) for shape in ROW_INPUTS)
    if layout == "columns":  # Fortran order, and a view running backwards
        x, r = np.asfortranarray(x), r[::-1]
    elif layout == "non-finite":
        x[0, :3], x[1, 0], x[2] = np.nan, np.inf, -np.inf
    return x, r, s


@pytest.fixture(scope="module")
def row_programs():
    programs = [random_row_program(seed) for seed in range(64)]
    with np.errstate(all="ignore"):
        graphs = [dezero.trace(f).lower(*row_arrays(0, "C")) for f, _ in programs]
    return list(zip(programs, graphs, cpu_plans(graphs)))


@pytest.mark.skipif(cpu.missing_reason() is not None, reason=str(cpu.missing_reason()))
@pytest.mark.parametrize("layout", ["C", "columns", "non-finite"])
def test_random_programs_with_reductions_compiled_replay_like_eager(row_programs, layout):
    """Every kernel compiled: an arithmetic program's replay equals eager code's bits
    (sums in numpy's order), others the interpreter's within a few ulp."""
    assert sum(len(g.groups) for _, g, _ in row_programs) >= 32
    for seed, ((program, exact), graph, plan) in enumerate(row_programs):
        arrays = row_arrays(seed + 1, layout)
        with np.errstate(all="ignore"):
            got, want, eager = plan.run(arrays), graph.interpret(*arrays), program(*arrays)
        for g, w, e in zip(got, want, eager, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype, f"seed {seed}"
            np.testing.assert_array_equal(w.data, e.data, err_msg=f"seed {seed}")
            if exact:
                np.testing.assert_array_equal(g.data, e.data, err_msg=f"seed {seed}")
            else:
                eps = np.finfo(np.float32).eps
                np.testing.assert_allclose(g.data, w.data, rtol=16 * eps, atol=16 * eps,
                                           err_msg=f"seed {seed}")
