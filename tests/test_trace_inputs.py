"""Odd inputs and check=True, traced against eager over several calls: ndarray
subclasses, Fortran and strided arrays, a float64 batch into a float32 model, lazy
layers with dropout under check, a real mismatch, a rate set inside the step."""
import copy

import numpy as np
import pytest
from backend_helpers import FUSED

import dezero
import dezero.functions as F
from dezero import Function, Variable, models, optimizers
from dezero import layers as L
from dezero.static import TraceError


def expression(x):
    return F.sum(F.tanh(x) * 2.0, axis=1) + F.sum(x, axis=0)[0]


def test_memmap_arguments_replay_like_eager(tmp_path):
    mapped = np.memmap(tmp_path / "batch.dat", dtype=np.float32, mode="w+", shape=(4, 3))
    traced = dezero.trace(expression)
    for i in range(4):
        mapped[:] = np.arange(12, dtype=np.float32).reshape(4, 3) * (i - 1.5)
        for arg in (mapped, Variable(mapped)):
            np.testing.assert_allclose(traced(arg).data, expression(np.asarray(mapped)).data,
                                       rtol=1e-6)
    assert traced.entries == 2  # an array, a Variable


def test_fortran_and_strided_arrays_replay_like_eager():
    rng = np.random.default_rng(0)
    traced = dezero.trace(expression)
    for _ in range(3):
        base = rng.standard_normal((4, 6)).astype(np.float32)
        for x in (np.asfortranarray(base[:, :3]), base[:, ::2], base.T[:3].T, base[:, :3]):
            np.testing.assert_allclose(traced(x).data, expression(x.copy()).data, rtol=1e-6,
                                       atol=1e-6 if FUSED else 0)
    assert traced.entries == 1


def step_of(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def test_float64_batch_into_a_float32_model_trains_as_eager_and_stays_float32():
    # Gradients keep their parameter's dtype, so the update is float32 in both.
    model = models.MLP((5, 3))
    with dezero.no_grad():
        model(np.ones((1, 2), np.float32))  # initialised as float32
    twin = copy.deepcopy(model)
    traced = dezero.trace(step_of(model, optimizers.SGD(0.1).setup(model)))
    eager = step_of(twin, optimizers.SGD(0.1).setup(twin))
    rng = np.random.default_rng(3)
    for _ in range(3):
        x, t = rng.standard_normal((4, 2)), rng.integers(0, 3, 4)
        np.testing.assert_allclose(traced(x, t).data, eager(x, t).data, rtol=1e-12)
    for p, q in zip(model.params(), twin.params()):
        assert p.dtype == q.dtype == np.float32
        np.testing.assert_allclose(p.data, q.data, rtol=1e-6)
    assert traced.entries == 1


def test_float64_batch_into_a_float32_model_for_inference_equals_eager():
    model = models.MLP((5, 3))
    with dezero.no_grad():
        model(np.ones((1, 2), np.float32))
    traced = dezero.trace(lambda x: model(x))
    rng = np.random.default_rng(1)
    with dezero.no_grad():
        for _ in range(3):
            x = rng.standard_normal((4, 2))
            expected = model(x)
            got = traced(x)
            assert got.dtype == expected.dtype == np.float64
            np.testing.assert_allclose(got.data, expected.data, rtol=1e-12)


def test_check_has_no_false_alarm_on_lazy_layers_and_dropout():
    rng = np.random.default_rng(2)
    batches = [(rng.standard_normal((8, 2)).astype(np.float32), rng.integers(0, 3, 8))
               for _ in range(4)]

    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = L.Linear(6), L.Linear(3)  # in_size None: lazy

        def forward(self, x):
            return self.fc2(F.dropout(F.relu(self.fc1(x)), 0.3))

    a = Net()
    b = copy.deepcopy(a)
    eager = step_of(a, optimizers.SGD(0.1).setup(a))
    traced = dezero.trace(step_of(b, optimizers.SGD(0.1).setup(b)), check=True)
    for x, t in batches:
        state = np.random.get_state()
        le = eager(x, t)
        np.random.set_state(state)  # the same initial weights and masks in both
        lt = traced(x, t)
        np.testing.assert_allclose(lt.data, le.data, rtol=1e-5, atol=1e-6)
        for pa, pb in zip(a.params(), b.params()):
            np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5, atol=1e-6)
    assert traced.entries == 1


def test_check_names_the_first_differing_node_and_its_line():
    calls = [0]

    class Counting(Function):
        # Breaks the rules on purpose: the result depends on hidden state.
        def forward(self, x):
            calls[0] += 1
            return x * calls[0]

    def f(x):
        y = x * 2.0
        z = Counting()(y)
        return F.exp(z) + 1.0

    with pytest.raises(TraceError, match=r"first differing node: .* = \S*Counting\(.*\), "
                                         r"made at test_trace_inputs.py:\d+, "
                                         r"`z = Counting\(\)\(y\)`"):
        dezero.trace(f, check=True)(Variable(np.ones(2, np.float32)))


def test_setting_a_rate_inside_a_traced_step_says_to_set_it_outside():
    model = models.MLP((3,))
    optimizer = optimizers.SGD(0.1).setup(model)

    def step(x, lr):
        optimizer.lr = lr
        loss = F.sum(model(x))
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    with pytest.raises(TraceError, match=r"SGD.lr is set inside a traced function .*"
                                         r"`optimizer.lr = lr`(.|\n)*set it outside"):
        dezero.trace(step)(np.ones((2, 2), np.float32), 0.05)


@pytest.mark.parametrize("form", ["scalar * var", "var * scalar", "var + -x", "x - var",
                                  "numpy: W.data * scalar", "numpy: W.data * np.float64"])
def test_numpy_arithmetic_on_a_0d_float64_argument_keeps_eagers_dtype(form):
    # Eager numpy returns a numpy float64 scalar for x * 2.0, which meets a float32
    # Variable as a Python float would; x itself is a 0-d array and stays float64.
    W = Variable(np.array([1.5, -2.0, 0.25], np.float32), name="W")
    step = {"scalar * var": lambda x: (x * 2.0) * F.sum(W),
            "var * scalar": lambda x: W * (x / 3.0),
            "var + -x": lambda x: W + -x,
            "x - var": lambda x: x - W,
            # numpy's own promotion among arrays and numpy scalars, not dezero's:
            "numpy: W.data * scalar": lambda x: W.data * (x * 2.0),
            "numpy: W.data * np.float64": lambda x: W.data * np.float64(3.0)}[form]
    traced = dezero.trace(step)
    for value in (0.1, 2.0, -7.3, 1e-3):
        x = np.array(value)
        got, want = traced(x), step(x)
        assert got.dtype == want.dtype, f"{form}: {got.dtype}, eager {want.dtype}"
        np.testing.assert_allclose(getattr(got, "data", got), getattr(want, "data", want),
                                   rtol=1e-6)


class LinearBatchNorm(models.Model):
    def __init__(self):
        super().__init__()
        self.l1, self.bn, self.l2 = L.Linear(16, in_size=8), L.BatchNorm(), L.Linear(3, in_size=16)

    def forward(self, x):
        return self.l2(F.relu(self.bn(self.l1(x))))


@pytest.mark.parametrize("backend", ["cpu", "python", "interpreter"])
def test_check_passes_a_correct_linear_batch_norm_adam_step_on_every_backend(
        backend, monkeypatch):
    # l1.b's gradient is rounding noise around 0 (batch norm removes the mean), which
    # Adam scales up to its step size: fused kernels, a few ulp from numpy, moved b
    # by 5e-5 against eager, and check=True called a correct graph wrong.
    from dezero.static import backends
    monkeypatch.setattr(backends, "DEFAULT", backend)
    for seed in range(3):
        np.random.seed(seed)
        model = LinearBatchNorm()
        optimizer = optimizers.Adam().setup(model)

        @dezero.trace(check=True)
        def step(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss

        rng = np.random.default_rng(seed)
        for _ in range(3):
            step(rng.standard_normal((32, 8)).astype(np.float32), rng.integers(0, 3, 32))


def test_a_variable_argument_with_a_grad_leaves_the_arguments_after_it_in_place():
    # backward() adds into its .grad, an input of the graph of its own but no argument:
    # the recording handed that .grad to the next parameter (w received x.grad, a
    # different result in silence), and a t after it met a float array
    def f(x, w, scale):
        y = F.sum(x * w) * scale
        y.backward()
        return y
    rng = np.random.default_rng(3)
    w = rng.standard_normal(4).astype(np.float32)
    x_eager, x_traced = (Variable(rng.standard_normal(4).astype(np.float32)) for _ in range(2))
    x_traced.data = x_eager.data.copy()
    for x in (x_eager, x_traced):
        x.grad = Variable(np.full(4, 10.0, np.float32))
    traced = dezero.trace(f, static_argnames="scale")
    for _ in range(3):
        want, got = f(x_eager, w, 2.0), traced(x_traced, w, 2.0)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-6)
        np.testing.assert_allclose(x_traced.grad.data, x_eager.grad.data, rtol=1e-6)
