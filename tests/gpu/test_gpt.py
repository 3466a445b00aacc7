"""A GPT's training step on the GPU: forward, backward, clip_grad_norm and AdamW traced on
cupy arrays as one graph, replayed by the cupy backend's kernels (row kernels for layer
norm, the masked softmax and the loss, elementwise kernels for GELU, one horizontal
launch for AdamW), equal to the same step run eagerly on cupy.

    python -m pytest -q tests/gpu/test_gpt.py
"""
import numpy as np
import pytest

import dezero
from dezero import models, optimizers
from dezero.cuda import as_numpy

cp = pytest.importorskip("cupy")
from train_helpers import training_step  # noqa: E402

if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

VOCAB, BLOCK, LAYERS, HEADS, EMBD, BATCH = 11, 8, 2, 2, 8, 3


def gpt_step(traced):
    np.random.seed(0)
    model = models.GPT(VOCAB, BLOCK, LAYERS, HEADS, EMBD)
    model.to_gpu()
    optimizer = optimizers.AdamW(alpha=1e-2).setup(model)
    return model, training_step(model, optimizer, traced, max_norm=1.0)


def test_the_traced_gpt_step_on_the_gpu_equals_eager_on_the_gpu():
    (eager_model, eager), (model, traced) = gpt_step(False), gpt_step(True)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x, t = (cp.asarray(rng.integers(0, VOCAB, (BATCH, BLOCK))) for _ in range(2))
        np.testing.assert_allclose(as_numpy(traced(x, t).data), as_numpy(eager(x, t).data),
                                   rtol=1e-5)
        for mine, theirs in zip(model.params(), eager_model.params(), strict=True):
            assert isinstance(mine.data, cp.ndarray)
            np.testing.assert_allclose(as_numpy(mine.data), as_numpy(theirs.data),
                                       rtol=1e-4, atol=1e-6)
    graph = traced.graph
    assert traced.entries == 1 and graph.device == "gpu"
    assert all(g.compiled for g in graph.groups)
    ops = [[n.op for n in g.nodes] for g in graph.groups]
    assert ops.count(["mul", "where", "max", "sub", "exp", "sum", "div", "where"]) == LAYERS
    update, = [g for g in graph.groups if g.segments]
    assert len(update.segments) == len(list(model.params()))
    mask, = [n.payload for n in graph.of_kind("const") if n.outputs[0].dtype == bool]
    assert isinstance(mask, cp.ndarray)


def test_the_gpt_step_of_symbolic_batch_and_length_on_the_gpu_equals_eager():
    """Automatic dynamic on cupy arrays: after the first, static recording, one graph
    of symbolic batch size and context length, whose kernels (row kernels among them)
    take the sizes of each call, replays every later shape as eager code computes it."""
    (eager_model, eager), (model, traced) = gpt_step(False), gpt_step(True)
    rng = np.random.default_rng(2)
    for shape in [(3, 4), (5, 6), (2, 8), (7, 3), (4, 5)]:
        x, t = (cp.asarray(rng.integers(0, VOCAB, shape)) for _ in range(2))
        np.testing.assert_allclose(as_numpy(traced(x, t).data), as_numpy(eager(x, t).data),
                                   rtol=1e-5, err_msg=f"{shape}")
        for mine, theirs in zip(model.params(), eager_model.params(), strict=True):
            np.testing.assert_allclose(as_numpy(mine.data), as_numpy(theirs.data),
                                       rtol=1e-4, atol=1e-6, err_msg=f"{shape}")
    assert traced.entries == 2
    (entry,) = traced._symbolic
    graph = entry.graph
    assert graph.device == "gpu" and "x: i64[B,T]" in str(graph)
    symbolic = [g for g in graph.groups if g.sizes]
    assert symbolic and all(g.compiled for g in symbolic)
    assert any(g.axes is not None for g in symbolic)  # softmax and layer-norm rows
    assert "sizes=" in entry.compiled.source


@pytest.mark.parametrize("order", ["model moved first", "script moved after"])
def test_a_builder_training_step_runs_on_the_gpu_as_eager_does(order):
    """A Script's state (the parameters, the optimizer's slots and hyperparameters, which
    no Python moves while it runs) goes with Script.to_gpu(); built from a model on the
    GPU, its constants are made there too."""
    def make():
        np.random.seed(0)
        model = models.MLP((16, 3))
        model(np.zeros((1, 4), np.float32))
        return model, optimizers.AdamW(alpha=0.01).setup(model)

    (model, optimizer), (eager_model, eager_optimizer) = make(), make()
    eager = training_step(eager_model, eager_optimizer)
    eager_model.to_gpu()
    if order == "model moved first":
        model.to_gpu()
    with dezero.Builder("step") as b:
        x, t = b.input("x", ("B", 4)), b.input("t", ("B",), np.int64)
        b.output("loss", training_step(model, optimizer)(x, t))
    script = b.build()
    if order == "script moved after":
        script.to_gpu()
    rng = np.random.default_rng(0)
    for n in (5, 2, 7):
        x = cp.asarray(rng.standard_normal((n, 4)).astype(np.float32))
        t = cp.asarray(rng.integers(0, 3, n))
        script.set_input("x", x)
        script.set_input("t", t)
        np.testing.assert_allclose(as_numpy(script.run()["loss"].data),
                                   as_numpy(eager(x, t).data), rtol=1e-5)
    for p, q in zip(model.params(), eager_model.params(), strict=True):
        assert isinstance(p.data, cp.ndarray)
        np.testing.assert_allclose(as_numpy(p.data), as_numpy(q.data), rtol=1e-4, atol=1e-6)
