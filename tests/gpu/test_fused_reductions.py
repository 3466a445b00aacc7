"""Reductions fused on the GPU: one cupy.ReductionKernel with the work before and after.

A group of elementwise ops, one reduction (sum, mean, max, min, sum_to) and the ops
on its result runs as one ReductionKernel (kernels/gpu.py): the ops before it as
map_expr (which also stores the values of the full shape that later nodes read),
the ops after it as post_map_expr. Groups of more passes over each row or more
reductions run as row kernels (test_fused_softmax.py). Every
replay must match the interpreter (the same graph, op by op on cupy) and eager numpy:
sums within the tolerance of test_fused.py, since cupy's reduction kernel adds each
row in its own order (threads of a block, then a tree of their sums), which numpy's
pairwise sum does not; max and min exactly.

    python -m pytest -q tests/gpu/test_fused_reductions.py
"""
import re

import numpy as np
import pytest
from train_helpers import twin_models

import dezero
import dezero.functions as F
from dezero import Variable

cp = pytest.importorskip("cupy")
if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

# As test_fused.py's: relative and absolute.
TOLERANCE = {np.float32: 2e-5, np.float64: 1e-12}

# name -> (function, the shapes of its arguments, the ops of its one kernel)
CASES = {
    "mean of squared error": (lambda y, t: F.mean((y - t) ** 2), [(64, 10), (64, 10)],
                              ["sub", "pow", "sum", "mul"]),
    "row sums, work after": (lambda x, c: F.sum(F.exp(x) * c - 1.0, axis=1) * 3.0 + 1.0,
                             [(33, 20), (20,)], ["exp", "mul", "sub", "sum", "mul", "add"]),
    "keepdims with a row input": (lambda x, r: F.sum(x * x, axis=1, keepdims=True) / r,
                                  [(40, 7), (40, 1)], ["mul", "sum", "div"]),
    "column max": (lambda x, b: F.max(F.tanh(x), axis=0) + b, [(50, 9), (9,)],
                   ["tanh", "max", "add"]),
    "min over two axes": (lambda x: F.min(x * 2.0 + 1.0, axis=(0, 2)) * 0.5, [(6, 5, 4)],
                          ["mul", "add", "min", "mul"]),
    "a scale's gradient": (lambda gy, x: F.sum_to(gy * x, (1, 12)), [(30, 12), (30, 12)],
                           ["mul", "sum_to"]),
    # one input and one output, contiguous, 300 elements: cupy would take CUB's path
    "a sum of one input": (lambda x: F.sum(F.exp(x)), [(300,)], ["exp", "sum"]),
}


def _interpreted(graph, *arrays):
    return [cp.asnumpy(v.data) for v in _tuple(graph.compile("interpreter")(*arrays))]


def _tuple(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CASES)
def test_a_reduction_and_its_elementwise_work_replay_as_one_reduction_kernel(name, dtype):
    fn, shapes, ops = CASES[name]
    traced = dezero.trace(fn)
    rng = np.random.default_rng(0)
    for _ in range(3):  # the first call records, the others replay
        arrays = [rng.uniform(0.5, 1.5, s).astype(dtype) for s in shapes]
        got = _tuple(traced(*(cp.asarray(a) for a in arrays)))
        want = _tuple(fn(*(Variable(a) for a in arrays)))
        for g, w in zip(got, want, strict=True):
            assert isinstance(g.data, cp.ndarray) and g.shape == w.shape
            np.testing.assert_allclose(cp.asnumpy(g.data), w.data, rtol=TOLERANCE[dtype],
                                       atol=TOLERANCE[dtype])
    graph = traced.graph
    inputs = [cp.asarray(rng.uniform(0.5, 1.5, s).astype(dtype)) for s in shapes]
    for g, w in zip(_tuple(graph.compile()(*inputs)), _interpreted(graph, *inputs)):
        np.testing.assert_allclose(cp.asnumpy(g.data), w, rtol=TOLERANCE[dtype],
                                   atol=TOLERANCE[dtype])
    group, = graph.groups
    assert [n.op for n in group.nodes] == ops and group.axes is not None and group.compiled
    plan = graph.compile()
    assert len(re.findall(r"= _k\d+\(", plan.source)) == 1  # one launch, no other op
    assert plan.kernel_source.startswith("// kernel k0: cupy.ReductionKernel")


def test_max_and_min_equal_the_interpreter_bit_for_bit():
    def f(x, b):
        return F.max(x * 3.0, axis=1) - b, F.min(x * x + 1.0, axis=0, keepdims=True)
    x = cp.asarray(np.random.default_rng(1).standard_normal((20, 30)), cp.float32)
    b = cp.ones(20, cp.float32)
    graph = dezero.trace(f).lower(x, b)
    assert len(graph.groups) == 2 and all(g.axes is not None for g in graph.groups)
    for got, want in zip(graph.compile()(x, b), _interpreted(graph, x, b)):
        np.testing.assert_array_equal(cp.asnumpy(got.data), want)


def test_nan_wins_max_as_in_numpy():
    x = np.ones((4, 6), np.float32)
    x[2, 3] = np.nan
    traced = dezero.trace(lambda x: F.max(x + 1.0, axis=1))
    traced(cp.asarray(x))
    y = cp.asnumpy(traced(cp.asarray(x)).data)
    assert np.isnan(y[2]) and (y[[0, 1, 3]] == 2).all()


def test_values_of_the_full_shape_are_stored_by_the_same_kernel():
    """Values a later node reads (a loss's differences, which its backward reads; the
    mask times the gradient, which a matmul reads) are written by the kernel's map at
    each element's place, whatever axes it reduces."""
    W = Variable(cp.asarray(np.random.default_rng(2).standard_normal((5, 3)), cp.float32))

    def squared_error_step(x, t):
        loss = F.sum((F.matmul(x, W) - t) ** 2) / 10.0
        W.cleargrad()
        loss.backward()
        return loss, W.grad

    def middle_axis(x):
        y = F.exp(x) * 2.0
        return F.sum(y, axis=1, keepdims=True) + 1.0, y * 1.0  # y stored, for the mul
    rng = np.random.default_rng(3)
    x, t = (cp.asarray(rng.standard_normal(s), cp.float32) for s in ((10, 5), (10, 3)))
    x3 = cp.asarray(rng.standard_normal((4, 6, 5)), cp.float32)
    for fn, args in [(squared_error_step, (x, t)), (middle_axis, (x3,)), (middle_axis, (x,))]:
        graph = dezero.trace(fn).lower(*args)
        group = next(g for g in graph.groups if g.axes is not None)
        assert group.compiled and any(v.shape == group.shape for v in group.outputs)
        for got, want in zip(_tuple(graph.compile()(*args)), _interpreted(graph, *args)):
            np.testing.assert_allclose(cp.asnumpy(got.data), want, rtol=2e-5, atol=2e-5)


def test_a_kernel_of_two_sums_over_all_rows_leaves_the_second_alone(capsys):
    """A row kernel's sums over all rows are one ReductionKernel after it, which folds
    one: the second such sum runs alone, as the debug output says; the rest of the
    group stays a kernel, whose result equals the interpreter's."""
    def two_totals(x):
        return F.sum(F.sum(x * x, axis=1)) * 0.5 + F.sum(F.max(x, axis=1))
    x = cp.asarray(np.random.default_rng(3).standard_normal((10, 5)), cp.float32)
    with dezero.static.debug(3):
        graph = dezero.trace(two_totals).lower(x)
    log = capsys.readouterr().err
    assert re.search(r"boundary \w+: f32\[\] = sum\(.*: a reduction whose kernel fits no GPU "
                     r"kernel: 2 sums over all rows \(the kernel after the rows folds one\)",
                     log), log
    group, = graph.groups
    assert [n.op for n in group.nodes if n.record.reduce] == ["sum", "sum"] and group.compiled
    np.testing.assert_allclose(cp.asnumpy(graph.compile()(x).data), _interpreted(graph, x)[0],
                               rtol=2e-5)


def test_a_kernel_of_one_input_stays_off_cupys_cub_path():
    """cupy runs a ReductionKernel of one input and one output through CUB, whose
    full reductions apply post_map twice: the kernel takes an unused scalar too (the
    double refuses a call that would go through CUB)."""
    traced = dezero.trace(lambda x: F.sum(F.exp(x)))
    x = cp.linspace(0, 1, 512, dtype=cp.float64)
    traced(x)
    assert float(traced(x).data) == pytest.approx(float(cp.exp(x).sum()), rel=1e-12)
    assert "// in_params:     float64 in0, int32 cub_off\n" in \
        traced.graph.compile().kernel_source


def test_a_regression_step_sums_in_its_kernels_and_trains_as_eager_numpy():
    """Book step 44's regression (sigmoid MLP, mean squared error written out, SGD):
    the loss's square and sum run in one kernel (with the start of its backward, which
    is why the output bias's gradient, a second reduction of it, runs alone), the
    hidden bias's gradient in the sigmoid backward's kernel."""
    from dezero import optimizers
    from dezero.models import MLP
    rng = np.random.default_rng(0)
    x = rng.random((100, 1)).astype(np.float32)
    t = (np.sin(2 * np.pi * x) + rng.random((100, 1))).astype(np.float32)
    cpu, gpu = twin_models(lambda: MLP((10, 1)), x)

    def step_of(model):
        optimizer = optimizers.SGD(0.2).setup(model)

        def step(x, t):
            loss = F.sum((model(x) - t) ** 2) / len(x)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        return step
    cpu_step, gpu_step = step_of(cpu), dezero.trace(step_of(gpu))
    for _ in range(5):
        loss_cpu = cpu_step(x, t)
        loss_gpu = gpu_step(cp.asarray(x), cp.asarray(t))
        np.testing.assert_allclose(cp.asnumpy(loss_gpu.data), loss_cpu.data, rtol=1e-4)
    for p_cpu, p_gpu in zip(cpu.params(), gpu.params()):
        np.testing.assert_allclose(cp.asnumpy(p_gpu.data), p_cpu.data, rtol=1e-4, atol=1e-6)
    reductions = [[n.op for n in g.nodes if n.record.reduce] for g in gpu_step.graph.groups
                  if g.axes is not None]
    assert sorted(reductions) == [["sum"], ["sum_to"]]
    source = gpu_step.graph.compile().source
    assert len(re.findall(r"= _k\d+\(", source)) == len(gpu_step.graph.groups)


def test_a_graph_fused_on_the_cpu_and_moved_runs_its_kernels_on_the_gpu():
    """to_gpu() decides again which kernels run compiled: a CPU kernel of one pass
    is one ReductionKernel there, one of three passes (a softmax-like) a row kernel."""
    def f(x, t):
        return F.sum((x - t) ** 2, axis=1) * 0.5, F.exp(x - F.max(x, axis=1, keepdims=True))
    rng = np.random.default_rng(4)
    x, t = (rng.standard_normal((300, 64)).astype(np.float32) for _ in range(2))
    graph = dezero.trace(f).lower(x, t).to_gpu()
    assert [(g.axes, g.compiled) for g in graph.groups] == [((1,), True), ((1,), True)]
    source = graph.compile().kernel_source
    assert source.count("cupy.ReductionKernel") == 1 and "one thread a row" in source
    x, t = cp.asarray(x), cp.asarray(t)
    for got, want in zip(graph.compile()(x, t), _interpreted(graph, x, t)):
        np.testing.assert_allclose(cp.asnumpy(got.data), want, rtol=2e-5, atol=2e-5)


def test_a_per_token_loss_masked_by_a_value_of_the_kept_shape_replays_as_eager():
    """A (B, T) mask times sums of (B, T, V) scores over their last axis: a row input
    that has the reduced axis not at all (the launch asked np.broadcast_shapes whether
    it broadcasts to (B, T, 1): a ValueError), in a ReductionKernel and a row kernel."""
    def losses(h, mask):
        return (F.sum(h * 2.0, axis=-1) * mask,
                F.sum(F.softmax(h, axis=-1) * h, axis=-1) * mask + 1.0)
    rng = np.random.default_rng(8)
    h, mask = rng.standard_normal((4, 3, 5)), (rng.random((4, 3)) > 0.3).astype(np.float64)
    traced = dezero.trace(losses)
    for _ in range(3):
        for got, want in zip(traced(cp.asarray(h), cp.asarray(mask)), losses(h, mask),
                             strict=True):
            np.testing.assert_allclose(cp.asnumpy(got.data), want.data, rtol=1e-12)
    assert len(traced.graph.groups) == 2 and all(g.compiled for g in traced.graph.groups)
