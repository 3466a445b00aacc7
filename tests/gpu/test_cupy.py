"""The same checks on cupy as on numpy, for machines with a GPU.

Skipped where cupy (or a GPU) is missing. Every op of the op table must give the
values and gradients numpy gives; a training step on the GPU must match the same
step on the CPU, eagerly and traced.

    python -m pytest tests/gpu -q
"""
import sys
from pathlib import Path

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
try:
    cp.cuda.runtime.getDeviceCount()
except Exception as error:  # cupy installed without a usable driver
    pytest.skip(f"no GPU: {error}", allow_module_level=True)

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import Variable, optimizers  # noqa: E402
from dezero.models import MLP  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))  # the op table lives in tests/
from op_table import ROWS  # noqa: E402


def _grads(fn, arrays, xp):
    xs = [Variable(xp.asarray(a)) for a in arrays]
    y = fn(*xs)
    F.sum(y).backward()
    return y, [x.grad for x in xs]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_op_on_cupy_matches_numpy(row):
    arrays = row.inputs()
    y_cpu, g_cpu = _grads(row.fn, arrays, np)
    y_gpu, g_gpu = _grads(row.fn, arrays, cp)
    assert isinstance(y_gpu.data, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(y_gpu.data), y_cpu.data, rtol=1e-10, atol=1e-12)
    for a, b in zip(g_cpu, g_gpu):
        if a is None:
            assert b is None
        else:
            np.testing.assert_allclose(cp.asnumpy(b.data), a.data, rtol=1e-10, atol=1e-12)


def _step_fn(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def _seeded_mlp(x):
    np.random.seed(0)
    model = MLP((16, 3))
    model(x[:1])  # create the lazily sized weights
    return model


def test_training_steps_on_gpu_match_cpu_eager_and_traced():
    x, t = dezero.datasets.get_spiral(train=True)
    cpu, gpu, traced_gpu_model = (_seeded_mlp(x) for _ in range(3))
    cpu_step = _step_fn(cpu, optimizers.Adam().setup(cpu))
    gpu.to_gpu()
    gpu_step = _step_fn(gpu, optimizers.Adam().setup(gpu))
    traced_gpu_model.to_gpu()
    traced_step = dezero.trace(_step_fn(traced_gpu_model,
                                        optimizers.Adam().setup(traced_gpu_model)))
    xg, tg = cp.asarray(x[:30]), cp.asarray(t[:30])
    for _ in range(5):
        loss_cpu = cpu_step(x[:30], t[:30])
        loss_gpu = gpu_step(xg, tg)
        loss_traced = traced_step(xg, tg)
        for loss in (loss_gpu, loss_traced):
            np.testing.assert_allclose(cp.asnumpy(loss.data), loss_cpu.data, rtol=1e-4)
    for p_cpu, p_gpu, p_traced in zip(cpu.params(), gpu.params(), traced_gpu_model.params()):
        for p in (p_gpu, p_traced):
            np.testing.assert_allclose(cp.asnumpy(p.data), p_cpu.data, rtol=1e-4, atol=1e-6)


def test_a_model_moved_before_its_weights_exist_trains_traced_from_the_first_call():
    # the book's order: model.to_gpu() before the first batch; the lazily sized
    # weights are made on the GPU in the recorded call, where each layer moved its
    # bias again (already a cupy array), a write the trace refused, a layer per call
    x, t = dezero.datasets.get_spiral(train=True)
    models = [MLP((16, 3)), MLP((16, 3))]
    for model in models:
        model.to_gpu()
    eager = _step_fn(models[0], optimizers.SGD().setup(models[0]))
    traced = dezero.trace(_step_fn(models[1], optimizers.SGD().setup(models[1])))
    for i in range(3):
        xg, tg = cp.asarray(x[30 * i:30 * i + 30]), cp.asarray(t[30 * i:30 * i + 30])
        cp.random.seed(0)  # the same weights, drawn on the GPU in the first calls
        want = eager(xg, tg)
        cp.random.seed(0)
        np.testing.assert_allclose(cp.asnumpy(traced(xg, tg).data), cp.asnumpy(want.data),
                                   rtol=1e-6)
    for a, b in zip(models[0].params(), models[1].params()):
        np.testing.assert_allclose(cp.asnumpy(b.data), cp.asnumpy(a.data), rtol=1e-6,
                                   atol=1e-7)


def test_dataloader_moves_batches_to_the_gpu():
    loader = dezero.DataLoader(dezero.datasets.Spiral(), batch_size=30, gpu=True)
    x, t = next(iter(loader))
    assert isinstance(x, cp.ndarray) and isinstance(t, cp.ndarray)
