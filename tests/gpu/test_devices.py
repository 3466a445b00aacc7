"""Everything that holds arrays moves between the devices, both ways, and arrays on two
devices meeting in one step are a clear error.

Variables (with their gradients), models, every optimizer's state (made before the
move too: state follows its parameter), DataLoader batches, traced steps and their
captured state, and graphs saved on the CPU and loaded onto the GPU. Runs on a GPU or
under the cupy test double (README.md here).
"""
import numpy as np
import pytest

cp = pytest.importorskip("cupy")
import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import Variable, optimizers  # noqa: E402
from dezero.models import MLP  # noqa: E402

if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

OPTIMIZERS = {
    "SGD": lambda: optimizers.SGD(lr=0.1),
    "MomentumSGD": lambda: optimizers.MomentumSGD(lr=0.1),
    "AdaGrad": lambda: optimizers.AdaGrad(lr=0.1),
    "AdaDelta": lambda: optimizers.AdaDelta(),
    "Adam": lambda: optimizers.Adam(alpha=0.01),
    "AdamW": lambda: optimizers.AdamW(alpha=0.01),
}


def _batch():
    x, t = dezero.datasets.get_spiral(train=True)
    return x[:30].astype(np.float32), t[:30]


def _model(x):
    np.random.seed(0)
    model = MLP((10, 3))
    model(x[:1])  # make the lazily sized weights
    return model


def _step(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def _state_arrays(optimizer):
    return [v.data for _, table in optimizer._slot_tables() for v in table.values()
            if isinstance(v, Variable)] + [getattr(optimizer, n).data for n in
                                           optimizer.counters]


def _on(xp, arrays):
    return all(type(a) is xp.ndarray for a in arrays)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_state_follows_its_parameters_both_ways(name, traced):
    x, t = _batch()
    reference, moved = _model(x), _model(x)
    optimizer, reference_optimizer = (OPTIMIZERS[name]().setup(m) for m in (moved, reference))
    for opt in (optimizer, reference_optimizer):  # a hook's hyperparameter moves too
        opt.add_hook(optimizers.WeightDecay(1e-3))
    reference_step = _step(reference, reference_optimizer)
    step = _step(moved, optimizer)
    step = dezero.trace(step) if traced else step
    for device in ("cpu", "gpu", "gpu", "cpu", "cpu"):
        (moved.to_gpu if device == "gpu" else moved.to_cpu)()
        xp = cp if device == "gpu" else np
        loss = step(xp.asarray(x), xp.asarray(t))
        expected = reference_step(x, t)
        np.testing.assert_allclose(cp.asnumpy(loss.data), expected.data, rtol=1e-5)
        assert _on(xp, [p.data for p in moved.params()])
        assert _on(xp, _state_arrays(optimizer)), f"{name} state left behind on {device}"
    for p, q in zip(reference.params(), moved.params()):
        np.testing.assert_allclose(p.data, q.data, rtol=1e-5, atol=1e-7)
