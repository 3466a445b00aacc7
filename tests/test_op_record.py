"""The op records (dezero/op_record.py): one per Function class, made when the class is
defined, and the only place the trace compiler learns an op's facts from."""
import ast
import inspect
from pathlib import Path

import numpy as np

import dezero
import dezero.functions as F
from dezero import Function
from dezero.core import OPS
from dezero.op_record import RECORDS


def test_every_op_has_one_record_made_from_its_class():
    assert set(RECORDS) == set(OPS)
    for name, record in RECORDS.items():
        assert record.cls is OPS[name] and record.name == name == record.cls.op_name
        assert record.params == tuple(inspect.signature(record.cls.forward).parameters)[1:]
    mul = RECORDS["mul"]
    assert mul.params == ("x0", "x1") and mul.elementwise and mul.commutative
    assert mul.neutral and mul.py and not mul.random and mul.arity == (2, 2)
    assert RECORDS["dropout_mask"].random and not RECORDS["dropout_mask"].elementwise
    assert not RECORDS["matmul"].elementwise and RECORDS["sum"].attr_names == ("axis",
                                                                              "keepdims")


def test_facts_about_forward_are_not_inherited_past_an_overridden_forward():
    class Twice(F.Mul):  # its own forward: Mul's cpp, py and neutral say nothing of it
        def forward(self, x0, x1):
            return 2 * x0 * x1

    class Same(F.Mul):  # Mul's forward: Mul's facts hold
        pass

    twice, same = RECORDS[Twice.op_name], RECORDS[Same.op_name]
    assert twice.cpp is twice.py is twice.neutral is None and not twice.elementwise
    assert twice.commutative  # a fact about the inputs, inherited as a class attribute
    assert same.cpp == F.Mul.cpp and same.elementwise and same.py == RECORDS["mul"].py
    assert Twice.op_name.endswith("Twice") and "." in Twice.op_name  # a user's op


def test_a_user_op_is_recorded_when_defined_and_rebuilt_from_its_attrs():
    class Shift(Function):
        cpp = "{x} + {k}"

        def __init__(self, k):
            self.k = float(k)

        def forward(self, x):
            return x + self.k

    record = RECORDS[Shift.op_name]
    assert record.params == ("x",) and record.attr_names == ("k",) and record.elementwise
    f = record.function({"k": 2.0})
    assert type(f) is Shift and f.k == 2.0 and f.forward(np.array(1.0)) == 3.0


STATIC = Path(dezero.__file__).parent / "static"


def test_the_trace_compiler_reads_op_facts_only_from_records():
    # No module of static/ looks at an op's class by itself: none imports the registry
    # of classes or inspects a forward's signature (trace.py inspects the user's function).
    for path in STATIC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 for a in n.names} | {a.name for n in ast.walk(tree)
                                      if isinstance(n, ast.Import) for a in n.names}
        assert "OPS" not in names, path
        assert "inspect" not in names or path.name == "trace.py", path
        attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "function_class" not in attributes, path
    assert not hasattr(Function, "elementwise")  # one definition: OpRecord.elementwise


def ops_beyond_the_table(x, W, V, ids, E, t, s, n, p):
    """Convolutions and poolings with their first and second backwards, an embedding,
    a loss and a softmax over one class or integer scores (which stay whole ops),
    accuracy, dropout and probabilities: the ops the op table's graph does not reach."""
    y = F.conv2d(x, W, pad=1) + F.deconv2d(x, V)[:, :, :5, :5]
    y = F.pooling(y, 2, 2) + F.average_pooling(y, 2, 2) + F.pooling_simple(y, 2, 2)
    z = F.col2im(F.im2col(y, 2), y.shape, 2)
    h = F.embed_id(ids, E)
    loss = F.sum(z * z) + F.sum(F.dropout(h) * h) + F.softmax_cross_entropy(s, t) + \
        F.binary_cross_entropy(p, np.ones(3))
    loss.backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    F.sum(gx * gx).backward()
    return (loss, F.accuracy(s, t), F.softmax(n), F.log_softmax(n), x.grad, W.grad,
            E.grad, F.get_item(x, (1, 0)))


def test_every_op_gives_at_load_the_types_it_gave_on_data():
    # load() checks a graph file's declared results against OpRecord.result_types
    # (forward on zeros of the declared inputs; a collective's rule): the ops that
    # tests/test_trace_op_table.py's table does not reach, here
    from dezero.static.ir import format_node
    rng = np.random.default_rng(0)
    args = (dezero.Variable(rng.standard_normal((2, 1, 5, 5))),
            dezero.Variable(rng.standard_normal((2, 1, 3, 3))),
            dezero.Variable(rng.standard_normal((1, 2, 2, 2))), np.array([[0, 2], [1, 1]]),
            dezero.Variable(rng.standard_normal((3, 4))), np.array([0, 0, 0]),
            rng.standard_normal((3, 1)), np.arange(6).reshape(2, 3), np.full(3, 0.5))
    graph = dezero.trace(ops_beyond_the_table).lower(*args)
    ops = {n.op for n in graph.of_kind("op")}
    assert {"conv2d", "conv2d_grad_w", "deconv2d", "pooling", "pooling_grad",
            "pooling_with_indexes", "average_pooling", "average_pooling_grad", "im2col",
            "col2im", "first_max_mask", "embed_id", "embed_id_grad", "dropout_mask",
            "softmax_cross_entropy", "accuracy", "softmax", "log_softmax", "probabilities",
            "get_item", "get_item_grad"} <= ops
    for node in graph.of_kind("op"):
        assert node.record.result_types(node.attrs, node.inputs) == [
            (v.shape, v.dtype) for v in node.outputs], format_node(node)
