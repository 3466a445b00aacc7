"""Reductions in traced graphs: softmax_cross_entropy hands its probabilities to its
backward (the graph computes softmax once), and sum, mean, max, min and sum_to fold
into the kernel of the elementwise ops before and after them (C++ on the CPU)."""
import itertools
import sys

import numpy as np
import pytest
from backend_helpers import assert_within_ulps
from fusion_helpers import cpu_plans
from train_helpers import training_step

import dezero
import dezero.functions as F
from dezero import Variable, models, optimizers
from dezero.kernels import cpu, cpu_reductions
from dezero.kernels.codegen import kernel_spec
from dezero.static import backends, passes
from dezero.static.ir import Node, Value
from dezero.utils import numerical_grad

# =============================================================================
# softmax_cross_entropy: one softmax, forward and backward
# =============================================================================


def batch(n=8, dim=4, classes=3, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(dtype), rng.integers(0, classes, n)


@pytest.fixture
def unsplit(monkeypatch):
    """The passes run without split_parts, so that softmax_cross_entropy stays one op,
    as it does where its steps cannot join a kernel (integer scores, odd labels)."""
    def optimize(graph):
        return passes.optimize(graph, tuple(p for p in passes.PIPELINE
                                            if p is not passes.split_parts))
    monkeypatch.setattr(sys.modules["dezero.static.trace"], "optimize", optimize)


def traced_training_graph():
    model = models.MLP((5, 3))
    traced = training_step(model, optimizers.SGD(0.1).setup(model), traced=True)
    traced(*batch())
    return traced.graph


def test_the_traced_loss_and_gradient_compute_softmax_once():
    # on the CPU the loss is split into its steps: one exp, one quotient, whose
    # probabilities only the gradient reads (in the same kernel)
    graph = traced_training_graph()
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax" not in ops and "softmax_cross_entropy" not in ops
    assert ops.count("exp") == ops.count("div") == 1
    probs, = (n.outputs[0] for n in graph.nodes if n.op == "div")
    assert [n.op for n in graph.nodes if probs in n.inputs] == ["softmax_cross_entropy_grad"]


def test_the_loss_op_hands_its_probabilities_to_the_gradient(unsplit):
    graph = traced_training_graph()
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax" not in ops and ops.count("softmax_cross_entropy") == 1
    node, = (n for n in graph.nodes if n.op == "softmax_cross_entropy")
    loss, probs = node.outputs
    assert (loss.shape, probs.shape) == ((), (8, 3))
    # the gradient (probs - one_hot(t)) / N reads the forward's probabilities
    readers = [n.op for n in graph.nodes if probs in n.inputs]
    assert readers == ["softmax_cross_entropy_grad"]


def loss_and_gradient(x, t):
    loss = F.softmax_cross_entropy(x, t)
    loss.backward()
    return loss, x.grad


def test_the_loss_and_its_gradient_are_two_ops_where_they_are_not_split(unsplit):
    x, t = batch(n=16, dim=5)
    traced = dezero.trace(loss_and_gradient)
    traced(Variable(x), t)
    steps = [s for s in traced.graph.program.steps if s.kind in ("node", "kernel")]
    assert [s.node.op for s in steps] == ["softmax_cross_entropy", "softmax_cross_entropy_grad"]


def test_the_probabilities_are_softmax_bit_for_bit():
    x, t = batch(dtype=np.float64)
    _, probs = F.SoftmaxCrossEntropy()(x * 3, t)
    np.testing.assert_array_equal(probs.data, F.softmax(x * 3).data)


def test_traced_double_backward_through_the_probabilities_matches_eager():
    # d/dx sum(w * d loss/dx): the gradient's own gradient flows into the probabilities
    x0, t = batch(n=5, dim=3, dtype=np.float64, seed=1)
    w = np.random.default_rng(2).standard_normal(x0.shape)

    def second(x, t):
        loss = F.softmax_cross_entropy(x, t)
        loss.backward(create_graph=True)
        gx = x.grad
        x.cleargrad()
        F.sum(gx * w).backward()
        return x.grad

    def eager(x_array):
        x = Variable(x_array)
        return second(x, t).data

    traced = dezero.trace(second)
    traced(Variable(x0), t)  # recorded
    replayed = traced(Variable(x0), t).data
    # each element sums w's classes times products of probabilities at most 1, over a
    # batch of 5: ulps of that (a fused exp is a few ulp from numpy's)
    assert_within_ulps(replayed, eager(x0), np.abs(w).sum(axis=1, keepdims=True) / len(w))
    # and against a numerical derivative of the first gradient
    def first(x_array):
        x = Variable(x_array)
        F.softmax_cross_entropy(x, t).backward()
        return np.sum(x.grad.data * w)
    np.testing.assert_allclose(replayed, numerical_grad(first, x0.copy()), rtol=1e-5,
                               atol=1e-7)


# =============================================================================
# Reduction kernels: elementwise work before and after sum, mean, max, sum_to
# =============================================================================

needs_compiler = pytest.mark.skipif(cpu.missing_reason() is not None,
                                    reason=str(cpu.missing_reason()))


def close_to_the_interpreter(got, want, dtype):
    """Equal within a few ulp of the magnitudes involved: the kernels' exp and tanh
    are the C library's (a few ulp from numpy's); sums over the innermost axes are
    added in numpy's pairwise order and sums over leading axes row after row, as
    numpy adds them, so sums change no order where numpy's loop runs along them."""
    eps = np.finfo(dtype).eps
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps * scale)


def with_reduction(reduce):
    """A prologue (tanh(x * 2 - 1)), the reduction, an epilogue (* 3 + b on the
    reduced shape), and the prologue's value read outside (a second output)."""
    def f(x, b):
        y = F.tanh(x * 2.0 - 1.0)
        return reduce(y) * 3.0 + b, y
    return f


REDUCTIONS = {
    "sum over the last axis": (lambda y: F.sum(y, axis=1, keepdims=True), lambda s: (s[0], 1)),
    "sum over the batch": (lambda y: F.sum(y, axis=0), lambda s: (s[1],)),
    "sum of all": (lambda y: F.sum(y), lambda s: ()),
    "mean over the last axis": (lambda y: F.mean(y, axis=1), lambda s: (s[0],)),
    "max over the last axis": (lambda y: F.max(y, axis=1, keepdims=True),
                               lambda s: (s[0], 1)),
    "min over the batch": (lambda y: F.min(y, axis=0, keepdims=True), lambda s: (1, s[1])),
    "sum_to the bias's shape": (lambda y: F.sum_to(y, (1, y.shape[1])),
                                lambda s: (1, s[1])),
}


SHAPES, DTYPES = [(6, 7), (300, 9), (6, 1), (1, 130)], [np.float32, np.float64]


def reduction_case(name, shape, dtype):
    """(the traced function, its inputs x and b, a second x far from the first), or
    None where the case reduces nothing."""
    reduce, b_shape = REDUCTIONS[name]
    if name.startswith("sum_to") and shape[0] == 1:
        return None
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(b_shape(shape)).astype(dtype)
    return with_reduction(reduce), x, b, rng.standard_normal(shape).astype(dtype) * 50


@pytest.fixture(scope="module")
def reduction_plans():
    """(graph, cpu plan) of each case below, all their kernels compiled together."""
    graphs = {}
    for key in itertools.product(REDUCTIONS, SHAPES, DTYPES):
        case = reduction_case(*key)
        if case is not None:
            f, x, b, _ = case
            graphs[key] = dezero.trace(f).lower(x, b)
    return dict(zip(graphs, zip(graphs.values(), cpu_plans(list(graphs.values())))))


@needs_compiler
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_a_reduction_kernel_computes_what_the_interpreter_does(name, shape, dtype,
                                                               reduction_plans):
    case = reduction_case(name, shape, dtype)
    if case is None:
        pytest.skip("sum_to of one row to its own shape is no op at all")
    _, x, b, far = case
    graph, plan = reduction_plans[name, shape, dtype]
    group, = [g for g in graph.groups if g.axes is not None]
    assert group.compiled and any(n.record.reduce for n in group.nodes)
    assert f"= _{group.name}(" in plan.source  # the replay calls the compiled kernel
    for arrays in [(x, b), (far, b)]:
        got, want = plan(*arrays), graph.interpret(*arrays)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            close_to_the_interpreter(g.data, w.data, dtype)


@needs_compiler
def test_sums_in_numpy_order_equal_numpy_to_the_bit():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 300)).astype(np.float32)
    b = np.zeros(1, np.float32)
    graphs = []
    for reduce in (lambda y: F.sum(y, axis=1), lambda y: F.sum(y, axis=0), F.sum):
        def f(x, b, reduce=reduce):
            return reduce(x * 2.0 - 1.0) * 3.0 + b
        graphs.append(dezero.trace(f).lower(x, b))
        assert graphs[-1].groups[0].axes is not None
    for graph, plan in zip(graphs, cpu_plans(graphs)):
        np.testing.assert_array_equal(plan(x, b).data, graph.interpret(x, b).data)


@needs_compiler
def test_sums_of_values_laid_out_by_columns_equal_eager_code_to_the_bit():
    """numpy adds a row in another order where its values are laid out column by
    column (a Fortran-order input, a transpose in the traced code): the kernel,
    which adds in the order of C-ordered values, gives way to the group's numpy
    calls there, and runs where the layout is numpy's usual one."""
    def sums(x, w):
        y = x * 2.0 + 1.0
        return (F.sum(y, axis=1), F.sum(y, axis=0) * 3.0, F.sum(y * y),
                F.sum(F.transpose(w) * 2.0 - 1.0, axis=1))
    rng = np.random.default_rng(6)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((40, 300), (300, 40)))
    plan = dezero.trace(sums).lower(x, w).compile("cpu").wait()
    assert len(plan.graph.groups) == 3 and all(g.compiled for g in plan.graph.groups)
    for xs, ws in [(x, w), (np.asfortranarray(x), w[::-1]), (x.T.copy().T, x.T)]:
        got, want = plan(xs, ws), sums(Variable(xs), Variable(ws))
        for g, e in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.data, e.data)


@needs_compiler
def test_the_full_results_of_a_kernel_over_a_middle_axis_are_in_c_order():
    # its loops store them reduced axes first: viewed back as a transpose, numpy's
    # later sums of them added in another order than eager code's
    def f(x):
        y = x * 2.0 + 1.0
        return y, F.sum(y, axis=1) * 3.0, F.sum(y, axis=0), F.sum(y, axis=(1, 2))
    x = Variable(np.random.default_rng(8).standard_normal((5, 6, 40)).astype(np.float32))
    graph = dezero.trace(f).lower(x)
    assert graph.groups[0].axes == (1,) and len(graph.groups[0].outputs) == 2
    got = graph.compile("cpu").wait()(x)
    assert got[0].data.flags.c_contiguous
    for g, want in zip(got, f(x), strict=True):
        np.testing.assert_array_equal(g.data, want.data)


@needs_compiler
def test_a_bias_gradient_and_its_sum_of_squares_run_by_columns_equal_to_the_bit():
    """A bias's gradient (a sum over the batch) and the sum of its squares (a clipped
    norm's total) in one kernel run by columns, as numpy adds them: the row-by-row
    loops read each batch row at a stride of the kept axis, eight times slower."""
    def grad_and_norm(gy, mask):
        g = F.sum(gy * mask * 0.5, axis=(0, 1))
        return g, F.sum(g * g)
    rng = np.random.default_rng(3)
    gy, mask = (rng.standard_normal((4, 30, 70)).astype(np.float32) for _ in range(2))
    graph = dezero.trace(grad_and_norm).lower(gy, mask)
    group, = graph.groups
    spec = kernel_spec(group)
    assert group.axes == (0, 1) and spec.totals and cpu_reductions.columns(spec)
    for got, want in zip(graph.compile("cpu").wait()(gy, mask), grad_and_norm(gy, mask),
                         strict=True):
        np.testing.assert_array_equal(got.data, want.data)


def test_a_sum_over_axes_that_kept_ones_interleave_equals_eager_code_to_the_bit():
    """A sum of a (N, C, L) value over N and L (a bias's gradient over channels):
    numpy adds each row of L pairwise, then the rows one after another, an order a
    kernel's loops do not follow; on the CPU it stays a numpy call. Sums of other
    axes fold into kernels."""
    def sums(x):
        y = x * 2.0 + 1.0
        return (F.sum(y, axis=(0, 2)), F.sum_to(y, (1, 6, 1)), F.mean(y, axis=(0, 2)) * 3.0,
                F.sum(y, axis=1) * 3.0, F.sum(y, axis=(1, 2)) * 3.0, F.sum(y, axis=(0, 1)) * 3.0)
    x = np.random.default_rng(7).standard_normal((5, 6, 40)).astype(np.float32)
    graph = dezero.trace(sums).lower(x)
    assert sorted(g.axes for g in graph.groups if g.axes) == [(0, 1), (1,), (1, 2)]
    for got, want in zip(graph.compile("cpu").wait()(x), sums(Variable(x)), strict=True):
        np.testing.assert_array_equal(got.data, want.data)
    graph.device = "gpu"  # adding in another order anyway, a GPU kernel folds it
    node, = (n for n in graph.nodes if n.op == "sum" and n.attrs["axis"] == (0, 2))
    assert passes.fusion_refusal(node, "gpu") is None


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_composed_softmax_is_one_kernel_of_three_passes(dtype):
    def f(x):
        e = F.exp(x - F.max(x, axis=1, keepdims=True))
        return F.log(e / F.sum(e, axis=1, keepdims=True) + 1.0)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((40, 10)) * 5).astype(dtype)
    graph = dezero.trace(f).lower(x)
    group, = graph.groups
    assert [n.op for n in group.nodes] == ["max", "sub", "exp", "sum", "div", "add", "log"]
    spec = kernel_spec(group)
    assert len(spec.passes) == 3  # the max, the sum of exp, then the quotient's log
    assert spec.body.startswith("// kernel k0: max, sub, exp, sum, div, add, log\n"
                                "// pass 0, over axes [1] of [40, 10]:\n")
    assert "  _acc_e = sum(_acc_e, d);\n" in spec.body  # e = sum(d): the sum of exp
    close_to_the_interpreter(graph.compile("cpu").wait()(x).data, graph.interpret(x).data,
                             dtype)


@needs_compiler
def test_odd_inputs_a_strided_view_an_empty_batch_and_a_broadcast_row():
    def f(x, c):
        y = F.exp(x * c - 1.0)
        s = F.sum(y, axis=1, keepdims=True)
        return y / s * 2.0
    rng = np.random.default_rng(3)
    base = rng.standard_normal((12, 14)).astype(np.float32)
    cases = [(base[::2, ::2], np.float32(0.5) * np.ones((6, 1), np.float32)),
             (base[:6, :7].T.copy().T, rng.standard_normal((1, 7)).astype(np.float32)),
             (np.zeros((0, 7), np.float32), np.ones((1, 7), np.float32))]
    graphs = [dezero.trace(f).lower(x, c) for x, c in cases]
    for (x, c), graph, plan in zip(cases, graphs, cpu_plans(graphs)):
        assert graph.groups[0].axes == (1,) and graph.groups[0].compiled
        got = plan(x, c).data
        want = graph.interpret(x, c).data
        assert got.shape == want.shape
        close_to_the_interpreter(got, want, np.float32)


def test_reductions_that_cannot_fold_stay_boundaries():
    # a max of no elements raises in numpy (a graph file may hold one): a kernel
    # would return -inf
    f32 = np.dtype(np.float32)
    node = Node("op", "max", [Value("x", (0, 3), f32)], {"axis": 0, "keepdims": False},
                [Value("y", (3,), f32)])
    assert passes.fusion_refusal(node) == "a max of no elements (numpy raises)"
    # integers are summed by numpy; a kernel computes in one float type
    graph = dezero.trace(lambda x: F.sum(x) * 2).lower(np.arange(6).reshape(2, 3))
    assert not graph.groups
    # on the GPU a kernel with a reduction must be one cupy ReductionKernel
    # (test_gpu_compile.py): one fold, no second pass
    graph = dezero.trace(lambda x: F.sum(F.exp(x) * 2.0 - 1.0, axis=1) * 3.0 + 1.0).lower(
        np.ones((4, 5), np.float32))
    assert graph.groups[0].axes == (1,)
    graph.device = "gpu"
    assert passes.fusion_refusal(graph.groups[0].nodes[3], "gpu") is None
    passes.decide(graph.groups[0], "gpu")
    assert graph.groups[0].compiled


@needs_compiler
def test_a_fused_training_step_with_reductions_matches_the_python_replay(monkeypatch):
    x, t = batch(n=512, dim=6, classes=4)  # 512 x 40 elements: the reductions pay
    results = []
    for backend in ("python", "cpu"):
        monkeypatch.setattr(backends, "DEFAULT", backend)
        np.random.seed(5)  # the same initial weights
        model = models.MLP((40, 4))
        traced = dezero.trace(training_step(model, optimizers.Adam(0.01).setup(model)), check=True)
        losses = [float(traced(x, t).data) for _ in range(4)]
        traced.graph.compile().wait()
        assert any(g.axes and g.compiled for g in traced.graph.groups)
        losses += [float(traced(x, t).data) for _ in range(2)]
        results.append((losses, [p.data.copy() for p in model.params()]))
    (l0, p0), (l1, p1) = results
    np.testing.assert_allclose(l0, l1, rtol=1e-6)
    for a, b in zip(p0, p1):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_compiler
def test_a_softmax_over_a_middle_axis_and_a_column_sum_of_three_axes():
    def f(x):
        e = F.exp(x - F.max(x, axis=1, keepdims=True))
        p = e / F.sum(e, axis=1, keepdims=True)
        return p * 2.0, F.sum_to(F.tanh(x) * 3.0 + 1.0, (1, 1, x.shape[2])) * 0.5
    x = np.random.default_rng(4).standard_normal((4, 5, 6)) * 3
    graph = dezero.trace(f).lower(x)
    assert sorted(g.axes for g in graph.groups) == [(0, 1), (1,)]
    for got, want in zip(graph.compile("cpu").wait()(x), graph.interpret(x)):
        close_to_the_interpreter(got.data, want.data, np.float64)


def test_a_reduction_kernel_source_is_logged_at_level_four(capsys, monkeypatch):
    monkeypatch.setattr(backends, "DEFAULT", "cpu")  # the backend that makes kernels
    def spread(x):
        return F.sum(F.exp(x * 2.0), axis=0) + 1.0

    with dezero.static.debug(4):
        dezero.trace(spread)(Variable(np.ones((64, 300), np.float32)))
    assert "kernel k0 of spread:\n// kernel k0: mul, exp, sum, add" in capsys.readouterr().err


def masked_token_losses(h, mask):
    """Per-token values of (B, T, V) scores times a (B, T) mask, which has the
    reduced axis not at all: a sum (one fold) and a softmax's mean score (passes)."""
    return (F.sum(h * 2.0, axis=-1) * mask,
            F.sum(F.softmax(h, axis=-1) * h, axis=-1) * mask + 1.0)


@needs_compiler
def test_a_per_token_loss_masked_by_a_value_of_the_kept_shape_replays_as_eager(
        monkeypatch, tmp_path):
    # the kernels asked np.broadcast_shapes whether the (4, 3) mask has the reduced
    # axis as 1, that is broadcasts to (4, 3, 1): a ValueError at the first call
    # with the library in the cache
    monkeypatch.setattr(backends, "DEFAULT", "cpu")
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(8)
    h = rng.standard_normal((4, 3, 5)).astype(np.float32)
    mask = (rng.random((4, 3)) > 0.3).astype(np.float32)
    dezero.trace(masked_token_losses).lower(h, mask).compile().wait()  # fills the cache
    traced = dezero.trace(masked_token_losses)
    for _ in range(3):
        for got, want in zip(traced(h, mask), masked_token_losses(h, mask), strict=True):
            close_to_the_interpreter(got.data, want.data, np.float32)
    assert len(traced.graph.groups) == 2 and all(
        g.axes == (2,) and g.compiled for g in traced.graph.groups)
    assert hasattr(traced.graph.compile(), "library")


@needs_compiler
def test_reduction_inputs_the_kernel_cannot_read_as_they_are_are_laid_out_first():
    # The kernel reads each input as rows by positions, one stride each: a (1, 6, 1)
    # broadcast over (4, 6, 5) has none across the kept axes (0 then 1), so the kernel
    # refuses it and reads a copy; a transpose, or a float64 batch, it reads as is or
    # converted, and the results are eager code's
    def f(x, w, v):
        return F.max(x * w + v, axis=2), F.min(x - v, axis=2)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((1, 6, 1)).astype(np.float32)
    v = np.ascontiguousarray(rng.standard_normal((5, 6, 4)).astype(np.float32)).T
    graph = dezero.trace(f).lower(x, w, v)
    assert [g.axes for g in graph.groups] == [(2,), (2,)]
    plan = graph.compile("cpu").wait()
    # (run, not a call: a call refuses w of another shape than the traced one; the
    # kernel under it reads any layout that broadcasts)
    for args in ((x, w, v), (x, np.ascontiguousarray(np.broadcast_to(w, x.shape)), v.copy())):
        for got, want in zip(plan.run(args), f(*args), strict=True):
            np.testing.assert_array_equal(got.data, want.data)
