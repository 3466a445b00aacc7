"""Every row of the op table traced (forward and backward) and replayed on every backend,
with the reference interpreter as the oracle.

All rows go into one traced function, so their graph is one graph and its kernels one
C++ library (cached on disk, compiled once), which keeps this in the quick loop. Each
row's result passes through an elementwise tail (y * 0.5 + 0.25), so that an
elementwise op shares a kernel with it and its `cpp` is compiled and run; the python
backend writes each op's `py` inline. A wrong `py` or `cpp` makes a replay differ from
the interpreter, which runs the ops' own forwards; an op no row reaches fails the
coverage test, naming it.
"""
import dataclasses

import numpy as np
import pytest
from fusion_helpers import cpu_plans
from op_table import ROWS, Row

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.kernels import cpu
from dezero.op_record import RECORDS
from dezero.static.ir import format_node

# Elementwise and inline-spelled ops of the neural-network functions, which the op
# table (about the book's math) leaves to test_functions_nn.py.
NN_ROWS = [
    Row("sigmoid", F.sigmoid, ((2, 3),), None),
    Row("relu", F.relu, ((2, 3),), None, away_from_zero=0.1),
    Row("leaky_relu", F.leaky_relu, ((2, 3),), None, away_from_zero=0.1),
    Row("softplus", F.softplus, ((2, 3),), None),
    Row("softmax", F.softmax, ((3, 3),), None),
    Row("log_softmax", F.log_softmax, ((3, 3),), None),
    Row("mean_squared_error", F.mean_squared_error, ((2, 3), (2, 3)), None),
    # Labels from an input (0, 1 or 2), so that their one_hot is computed at every call.
    Row("softmax_cross_entropy", lambda x, t: F.softmax_cross_entropy(
        x, F.astype(t, np.int64)), ((3, 3), (3,)), None, low=0.0, high=2.99),
    # Labels checked already: the one_hot a second derivative of softmax_cross_entropy
    # computes.
    Row("one_hot", lambda t: F.OneHot(3, "float64", None)(F.astype(t, np.int64)), ((3,),),
        None, low=0.0, high=2.99),
    Row("sign", F.sign, ((2, 3),), None, away_from_zero=0.1),
    # Max's backward reaches equal only where a kernel cannot hold it (a reduction
    # between it and its reader): here it is 1 where |x| <= 1.
    Row("equal", lambda x: F.Equal()(x, F.clip(x, -1.0, 1.0)), ((2, 3),), None),
]
TABLE = ROWS + NN_ROWS


def table_of(rows):
    """A function of the rows' inputs that runs each row's forward and backward on its
    own: {"<row> y": y, "<row> loss": sum(y * 0.5 + 0.25), "<row> grad 0": the gradient
    of its first input ...} (sign has none)."""
    def table(*arrays):
        results, k = {}, 0
        for row in rows:
            xs = [Variable(a) for a in arrays[k:k + len(row.shapes)]]
            k += len(row.shapes)
            y = results[f"{row.name} y"] = row.fn(*xs)
            loss = results[f"{row.name} loss"] = F.sum(y * 0.5 + 0.25)
            loss.backward()
            results.update((f"{row.name} grad {i}", x.grad) for i, x in enumerate(xs)
                           if x.grad is not None)
        return results
    return table


table = table_of(TABLE)


def table_inputs(rows=TABLE):
    return [x for i, row in enumerate(rows) for x in row.inputs(np.float64, seed=i)]


def plans(graph) -> dict:
    """backend -> a plan: the python replay code, and the same code with every kernel of
    the graph compiled into one library (the cpu backend runs only the kernels that pay
    for their call; here every one runs)."""
    made = {"python": graph.compile("python")}
    if cpu.missing_reason() is None:
        for group in graph.groups:  # a kernel step calls its kernel where it is compiled
            group.compiled = True
        made["cpu kernels"], = cpu_plans([graph])
    return made


def mismatches(graph, arrays) -> list:
    """'backend: row result' for each result a backend replays unlike the interpreter."""
    want = graph.interpret(*arrays)
    found = []
    for backend, plan in plans(graph).items():
        # Kernels compute tanh, exp ... with the C library's vector math: a few ulp.
        rtol = 0 if backend == "python" else 1e-13
        for label, y in plan.run(arrays).items():
            w = want[label].data
            if not np.allclose(y.data, w, rtol=rtol, atol=rtol, equal_nan=True) or \
                    y.data.dtype != w.dtype:
                found.append(f"{backend}: {label}")
    return found


# The gradients of sums and products are the same at every call: constant outputs.
pytestmark = pytest.mark.filterwarnings("ignore:table. output .* depends on no argument")


@pytest.fixture(scope="module")
def recorded():
    arrays = table_inputs()
    graph = dezero.trace(table).lower(*arrays)
    return graph, arrays


def test_the_interpreter_replays_what_eager_code_computed(recorded):
    graph, arrays = recorded
    eager = table(*arrays)
    replayed = graph.interpret(*arrays)
    assert replayed.keys() == eager.keys()
    for label, y in replayed.items():
        np.testing.assert_array_equal(y.data, eager[label].data, err_msg=label)


def test_every_backend_replays_every_row_as_the_interpreter(recorded):
    graph, arrays = recorded
    assert mismatches(graph, arrays) == []


def test_every_elementwise_op_runs_in_a_kernel_and_every_spelled_op_inline(recorded):
    graph, _ = recorded
    fused = {n.op for g in graph.groups for n in g.nodes}
    ops = {n.op for n in graph.of_kind("op")}
    ours = {name: r for name, r in RECORDS.items() if r.cls.__module__.startswith("dezero")}
    unfused = sorted(n for n, r in ours.items() if r.elementwise and not r.random
                     and n not in fused)
    assert unfused == [], "add a row that reaches these ops to tests/op_table.py"
    # (a number of sizes, size_number, appears only in graphs of symbolic sizes: its
    # spelling replays against eager in tests/test_symbolic_sizes.py)
    unspelled = sorted(n for n, r in ours.items() if r.py and n not in ops and
                       not r.device_only)
    assert unspelled == [], "add a row that reaches these ops to tests/op_table.py"


@pytest.mark.parametrize("fact, wrong", [("py", "{x} * 2.0"), ("cpp", "cos({x})")])
def test_a_wrong_spelling_of_an_op_is_caught(monkeypatch, fact, wrong):
    if fact == "cpp" and cpu.missing_reason() is not None:
        pytest.skip(cpu.missing_reason())
    # sin's row alone, whose kernel compiles in a fraction of the whole table's time:
    # a replay that differs from the interpreter is found as it is among all rows
    rows = [row for row in TABLE if row.name == "sin"]
    arrays = table_inputs(rows)
    monkeypatch.setitem(RECORDS, "sin", dataclasses.replace(RECORDS["sin"], **{fact: wrong}))
    graph = dezero.trace(table_of(rows)).lower(*arrays)
    backend = "python" if fact == "py" else "cpu kernels"
    assert f"{backend}: sin y" in mismatches(graph, arrays)


def test_every_op_gives_the_types_its_record_works_out_and_loads_from_a_file(
        recorded, tmp_path):
    # load() checks each node's declared results against the op's rule: forward on
    # zeros of the declared inputs (OpRecord.result_types); every op of the table must
    # give there what it gave on the recorded data, or its saved graphs would not load
    graph, arrays = recorded
    for node in graph.of_kind("op"):
        assert node.record.result_types(node.attrs, node.inputs) == [
            (v.shape, v.dtype) for v in node.outputs], format_node(node)
    graph.save(str(tmp_path / "table"))
    want = graph.interpret(*arrays)
    for label, y in dezero.static.load(str(tmp_path / "table")).interpret(*arrays).items():
        np.testing.assert_array_equal(y.data, want[label].data, err_msg=label)
