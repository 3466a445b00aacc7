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
from train_helpers import training_step  # noqa: E402

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
        opt.add_hook(optimizers.ClipGrad(0.5))  # the norm of gradients on either device
    reference_step = training_step(reference, reference_optimizer)
    step = training_step(moved, optimizer, traced)
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


def test_a_variable_moves_with_its_gradient_both_ways():
    x = Variable(np.array([1.0, 2.0]))
    (x * x).backward()
    x.to_gpu()
    assert type(x.data) is cp.ndarray and type(x.grad.data) is cp.ndarray
    y = x * x
    y.backward()  # the gradient on the GPU accumulates
    x.to_cpu()
    assert type(x.data) is np.ndarray and type(x.grad.data) is np.ndarray
    np.testing.assert_array_equal(x.grad.data, [4.0, 8.0])


def test_dataloader_batches_move_both_ways():
    loader = dezero.DataLoader(dezero.datasets.Spiral(), batch_size=30, shuffle=False)
    x_cpu, _ = loader.next()
    loader.to_gpu()
    x, t = loader.next()
    assert type(x) is cp.ndarray and type(t) is cp.ndarray
    loader.to_cpu()
    x, t = loader.next()
    assert type(x) is np.ndarray and type(t) is np.ndarray
    loader.reset()
    loader.to_gpu()
    np.testing.assert_array_equal(cp.asnumpy(loader.next()[0]), x_cpu)


def test_a_traced_forward_follows_its_model_between_devices():
    x, _ = _batch()
    model = _model(x)
    forward = dezero.trace(lambda x: F.softmax(model(x)))
    expected = F.softmax(model(x)).data
    for device in ("cpu", "gpu", "cpu", "gpu"):
        (model.to_gpu if device == "gpu" else model.to_cpu)()
        xp = cp if device == "gpu" else np
        for _ in range(2):  # records on this device, then replays
            y = forward(xp.asarray(x))
            assert type(y.data) is xp.ndarray
            np.testing.assert_allclose(cp.asnumpy(y.data), expected, rtol=1e-5)


def test_a_graph_saved_on_the_cpu_replays_loaded_onto_the_gpu(tmp_path):
    x, t = _batch()
    model = _model(x)
    optimizer = optimizers.Adam(alpha=0.01).setup(model)
    step = training_step(model, optimizer, traced=True)
    step(x, t)
    step.graph.save(str(tmp_path / "step.json"))
    expected = [step(x, t).data for _ in range(3)]  # the saved state, stepped on the CPU
    loaded = dezero.static.load(str(tmp_path / "step.json")).to_gpu()
    assert loaded.device == "gpu"
    for want in expected:
        loss = loaded(cp.asarray(x), cp.asarray(t))
        loss = loss.data if isinstance(loss, Variable) else loss
        assert type(loss) is cp.ndarray
        np.testing.assert_allclose(cp.asnumpy(loss), want, rtol=1e-5)
    loaded.to_cpu()
    loss = loaded(x, t)
    assert type(getattr(loss, "data", loss)) is np.ndarray


def test_a_full_write_of_a_cupy_array_into_state_inside_a_trace():
    v = Variable(cp.zeros(3, cp.float32))
    source = cp.asarray([1.0, 2.0, 3.0], cp.float32)

    @dezero.trace
    def reset(x):
        v.data[...] = source  # the book's in-place idiom, with a plain cupy array
        return x + v

    for _ in range(2):
        v.data = cp.zeros(3, cp.float32)
        y = reset(cp.ones(3, cp.float32))
        assert v.data.get().tolist() == [1.0, 2.0, 3.0] and y.data.get().tolist() == \
            [2.0, 3.0, 4.0]


@pytest.mark.parametrize("where", ["model on the GPU", "model on the CPU"])
def test_a_batch_on_the_other_device_than_the_model_is_a_clear_error(where):
    x, t = _batch()
    model = _model(x)
    step = training_step(model, optimizers.SGD().setup(model), traced=True)
    if where == "model on the GPU":
        model.to_gpu()
        batch, message = x, (r"argument x is on the CPU \(numpy\) but the state it meets is "
                             r"on the GPU \(cupy\).*\n  fix: dezero.cuda.as_cupy\(x\)")
    else:
        batch, message = cp.asarray(x), (r"argument x is on the GPU \(cupy\) but the state "
                                         r"it meets is on the CPU \(numpy\).*\n  fix: model."
                                         r"to_gpu\(\)")
    with pytest.raises(TypeError, match=message):
        step(batch, t)


def test_an_op_given_arrays_on_two_devices_names_them_eagerly():
    W = Variable(cp.ones((2, 3)))
    with pytest.raises(TypeError, match=r"^matmul: arrays on two devices \(x0 on the CPU "
                       r"\(numpy\), x1 on the GPU \(cupy\)\); .*\n  fix: move them to one"):
        F.matmul(np.ones((1, 2)), W)


def test_a_numpy_scalar_meets_a_variable_on_the_gpu_as_cupy_takes_it():
    # cupy takes numpy scalars beside its arrays (a 0-d numpy array it refuses).
    x = Variable(cp.ones(3, cp.float32))
    for c in (np.float32(2), np.int32(2), np.float16(2)):
        y = x * c
        assert isinstance(y.data, cp.ndarray) and y.dtype == (cp.ones(3, cp.float32) * c).dtype
    y = F.where(cp.asarray([True, False, True]), x, np.float32(-1))
    assert y.data.get().tolist() == [1.0, -1.0, 1.0]


def test_dropout_in_a_traced_step_may_be_the_first_draw_on_the_gpu(monkeypatch):
    # cupy makes its generator on the first draw, seeded from os.urandom, which a
    # recording refuses as fresh entropy: dezero makes it outside the recording.
    cp.random.reset_states()
    monkeypatch.setattr(dezero.cuda, "_random_ready", set())
    x = cp.ones((64, 8), cp.float32)
    masked = dezero.trace(lambda x: F.dropout(x, 0.5))
    first, second = (masked(x).data.get() for _ in range(2))
    assert set(np.unique(first)) <= {0.0, 2.0} and not np.array_equal(first, second)


def test_of_two_arguments_the_one_on_the_other_device_is_named():
    x, t = _batch()
    model = _model(x)
    model.to_gpu()
    step = training_step(model, optimizers.SGD().setup(model), traced=True)
    with pytest.raises(TypeError, match=r"argument t is on the CPU \(numpy\) but the state "
                       r"it meets is on the GPU"):
        step(cp.asarray(x), t)  # the labels stayed behind
    with pytest.raises(TypeError, match=r"argument x is on the CPU \(numpy\) but the state "
                       r"it meets is on the GPU"):
        step(x, cp.asarray(t))  # the batch stayed behind
