"""softmax and log_softmax in traced graphs on the CPU: split into their forward's
steps (a max, an exp-sum, a quotient) and fused with the elementwise ops around them
into one reduction kernel; values equal the interpreter's within a few ulp (exp and
log are the C library's), and the interpreter's equal eager execution's bits."""
import sys

import numpy as np
import pytest
from train_helpers import entropy_bonus_step

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Variable, optimizers
from dezero.kernels import cpu, cpu_reductions, gpu_reductions
from dezero.kernels.codegen import kernel_spec
from dezero.static import backends, passes
from dezero.static.ir import Node, Value

needs_compiler = pytest.mark.skipif(cpu.missing_reason() is not None,
                                    reason=str(cpu.missing_reason()))


def close(got, want, dtype):
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps)


def kernel_steps(graph):
    return [s for s in graph.program.steps if s.kind in ("node", "kernel")]


def many_softmaxes(x, b, z, e):
    """Several cases in one graph (one library): a scaled softmax with a bias before
    it and an epilogue after it, log_softmax over axis 0 and -1, a softmax over two
    axes of a 3-d input, and an empty batch."""
    p = F.softmax(x * 0.5 + b) * 3.0
    return (p, F.log_softmax(x, axis=0), F.log_softmax(x, axis=-1) - 1.0,
            F.softmax(z, axis=(1, 2)), F.softmax(e))


def inputs(dtype, rows=(0.0, 0.0)):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((33, 10)) * 4).astype(dtype)
    x[3] = -np.inf                       # a row of -inf: NaN, as eager gives
    x[4, :5] = -np.inf                   # some -inf: their probability is 0
    x[5] = np.finfo(dtype).max / 4       # huge values: the max is subtracted first
    x[6, 0] = np.finfo(dtype).max
    return (x, rng.standard_normal(10).astype(dtype),
            rng.standard_normal((3, 4, 5)).astype(dtype), np.zeros((0, 7), dtype))


def both(*args):
    """many_softmaxes of float32 inputs and of float64 ones: one graph, one library."""
    return many_softmaxes(*args[:4]) + many_softmaxes(*args[4:])


@needs_compiler
def test_softmax_and_log_softmax_run_as_reduction_kernels():
    args = inputs(np.float32) + inputs(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # the row of -inf
        graph = dezero.trace(both).lower(*args)
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax" not in ops and "log_softmax" not in ops
    steps = kernel_steps(graph)
    assert len(steps) == 10 and all(s.kind == "kernel" for s in steps)
    first = graph.groups[0]
    assert [n.op for n in first.nodes] == ["mul", "add", "max", "sub", "exp", "sum", "div",
                                           "mul"]  # the scale and bias before, * 3 after
    assert sorted(g.axes for g in graph.groups) == 2 * [(0,)] + 6 * [(1,)] + 2 * [(1, 2)]
    plan = graph.compile("cpu").wait()
    with np.errstate(invalid="ignore", over="ignore"):
        got, want = plan(*args), graph.interpret(*args)
        eager = both(*(Variable(a) for a in args))
    for g, w, e in zip(got, want, eager):
        assert g.shape == w.shape == e.shape and g.dtype == w.dtype == e.dtype
        np.testing.assert_array_equal(w.data, e.data)  # the same numpy calls as forward
        close(g.data, w.data, g.dtype)
    for p in (got[0].data, got[5].data):
        assert np.isnan(p[3]).all() and (p[4, :5] == 0).all()
        np.testing.assert_allclose(p[5], 3.0 / 10, rtol=8 * np.finfo(p.dtype).eps)


def masked_fill(x, mask):
    """A masked fill between elementwise ops: numpy's where of a boolean mask."""
    return F.exp(F.where(mask, x * 2.0, -1.0)) + 1.0


def masked_softmax(scores, mask):
    """An attention's: the masked scores get the lowest number, the masked weights 0."""
    weights = F.softmax(F.where(mask, scores * 0.5, float(np.finfo(scores.dtype).min)))
    return F.where(mask, weights, 0.0)


@needs_compiler
def test_a_masked_fill_joins_the_kernels_around_it_reading_its_mask_as_bool():
    # the boolean condition is a kernel input of its own type (one byte an element);
    # a mask that broadcasts, a transposed one and one of the full shape
    rng = np.random.default_rng(4)
    x, scores = rng.standard_normal((6, 9)).astype(np.float32), \
        rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    causal = np.tri(5, dtype=bool)
    for f, arrays, ops in ((masked_fill, (x, rng.random((6, 9)) > 0.5),
                            ["mul", "where", "exp", "add"]),
                           (masked_softmax, (scores, causal),
                            ["mul", "where", "max", "sub", "exp", "sum", "div", "where"])):
        traced = dezero.trace(f)
        traced(*arrays)
        group, = traced.graph.groups
        assert [n.op for n in group.nodes] == ops and group.compiled
        mask = kernel_spec(group).inputs[[v.dtype for v in group.inputs].index(bool)]
        assert (mask.ctype, mask.dtype) == ("bool", "bool")
        plan = traced.graph.compile("cpu").wait()
        values = arrays[0]
        for condition in (arrays[1], np.ascontiguousarray(arrays[1].T).T,
                          np.ones_like(arrays[1])):
            close(plan(values, condition).data, f(values, condition).data, np.float32)
    weights = plan(scores, causal).data
    assert (weights[..., ~causal] == 0).all()  # masked: exactly 0, as eager code gives


def test_where_a_step_cannot_join_a_kernel_the_op_stays_whole_but_not_on_the_gpu(
        monkeypatch):
    def as_if_on_the_gpu(graph, **kwargs):
        graph.device = "gpu"
        return passes.optimize(graph, **kwargs)

    ops = [n.op for n in dezero.trace(F.softmax).lower(np.ones((4, 3))).nodes]
    assert "softmax" not in ops
    # integers: a kernel computes in one float type
    ops = [n.op for n in dezero.trace(F.log_softmax).lower(np.ones((4, 3), np.int32)).nodes]
    assert "log_softmax" in ops
    # a softmax over an axis of no elements raises, as numpy's max does
    with pytest.raises(ValueError):
        dezero.trace(F.softmax).lower(np.ones((4, 0)))
    # on the GPU the steps join a row kernel (backends/gpu_reductions.py); the graph
    # is planned by the interpreter, which needs no cupy to show what the passes chose
    monkeypatch.setattr(sys.modules["dezero.static.trace"], "optimize", as_if_on_the_gpu)
    monkeypatch.setitem(backends.BACKENDS, "cupy", backends.BACKENDS["interpreter"])
    graph = dezero.trace(lambda x: F.softmax(x) * 2.0).lower(np.ones((4, 3), np.float32))
    assert [n.op for n in graph.nodes if n.kind == "op"] == ["max", "sub", "exp", "sum", "div",
                                                             "mul"]
    group, = graph.groups
    assert group.compiled and passes.gpu_misfit(group) is None


# =============================================================================
# softmax_cross_entropy: loss and gradient in one kernel
# =============================================================================


def losses(x, b, t, z, u, e, s):
    """Three losses and their gradients in one graph (one library): scores scaled and
    shifted by a bias (a matmul epilogue's add), float64 scores with int32 labels of
    shape (N, 1) and some -inf scores, and an empty batch (NaN, as numpy's mean)."""
    results = []
    for scores, labels, leaf in ((x * 0.5 + b, t, x), (z, u, z), (e, s, e)):
        loss = F.softmax_cross_entropy(scores, labels)
        loss.backward()
        results += [loss, leaf.grad]
    return results


def loss_inputs(rng):
    x = (rng.standard_normal((33, 10)) * 4).astype(np.float32)
    x[5] = np.finfo(np.float32).max / 4  # huge scores: the max is subtracted first
    z = rng.standard_normal((20, 4)) * 3
    z[2, 1:] = -np.inf                   # their probability is 0; the label's is 1
    u = rng.integers(0, 4, (20, 1)).astype(np.int32)
    u[2] = 0
    return (x, rng.standard_normal(10).astype(np.float32), rng.integers(0, 10, 33), z, u,
            np.zeros((0, 5), np.float32), np.zeros(0, np.int64))


@needs_compiler
def test_the_loss_and_its_gradient_run_as_one_kernel():
    args = loss_inputs(np.random.default_rng(1))

    def leaves(args):
        return [Variable(a) if a.dtype.kind == "f" and a.ndim == 2 else a for a in args]

    with np.errstate(invalid="ignore"):
        graph = dezero.trace(losses).lower(*leaves(args))
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax_cross_entropy" not in ops and ops.count("softmax_cross_entropy_grad") == 3
    steps = kernel_steps(graph)
    assert [s.kind for s in steps] == ["kernel"] * 3  # each loss: forward and backward
    first = [n.op for n in graph.groups[0].nodes]
    assert first[:3] == ["mul", "add", "max"] and first[-2:] == ["softmax_cross_entropy_grad",
                                                                 "mul"]  # * 0.5 of x's
    plan = graph.compile("cpu").wait()
    with np.errstate(invalid="ignore"):
        got, want = plan(*leaves(args)), graph.interpret(*leaves(args))
        eager = losses(*leaves(args))
    for g, w, e in zip(got, want, eager):
        assert g.shape == w.shape == e.shape and g.dtype == w.dtype == e.dtype
        np.testing.assert_array_equal(w.data, e.data)  # forward's numpy calls, in order
        close(g.data, w.data, g.dtype)
    assert np.isnan(got[4].data) and got[5].shape == (0, 5)
    # the gradient against its closed form: (softmax - one_hot) / N
    z, u = args[3], args[4].ravel()
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(20), u] -= 1
    np.testing.assert_allclose(got[3].data, p / 20, rtol=1e-13, atol=1e-16)
    # a label out of range at a replay: an error, as forward's
    bad = list(args)
    bad[2] = bad[2].copy()
    bad[2][7] = 10
    with pytest.raises(IndexError, match="out of range"):
        plan(*leaves(bad))
    with pytest.raises(IndexError, match="out of range"):
        graph.interpret(*leaves(bad))


def test_pick_labels_takes_each_rows_entry_and_differentiates():
    x = np.random.default_rng(2).standard_normal((4, 3))
    t = np.array([2, 0, 1, 2])
    y = F.PickLabels()(Variable(x), t)
    np.testing.assert_array_equal(y.data, x[np.arange(4), t][:, None])
    xv = Variable(x)
    F.sum(F.PickLabels()(xv, t) * np.arange(1.0, 5.0)[:, None]).backward()
    want = np.zeros_like(x)
    want[np.arange(4), t] = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(xv.grad.data, want)
    with pytest.raises(IndexError, match="pick_labels: id 3 is out of range for 3 classes"):
        F.PickLabels()(Variable(x), np.array([0, 1, 3, 0]))


@needs_compiler
def test_losses_over_one_class_or_with_labels_of_odd_shapes_replay_as_eager_code():
    # a (N, 1) score has rows of one element: the label's pick reduces no axis of
    # length > 1 (it made a kernel with no reduced axis, which could not take its (N,)
    # labels); labels of shape (1, N) or (N, 1, 1), which forward ravels, do not view as
    # one per row. Such losses stay out of kernels: before, the graph's kernels were not
    # built at all
    def losses(x, t, z, u, w):
        results = []
        for scores, labels in ((x, t), (z, u), (z, w)):
            loss = F.softmax_cross_entropy(scores * 2.0, labels)
            loss.backward()
            results += [loss, scores.grad]
        return results

    def inputs(rng):
        return (Variable(rng.standard_normal((16, 1))), np.zeros(16, np.int64),
                Variable(rng.standard_normal((6, 6))), rng.integers(0, 6, (1, 6)),
                rng.integers(0, 6, (6, 1, 1)))

    rng = np.random.default_rng(5)
    graph = dezero.trace(losses).lower(*inputs(rng))
    assert all(g.axes != () for g in graph.groups)
    f64, i64 = np.dtype(np.float64), np.dtype(np.int64)
    pick = Node("op", "pick_labels", [Value("x", (16, 1), f64), Value("t", (16,), i64)], {},
                [Value("y", (16, 1), f64)])
    assert "no axis" in passes.fusion_refusal(pick)
    pick = Node("op", "pick_labels", [Value("x", (6, 6), f64), Value("t", (1, 6), i64)], {},
                [Value("y", (6, 1), f64)])
    assert "(N,) or (N, 1)" in passes.fusion_refusal(pick)
    got = graph.compile("cpu").wait()(*inputs(np.random.default_rng(6)))
    for g, e in zip(got, losses(*inputs(np.random.default_rng(6))), strict=True):
        assert g.shape == e.shape
        close(g.data, e.data, np.float64)


def test_a_softmax_of_a_0d_value_stays_whole_and_replays_as_eager_code():
    # numpy reduces a 0-d array over axis 0 or -1 (the value itself): the split of
    # softmax into its steps took the axis modulo ndim 0 (ZeroDivisionError)
    def softmaxes(s):
        return F.softmax(s * 2.0, axis=-1), F.log_softmax(s, axis=0) + 1.0
    s = np.array(0.7, np.float32)
    graph = dezero.trace(softmaxes).lower(s)
    assert {"softmax", "log_softmax"} <= {n.op for n in graph.nodes}
    for got, want in zip(graph.compile()(np.array(-3.0, np.float32)),
                         softmaxes(np.array(-3.0, np.float32)), strict=True):
        assert got.shape == want.shape == () and got.dtype == want.dtype
        np.testing.assert_array_equal(got.data, want.data)


# =============================================================================
# Outputs of a kernel of several passes: each stored by the pass that computes it
# =============================================================================


def entropy_bonus_run(traced, steps=4):
    """A linear classifier trained by Adam on a loss with an entropy bonus, returning
    the loss and the logits of each step: a kernel of four passes whose first stores
    the logits (f), its last computes bf."""
    np.random.seed(0)
    model = L.Linear(5)
    optimizer = optimizers.Adam().setup(model)
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 5, 8)
    step = entropy_bonus_step(model, optimizer, traced)
    results = []
    for i in range(steps):
        results.append([v.data.copy() for v in step(x, t)])
        if traced and i == 0:
            step.graph.compile().wait()
    return results, model.W.data.copy(), step


@needs_compiler
def test_an_entropy_bonus_trained_by_adam_returns_the_logits_of_eager_code(monkeypatch):
    # the logits' store was written again by the last pass, from a local never set
    # there, where a value that pass computes is named with the logits' name at its end
    monkeypatch.setattr(backends, "DEFAULT", "cpu")
    (traced, W, step), (eager, W_eager, _) = entropy_bonus_run(True), entropy_bonus_run(False)
    assert any(g.axes and g.compiled and len(kernel_spec(g).passes) > 2
               for g in step.graph.groups)
    for got, want in zip(traced, eager, strict=True):
        for g, w in zip(got, want, strict=True):
            close(g, w, np.float32)
    np.testing.assert_allclose(W, W_eager, rtol=1e-5, atol=1e-6)


def softmax_keeping_its_input(x):
    y = x * 2.0
    return y, F.softmax(y) + 1.0


@needs_compiler
def test_a_pass_stores_the_outputs_it_computes_whatever_their_names(monkeypatch):
    # the output c is computed by the first pass; the last one assigns bc, whose name
    # ends in c's: only the first stores c, on the CPU and the GPU. Lowered for the
    # python backend, so that no kernel is made before the value is renamed.
    monkeypatch.setattr(backends, "DEFAULT", "python")
    x = np.random.default_rng(7).standard_normal((4, 6)).astype(np.float32)
    graph = dezero.trace(softmax_keeping_its_input).lower(x)
    group, = graph.groups
    c, _ = group.outputs
    assert c.name == "c"
    quotient, = [n for n in group.nodes if n.op == "div"]
    quotient.outputs[0].name = "bc"
    spec = kernel_spec(group)
    assert len(spec.passes) == 3 and "const float bc = " in "\n".join(spec.passes[2][0])
    source = cpu_reductions.reduction_source(spec)
    assert source.count("[_k * _R + _r] = c;") == 1
    assert gpu_reductions.row_source(spec).count("_r_c[_k * _R + _r] = c;") == 1
    for got, want in zip(graph.compile("cpu").wait()(x), softmax_keeping_its_input(x),
                         strict=True):
        close(got.data, want.data, np.float32)
