"""A model trained on the GPU saves a checkpoint (arrays copied to the host, no
pickle) and a new model on the GPU resumes from it exactly: the optimizer's slots
come back on the device of their parameters. Runs on a GPU or under the cupy test
double (README.md here)."""
import warnings

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
from train_helpers import training_step  # noqa: E402

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import Variable, optimizers  # noqa: E402
from dezero.checkpoints import load_checkpoint, save_checkpoint  # noqa: E402
from dezero.models import MLP  # noqa: E402

if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)


def _setup(seed):
    np.random.seed(seed)
    model = MLP((10, 3))
    model(np.zeros((1, 2), dtype=np.float32))
    model.to_gpu()
    return model, optimizers.Adam(alpha=0.01).setup(model)


def _steps(model, optimizer, n, traced):
    step = training_step(model, optimizer, traced)
    x, t = dezero.datasets.get_spiral(train=True)
    x, t = cp.asarray(x[:30].astype(np.float32)), cp.asarray(t[:30])
    return [cp.asnumpy(step(x, t).data) for _ in range(n)]


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_training_on_the_gpu_resumes_from_a_checkpoint(tmp_path, traced):
    model, optimizer = _setup(0)
    want = _steps(model, optimizer, 5, traced)

    model, optimizer = _setup(0)
    got = _steps(model, optimizer, 2, traced)
    path = save_checkpoint(tmp_path / "gpu.npz", model, optimizer, step=2)
    with np.load(path, allow_pickle=False) as npz:
        assert npz["model/l0/W"].dtype == np.float32
    model, optimizer = _setup(1)
    assert load_checkpoint(path, model, optimizer) == {"step": 2}
    slots = [v.data for _, table in optimizer._slot_tables() for v in table.values()
             if isinstance(v, Variable)]
    assert slots and all(type(a) is cp.ndarray for a in slots)
    got += _steps(model, optimizer, 3, traced)
    if traced:  # the resumed run records its first step eagerly, where the other replays
        np.testing.assert_allclose(got, want, rtol=1e-5)  # fused kernels: a few ulp
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_a_checkpoint_loads_into_a_model_moved_to_the_gpu_before_it_was_built(
        tmp_path, traced):
    # MLP((10, 3)).to_gpu() moves the biases; the weights, made by loading, join them.
    model, optimizer = _setup(0)
    _steps(model, optimizer, 2, traced)
    path = save_checkpoint(tmp_path / "gpu.npz", model, optimizer)
    want = _steps(model, optimizer, 3, traced)
    lazy = MLP((10, 3))
    lazy.to_gpu()
    lazy_optimizer = optimizers.Adam(alpha=0.01).setup(lazy)
    load_checkpoint(path, lazy, lazy_optimizer)
    assert all(type(param.data) is cp.ndarray for param in lazy.params())
    got = _steps(lazy, lazy_optimizer, 3, traced)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_checkpoint_after_dropout_on_the_gpu_warns_that_its_masks_are_not_saved(
        tmp_path, monkeypatch):
    # cupy has no get_state/set_state: a resumed run draws other dropout masks.
    monkeypatch.setattr(dezero.cuda, "_random_ready", set())
    model, optimizer = _setup(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_checkpoint(tmp_path / "before.npz", model, optimizer)
    F.dropout(model(cp.ones((2, 2), dtype=np.float32)), 0.5)
    with pytest.warns(UserWarning, match="dropout on the GPU.*cupy cannot save"):
        save_checkpoint(tmp_path / "after.npz", model, optimizer)
