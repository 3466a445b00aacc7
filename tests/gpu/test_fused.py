"""Fused replay on cupy against numpy: elementwise chains and training steps.

Skipped where cupy finds no GPU. A traced function called on cupy arrays records a
graph on the GPU, whose replay runs each fused group as one cupy.ElementwiseKernel
(kernels/gpu.py) and every other node as a cupy call; every replay must give what
eager numpy gives for the same inputs and state, over several calls.

    python -m pytest -q tests/gpu
"""
import re
import threading

import numpy as np
import pytest
from train_helpers import trained_on_both_devices, training_step, twin_models

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.models import MLP

cp = pytest.importorskip("cupy")
if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

CHAINS = {
    "arithmetic": lambda x, a, b: ((x * a + b) * (x - a) + b * b) * x + a,
    "transcendental": lambda x, a, b: F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2,
}
# Relative and absolute: NVRTC contracts a * b + c into one fma, so values that
# cancel to near zero differ from numpy's by more than a relative error.
TOLERANCE = {np.float32: 2e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CHAINS)
def test_chain_replays_as_kernels_and_matches_numpy(name, dtype):
    fn = CHAINS[name]
    traced = dezero.trace(fn)
    rng = np.random.default_rng(0)
    for _ in range(3):  # the first call records, the others replay
        x = rng.standard_normal((64, 33)).astype(dtype)
        a = rng.standard_normal(33).astype(dtype)  # a row: broadcast inside the kernel
        b = np.asarray(rng.standard_normal(), dtype)
        y = traced(*(cp.asarray(v) for v in (x, a, b)))
        expected = fn(Variable(x), Variable(a), Variable(b)).data
        # The arithmetic chain on bare arrays returns a bare array, whose .data on cupy
        # is a device pointer; the other returns a Variable.
        y = y.data if isinstance(y, Variable) else y
        assert isinstance(y, cp.ndarray) and y.dtype == dtype
        tolerance = TOLERANCE[dtype]
        np.testing.assert_allclose(cp.asnumpy(y), expected, rtol=tolerance,
                                   atol=tolerance)
    graph = traced.graph
    plan = graph.compile()
    assert graph.device == "gpu" and len(graph.groups) == 1
    assert "_k0(" in plan.source  # the default backend on the GPU: cupy kernels
    assert plan.kernel_source.startswith("// kernel k0: cupy.ElementwiseKernel")


def test_kernels_take_strided_inputs():
    traced = dezero.trace(CHAINS["transcendental"])
    x = cp.asarray(np.random.default_rng(1).standard_normal((64, 66)), cp.float32)
    a, b = cp.full(33, 0.5, cp.float32), cp.asarray(0.25, cp.float32)
    traced(x[:, ::2], a, b)  # records
    y = traced(x[:, 1::2], a, b)  # replays on a view with a stride of two elements
    expected = CHAINS["transcendental"](Variable(cp.asnumpy(x[:, 1::2])), Variable(
        cp.asnumpy(a)), Variable(cp.asnumpy(b))).data
    np.testing.assert_allclose(cp.asnumpy(y.data), expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("optimizer, activation", [
    (optimizers.SGD, F.sigmoid), (optimizers.Adam, F.relu)])
def test_training_step_replays_on_cupy_as_numpy_eager(optimizer, activation):
    x, t = dezero.datasets.get_spiral(train=True)
    x = x.astype(np.float32)
    gpu_step = trained_on_both_devices(lambda: MLP((10, 3), activation=activation),
                                       optimizer, x, t, loss_rtol=1e-4)
    assert gpu_step.graph.groups and "kernel k0" in gpu_step.graph.compile().source


def test_debug_level_2_times_each_kernel(capsys):
    traced = dezero.trace(CHAINS["arithmetic"])
    args = [cp.ones((8, 3), cp.float32), cp.ones(3, cp.float32), cp.asarray(2, cp.float32)]
    traced(*args)
    with dezero.static.debug(2):
        traced(*args)
    assert re.search(r"kernel k0: \d+\.\d{3} ms, \d+ bytes in/out", capsys.readouterr().err)


def test_an_optimizers_updates_run_as_one_horizontal_kernel_equal_to_the_interpreter():
    """The Adam update of every parameter is one kernel, one launch: the results equal
    the interpreter's bit for bit under the double; on a GPU, NVRTC's fused multiply-adds
    may round the last bit otherwise."""
    from pathlib import Path

    from dezero.kernels.codegen import kernel_spec
    x, t = dezero.datasets.get_spiral(train=True)
    np.random.seed(0)
    model = MLP((10, 3))
    model(x[:1])
    model.to_gpu()
    traced = training_step(model, optimizers.Adam(0.01).setup(model), traced=True)
    traced(cp.asarray(x[:30]), cp.asarray(t[:30]))
    group, = [g for g in traced.graph.groups if g.segments]
    plan = traced.graph.compile()
    assert f"= _{group.name}(" in plan.source and len(group.segments) == 4
    rng = np.random.default_rng(0)
    arrays = [np.asarray(rng.random(v.shape) * 0.5 + 0.5, v.dtype) for v in group.inputs]
    from dezero.kernels import gpu
    source = gpu.kernel_source(kernel_spec(group))
    assert source.count("cupy.ElementwiseKernel") == 1 and "raw float32 _r_" in source
    got = gpu.kernel_factory(kernel_spec(group))(*(cp.asarray(a) for a in arrays))
    env = {id(v): a for v, a in zip(group.inputs, arrays)}
    for node in group.nodes:
        env[id(node.outputs[0])] = np.asarray(
            node.record.function(node.attrs).forward(*(env[id(v)] for v in node.inputs)))
    exact = Path(cp.__file__).parents[1].name == "fakecupy"
    for value, y in zip(group.outputs, got, strict=True):
        assert y.shape == value.shape
        if exact:
            np.testing.assert_array_equal(cp.asnumpy(y), env[id(value)])
        else:
            np.testing.assert_allclose(cp.asnumpy(y), env[id(value)], rtol=1e-6)


def test_a_dense_layers_epilogues_write_into_the_matmuls_results_as_the_interpreter():
    rng = np.random.default_rng(0)
    W1, b1, W2 = (Variable(cp.asarray(rng.standard_normal(s), cp.float32)) for s in
                  ((20, 30), (30,), (30, 4)))

    def f(x):
        y = F.linear(F.relu(F.linear(x, W1, b1)), W2)
        for p in (W1, b1, W2):
            p.cleargrad()
        loss = F.sum(y * y)
        loss.backward()
        return loss, W1.grad, b1.grad, W2.grad
    x = cp.asarray(rng.standard_normal((16, 20)), cp.float32)
    graph = dezero.trace(f).lower(x)
    plan = graph.compile()
    # bias add + relu in the matmul's array; the loss's square and sum, and the mask
    # times the gradient with the bias's gradient summed, each one ReductionKernel
    assert [[n.op for n in g.nodes] for g in graph.groups] == [["add", "relu"],
                                                               ["mul", "sum"],
                                                               ["positive", "mul", "sum_to"]]
    assert plan.source.count("'s array") == 1
    for k in range(2):  # arithmetic only: the interpreter's bits, but for the sums,
        # which cupy's reduction kernel adds in another order than cupy.sum
        (loss, gW1, gb1, gW2) = plan(x + k)
        (want, wW1, wb1, wW2) = graph.compile("interpreter")(x + k)
        for got, want in ((loss, want), (gb1, wb1)):
            np.testing.assert_allclose(cp.asnumpy(got.data), cp.asnumpy(want.data),
                                       rtol=TOLERANCE[np.float32], atol=TOLERANCE[np.float32])
        for got, want in ((gW1, wW1), (gW2, wW2)):
            np.testing.assert_array_equal(cp.asnumpy(got.data), cp.asnumpy(want.data))


def test_an_update_writes_over_the_state_on_the_gpu_unless_someone_kept_it():
    # 300 x 256 weights: each update a kernel of its own (lowering._into)
    x = np.random.default_rng(0).standard_normal((8, 300)).astype(np.float32)
    t = np.arange(8) % 3
    cpu, gpu = twin_models(lambda: MLP((256, 3), activation=F.relu), x)
    cpu_step = training_step(cpu, optimizers.Adam(0.01).setup(cpu))
    gpu_step = training_step(gpu, optimizers.Adam(0.01).setup(gpu), traced=True)
    W = gpu.l0.W
    for k in range(4):
        kept = W.data if k == 2 else None  # someone holds the weights of step 2
        snapshot = None if kept is None else kept.copy()
        before = id(W.data)
        gpu_step(cp.asarray(x), cp.asarray(t))
        cpu_step(x, t)
        if k == 3:  # replayed, nobody else holding the array: written over
            assert id(W.data) == before
        if kept is not None:
            np.testing.assert_array_equal(cp.asnumpy(kept), cp.asnumpy(snapshot))
            assert id(W.data) != before
    assert "into model_l0_W's array" in gpu_step.graph.compile().source
    for p_cpu, p_gpu in zip(cpu.params(), gpu.params()):
        np.testing.assert_allclose(cp.asnumpy(p_gpu.data), p_cpu.data, rtol=1e-4, atol=1e-6)


def sgd_step_replayed_on_the_gpu():
    """(model on the GPU, its traced SGD step, x, t), the step recorded and replayed
    once: 300 x 256 weights, each update a kernel of its own (lowering._into)."""
    x = np.random.default_rng(0).standard_normal((8, 300)).astype(np.float32)
    t = np.arange(8) % 3
    _, gpu = twin_models(lambda: MLP((256, 3), activation=F.relu), x)
    step = training_step(gpu, optimizers.SGD(0.01).setup(gpu), traced=True)
    for _ in range(2):  # records, then replays writing in place
        step(cp.asarray(x), cp.asarray(t))
    return gpu, step, x, t


@pytest.mark.parametrize("keep", ["rows", "transpose", "flat"])
def test_a_view_someone_kept_of_a_gpu_parameter_keeps_its_values(keep):
    # a view holds its base (cupy's as numpy's), so the update gets a new array
    gpu, step, x, t = sgd_step_replayed_on_the_gpu()
    W = gpu.l0.W
    kept = {"rows": lambda: W.data[3:5], "transpose": lambda: W.data.T,
            "flat": lambda: W.data.reshape(-1)}[keep]()
    snapshot = cp.asnumpy(kept)
    step(cp.asarray(x), cp.asarray(t))
    np.testing.assert_array_equal(cp.asnumpy(kept), snapshot)


def test_no_gpu_state_is_written_over_while_another_thread_runs():
    # a thread that took W.data after the check would see the queued kernel's values
    gpu, step, x, t = sgd_step_replayed_on_the_gpu()
    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    try:
        before = id(gpu.l0.W.data)  # (the old array lives until the new one is stored)
        step(cp.asarray(x), cp.asarray(t))
        assert id(gpu.l0.W.data) != before
    finally:
        done.set()
        other.join()
    before = id(gpu.l0.W.data)
    step(cp.asarray(x), cp.asarray(t))
    assert id(gpu.l0.W.data) == before
