"""softmax, log_softmax and softmax_cross_entropy fused on the GPU: row kernels.

On the GPU as on the CPU these ops are split into their forward's steps (a max, an
exp-sum, a quotient, a label's pick) and fused with the elementwise work around
them; such a kernel of several passes over each row runs as a cupy.ElementwiseKernel
of raw params, one thread a row running the passes of the same ReductionSpec the
CPU's loops run, and a loss's mean over the rows as a ReductionKernel after it. A
batch's loss and gradient are those two launches. Every replay must match eager
numpy and the interpreter (the same graph op by op on cupy) within a tolerance, as
each thread adds its row in order, not numpy's pairwise order.

    python -m pytest -q tests/gpu/test_fused_softmax.py
"""
import re

import numpy as np
import pytest
from train_helpers import entropy_bonus_step, trained_on_both_devices

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.kernels import gpu, gpu_reductions
from dezero.kernels.codegen import kernel_spec
from dezero.models import MLP

cp = pytest.importorskip("cupy")
if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

# Relative and absolute: a row of 1500 float32 values summed in order.
TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}
# (rows, columns): one row, one column, rows of more than 1000 classes
SHAPES = [(33, 10), (1, 7), (6, 1), (5, 1500)]


def close(got, want, dtype):
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def _tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _interpreted(graph, *arrays):
    return [cp.asnumpy(v.data) for v in _tuple(graph.compile("interpreter")(*arrays))]


@pytest.fixture
def launches(monkeypatch):
    """The names of the cupy kernels launched, through the backend's kernel makers."""
    names = []

    def counted(make):
        def made(*args):
            kernel, name = make(*args), args[-1] if isinstance(args[-1], str) else \
                dict(args[0])["name"]

            def launch(*arrays, **kwargs):
                names.append(name)
                return kernel(*arrays, **kwargs)
            return launch
        return made
    monkeypatch.setattr(gpu, "elementwise_kernel", counted(gpu.elementwise_kernel))
    monkeypatch.setattr(gpu_reductions, "reduction_kernel",
                        counted(gpu_reductions.reduction_kernel))
    return names


def softmaxes(x, b):
    """A softmax with a bias before it and a scale after it, log_softmax over both
    axes (an epilogue after one)."""
    return (F.softmax(x * 0.5 + b) * 3.0, F.log_softmax(x, axis=0),
            F.log_softmax(x, axis=-1) - 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_and_log_softmax_run_as_row_kernels(shape, dtype, launches):
    rng = np.random.default_rng(0)
    traced = dezero.trace(softmaxes)
    for _ in range(3):  # the first call records, the others replay
        x = (rng.standard_normal(shape) * 4).astype(dtype)
        b = rng.standard_normal(shape[1]).astype(dtype)
        got = traced(cp.asarray(x), cp.asarray(b))
        for g, w in zip(got, softmaxes(Variable(x), Variable(b)), strict=True):
            assert isinstance(g.data, cp.ndarray) and g.shape == w.shape and g.dtype == dtype
            close(cp.asnumpy(g.data), w.data, dtype)
    graph = traced.graph
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax" not in ops and "log_softmax" not in ops
    assert len(graph.groups) == 3 and all(g.compiled for g in graph.groups)
    plan = graph.compile()
    assert plan.kernel_source.count("cupy.ElementwiseKernel, one thread a row") == 3
    assert [s.strip().split(" = ")[1].split("(")[0] for s in plan.source.splitlines()
            if " = _k" in s] == ["_k0", "_k1", "_k2"]  # nothing runs beside the kernels
    del launches[:]
    x, b = cp.asarray(x), cp.asarray(b)
    for g, w in zip(plan(x, b), _interpreted(graph, x, b)):
        close(cp.asnumpy(g.data), w, dtype)
    assert launches == ["k0", "k1", "k2"]


def test_a_softmax_over_two_axes_of_a_3d_value_and_rows_of_minus_infinity():
    x = np.random.default_rng(1).standard_normal((3, 4, 5))
    x[1] = -np.inf  # a block of -inf: NaN, as eager gives
    x[2, 0, :3] = -np.inf  # some -inf: their probability is 0
    traced = dezero.trace(lambda x: F.softmax(x, axis=(1, 2)))
    with np.errstate(invalid="ignore"):
        traced(cp.asarray(x))
        got = cp.asnumpy(traced(cp.asarray(x)).data)
        want = F.softmax(Variable(x), axis=(1, 2)).data
    assert traced.graph.groups[0].compiled
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert np.isnan(got[1]).all() and (got[2, 0, :3] == 0).all()


def loss_and_gradient(x, t):
    loss = F.softmax_cross_entropy(x, t)
    loss.backward()
    return loss, x.grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES[:2] + SHAPES[3:])
def test_a_batchs_loss_and_gradient_are_two_launches(shape, dtype, launches):
    """The forward, its mean over the batch and the backward (softmax - one_hot) / N
    fuse into one row kernel, which computes the softmax once, and the ReductionKernel
    of the mean: two launches, nothing else."""
    rng = np.random.default_rng(2)
    traced = dezero.trace(loss_and_gradient)
    for labels in (np.int64, np.int32):
        for _ in range(2):
            x = (rng.standard_normal(shape) * 3).astype(dtype)
            t = rng.integers(0, shape[1], shape[0]).astype(labels)
            if labels is np.int32:
                t = t[:, None]  # labels of shape (N, 1)
            got = traced(Variable(cp.asarray(x)), cp.asarray(t))
            want = loss_and_gradient(Variable(x), t)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == dtype
                close(cp.asnumpy(g.data), w.data, dtype)
    graph = traced.graph
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax_cross_entropy" not in ops and "softmax" not in ops
    assert ops.count("exp") == 1  # the backward reads the forward's probabilities
    group, = graph.groups
    assert group.compiled and "softmax_cross_entropy_grad" in [n.op for n in group.nodes]
    plan = graph.compile()
    assert len(re.findall(r"= _k\d+\(", plan.source)) == 1
    del launches[:]
    xg, tg = Variable(cp.asarray(x)), cp.asarray(t)
    got = plan(xg, tg)
    assert launches == ["k0", "k0_total"]
    for g, w in zip(got, _interpreted(graph, Variable(cp.asarray(x)), tg)):
        close(cp.asnumpy(g.data), w, dtype)
    # the gradient against its closed form: (softmax - one_hot) / N
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(shape[0]), t.ravel()] -= 1
    close(cp.asnumpy(got[1].data), p / shape[0], dtype)


def test_a_loss_over_one_class_stays_one_op_equal_to_eager():
    """Scores of one column: the label's pick would reduce no axis of length > 1, so
    the loss stays whole (as on the CPU) and its replay equals eager code."""
    traced = dezero.trace(loss_and_gradient)
    x, t = np.random.default_rng(5).standard_normal((6, 1)), np.zeros(6, np.int64)
    for _ in range(2):
        got = traced(Variable(cp.asarray(x)), cp.asarray(t))
    for g, w in zip(got, loss_and_gradient(Variable(x), t), strict=True):
        close(cp.asnumpy(g.data), w.data, np.float64)
    assert "softmax_cross_entropy" in [n.op for n in traced.graph.nodes]


def test_a_label_out_of_range_raises_and_an_empty_batch_gives_nan():
    traced = dezero.trace(loss_and_gradient)
    x, t = np.random.default_rng(3).standard_normal((8, 4)), np.arange(8) % 4
    traced(Variable(cp.asarray(x)), cp.asarray(t))
    t[5] = 4
    with pytest.raises(IndexError, match=r"kernel k0 \(.*\): a label is out of range; labels "
                                         r"are class ids in 0..3"):
        traced(Variable(cp.asarray(x)), cp.asarray(t))
    t[5] = -1
    with pytest.raises(IndexError, match="out of range"):
        traced(Variable(cp.asarray(x)), cp.asarray(t))
    empty = dezero.trace(loss_and_gradient)
    for _ in range(2):
        with np.errstate(invalid="ignore"):
            loss, grad = empty(Variable(cp.zeros((0, 5), cp.float32)), cp.zeros(0, cp.int64))
        assert np.isnan(cp.asnumpy(loss.data)) and grad.shape == (0, 5)
    assert empty.graph.groups[0].compiled


@pytest.mark.parametrize("optimizer", [optimizers.SGD, optimizers.Adam])
def test_a_spiral_training_step_traced_on_the_gpu_trains_as_eager_numpy(optimizer):
    """Book step 47's loop (an MLP on the spiral, softmax_cross_entropy): the loss, its
    gradient and the mean run as one row kernel and its ReductionKernel, the
    parameters equal eager numpy's after five steps."""
    x, t = dezero.datasets.get_spiral(train=True)
    x = x.astype(np.float32)
    gpu_step = trained_on_both_devices(lambda: MLP((10, 3)), optimizer, x, t, loss_rtol=1e-5)
    graph = gpu_step.graph
    loss, = [g for g in graph.groups if "pick_labels" in [n.op for n in g.nodes]]
    assert loss.compiled and "softmax_cross_entropy_grad" in [n.op for n in loss.nodes]
    assert "softmax_cross_entropy" not in [n.op for n in graph.nodes]


def test_rows_longer_than_a_row_kernel_takes_run_op_by_op(capsys):
    """A row kernel runs each row on one thread: rows of more than passes.GPU_ROW_MAX
    elements leave the kernel (the debug output says why) and replay as eager code."""
    from dezero.static import passes
    traced = dezero.trace(loss_and_gradient)
    x = np.random.default_rng(4).standard_normal((3, passes.GPU_ROW_MAX + 1))
    t = np.array([0, 5, passes.GPU_ROW_MAX])
    with dezero.static.debug(3):
        traced(Variable(cp.asarray(x)), cp.asarray(t))
    assert f"rows of {passes.GPU_ROW_MAX + 1} elements in several passes or folds" in \
        capsys.readouterr().err
    for g, w in zip(traced(Variable(cp.asarray(x)), cp.asarray(t)),
                    loss_and_gradient(Variable(x), t), strict=True):
        close(cp.asnumpy(g.data), w.data, np.float64)
    assert all(g.axes is None or passes.gpu_misfit(g) is None or not g.compiled
               for g in traced.graph.groups)
    assert "pick_labels" not in [n.op for g in traced.graph.groups for n in g.nodes]


def test_an_entropy_bonus_trained_by_adam_returns_the_logits_of_eager_numpy():
    """A kernel of four passes whose first stores the logits (f) and whose last
    computes bf: only the first stores f (the last stored it again, from a local it
    never set, where a name ended in f's)."""
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 5, 8)
    runs = []
    for xp in (np, cp):
        np.random.seed(0)
        model = dezero.layers.Linear(5, in_size=4)
        if xp is cp:
            model.to_gpu()
        optimizer = optimizers.Adam().setup(model)

        step = entropy_bonus_step(model, optimizer, traced=xp is cp)
        runs.append([[dezero.cuda.as_numpy(v.data) for v in step(xp.asarray(x), xp.asarray(t))]
                     for _ in range(4)])
    assert any(g.axes and g.compiled and len(kernel_spec(g).passes) > 2
               for g in step.graph.groups)
    for got, want in zip(runs[1], runs[0], strict=True):
        for g, w in zip(got, want, strict=True):
            close(g, w, np.float32)
