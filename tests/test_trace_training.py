"""Traced training steps against eager ones, in lockstep, with two identical models."""
import numpy as np
import pytest

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import models, optimizers


def twins(make, *example):
    """Two models with equal parameters (copied, so the global RNG is never reseeded)."""
    a, b = make(), make()
    with dezero.no_grad(), dezero.test_mode():
        a(*example), b(*example)  # lazy layers make their parameters at the first call
    for pa, pb in zip(a.params(), b.params()):
        pb.data = pa.data.copy()
    return a, b


def make_step(model, optimizer, loss_fn):
    def step(x, t):
        loss = loss_fn(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def assert_same_params(a, b, rtol=1e-5, atol=1e-6):
    for pa, pb in zip(a.params(), b.params()):
        np.testing.assert_allclose(pb.data, pa.data, rtol=rtol, atol=atol)
        np.testing.assert_allclose(pb.grad.data, pa.grad.data, rtol=rtol, atol=atol)


def run_lockstep(model_a, model_b, opt_a, opt_b, batches, loss_fn=F.softmax_cross_entropy,
                 between=None, check=True):
    eager = make_step(model_a, opt_a.setup(model_a), loss_fn)
    traced = dezero.trace(make_step(model_b, opt_b.setup(model_b), loss_fn), check=check)
    for i, (x, t) in enumerate(batches):
        if between is not None:
            between(i, opt_a, opt_b)
        state = np.random.get_state()
        le = eager(x, t)
        np.random.set_state(state)  # dropout draws the same masks in both
        lt = traced(x, t)
        np.testing.assert_allclose(lt.data, le.data, rtol=1e-5, atol=1e-6)
        assert_same_params(model_a, model_b)
    assert traced.entries == 1
    return traced


def classification_batches(rng, n=6, batch=8, dim=4, classes=3):
    return [(rng.standard_normal((batch, dim)).astype(np.float32),
             rng.integers(0, classes, batch)) for _ in range(n)]


def mlp():
    return models.MLP((10, 3))


@pytest.mark.parametrize("make_opt", [
    lambda: optimizers.SGD(lr=0.1),
    lambda: optimizers.MomentumSGD(lr=0.1),
    lambda: optimizers.AdaGrad(lr=0.1),
    lambda: optimizers.Adam(alpha=0.01),
    lambda: optimizers.AdamW(alpha=0.01, weight_decay=0.1),
], ids=["SGD", "MomentumSGD", "AdaGrad", "Adam", "AdamW"])
def test_mlp_training_step_replays_like_eager(make_opt):
    rng = np.random.default_rng(0)
    batches = classification_batches(rng)
    a, b = twins(mlp, batches[0][0])
    traced = run_lockstep(a, b, make_opt(), make_opt(), batches)
    assert traced.graph.of_kind("write")  # parameters (and slots) are written back


def test_optimizer_hooks_weight_decay_and_clip_grad():
    rng = np.random.default_rng(1)
    batches = classification_batches(rng)
    a, b = twins(mlp, batches[0][0])
    opts = []
    for _ in range(2):
        opt = optimizers.MomentumSGD(lr=0.5)
        opt.add_hook(optimizers.WeightDecay(1e-2))
        opt.add_hook(optimizers.ClipGrad(0.1))  # small: the clip is active
        opts.append(opt)
    run_lockstep(a, b, opts[0], opts[1], batches)


def test_adamw_s_choice_of_parameters_replays_and_a_new_choice_retraces(capsys):
    # The choice is Python, asked while recording: a replay keeps it, and a new
    # `decay` function is a new optimizer structure, recorded again.
    rng = np.random.default_rng(5)
    batches = classification_batches(rng)
    a, b = twins(mlp, batches[0][0])
    opts = [optimizers.AdamW(alpha=0.05, weight_decay=0.5,
                             decay=lambda name, p: name != "l1/W") for _ in range(2)]

    def between(i, opt_a, opt_b):
        if i == 3:
            for opt in (opt_a, opt_b):
                opt.decay = optimizers.matrices

    traced = dezero.trace(make_step(b, opts[1].setup(b), F.softmax_cross_entropy))
    eager = make_step(a, opts[0].setup(a), F.softmax_cross_entropy)
    with dezero.static.debug(1):
        for i, (x, t) in enumerate(batches):
            between(i, *opts)
            np.testing.assert_allclose(traced(x, t).data, eager(x, t).data,
                                       rtol=1e-5, atol=1e-6)
            assert_same_params(a, b)
    assert "retrace step: optimizer.decay was replaced" in capsys.readouterr().err


def test_learning_rate_change_between_steps_is_read_afresh():
    rng = np.random.default_rng(2)
    batches = classification_batches(rng)
    a, b = twins(mlp, batches[0][0])

    def between(i, opt_a, opt_b):
        if i == 3:
            opt_a.lr = opt_b.lr = 0.01

    run_lockstep(a, b, optimizers.SGD(lr=0.5), optimizers.SGD(lr=0.5), batches,
                 between=between)


def test_dropout_replays_fresh_masks():
    rng = np.random.default_rng(3)
    batches = classification_batches(rng)

    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = L.Linear(16), L.Linear(3)

        def forward(self, x):
            return self.l2(F.dropout(F.relu(self.l1(x)), 0.5))

    a, b = twins(Net, batches[0][0])
    traced = run_lockstep(a, b, optimizers.SGD(lr=0.1), optimizers.SGD(lr=0.1), batches)
    assert any(n.record.random for n in traced.graph.of_kind("op"))


def test_batchnorm_train_and_test_mode():
    rng = np.random.default_rng(4)
    batches = classification_batches(rng)

    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.l1, self.bn, self.l2 = L.Linear(8), L.BatchNorm(), L.Linear(3)

        def forward(self, x):
            return self.l2(F.relu(self.bn(self.l1(x))))

    a, b = twins(Net, batches[0][0])
    run_lockstep(a, b, optimizers.SGD(lr=0.1), optimizers.SGD(lr=0.1), batches)
    np.testing.assert_allclose(b.bn.avg_mean.data, a.bn.avg_mean.data, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.bn.avg_var.data, a.bn.avg_var.data, rtol=1e-5, atol=1e-6)
    predict = dezero.trace(lambda x: b(x))
    with dezero.test_mode():
        for x, _ in batches:
            np.testing.assert_allclose(predict(x).data, a(x).data, rtol=1e-5, atol=1e-6)
    assert predict.entries == 1


def test_model_inference_replays():
    rng = np.random.default_rng(5)
    batches = classification_batches(rng)
    a, b = twins(mlp, batches[0][0])
    predict = dezero.trace(lambda x: F.softmax(b(x)))
    for x, _ in batches:
        np.testing.assert_allclose(predict(x).data, F.softmax(a(x)).data, rtol=1e-6)
    assert predict.entries == 1


def test_cnn_training_step():
    rng = np.random.default_rng(6)
    batches = [(rng.standard_normal((2, 1, 6, 6)).astype(np.float32), rng.integers(0, 3, 2))
               for _ in range(4)]

    class CNN(models.Model):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = L.Conv2d(4, kernel_size=3, pad=1), L.Linear(3)

        def forward(self, x):
            y = F.pooling(F.relu(self.conv(x)), 2, 2)
            return self.fc(F.reshape(y, (y.shape[0], -1)))

    a, b = twins(CNN, batches[0][0])
    run_lockstep(a, b, optimizers.MomentumSGD(lr=0.1), optimizers.MomentumSGD(lr=0.1), batches)


def test_gradients_accumulate_without_cleargrads():
    rng = np.random.default_rng(7)
    batches = classification_batches(rng, n=4)
    a, b = twins(mlp, batches[0][0])

    def make(model):
        def accumulate(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            loss.backward()  # no cleargrads: the grads add up over calls
            return loss
        return accumulate

    eager, traced = make(a), dezero.trace(make(b), check=True)
    for x, t in batches:
        eager(x, t)
        traced(x, t)
        assert_same_params(a, b)
    assert traced.entries == 2  # the first call had no grads to add to
    assert any(n.attrs.get("field") == "grad" for n in traced.graph.of_kind("state"))


def test_lstm_truncated_bptt_carries_hidden_state_between_calls():
    rng = np.random.default_rng(8)

    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.lstm, self.fc = L.LSTM(4), L.Linear(1)

        def forward(self, x):
            return self.fc(self.lstm(x))

        def reset_state(self):
            self.lstm.reset_state()

    example = np.zeros((1, 1), np.float32)
    a, b = twins(Net, example)
    a.reset_state(), b.reset_state()

    def make(model, optimizer):
        def window(xs, ts):  # one window of truncated backpropagation through time
            loss = 0
            for x, t in zip(xs, ts):
                loss = loss + F.mean_squared_error(model(x), t)
            model.cleargrads()
            loss.backward()
            loss.unchain_backward()
            optimizer.update()
            return loss
        return window

    eager = make(a, optimizers.Adam(alpha=0.01).setup(a))
    traced = dezero.trace(make(b, optimizers.Adam(alpha=0.01).setup(b)), check=True)
    for _ in range(6):
        xs = tuple(rng.standard_normal((1, 1)).astype(np.float32) for _ in range(3))
        ts = tuple(np.sin(x) for x in xs)
        np.testing.assert_allclose(traced(xs, ts).data, eager(xs, ts).data, rtol=1e-5)
        assert_same_params(a, b)
        np.testing.assert_allclose(b.lstm.h.data, a.lstm.h.data, rtol=1e-5, atol=1e-6)
    assert traced.entries == 1
    assert "LSTM.h <- " in str(traced.graph) and "(LSTM.c)" in str(traced.graph)


def test_saved_lstm_step_carries_its_hidden_state_standalone(tmp_path):
    lstm = L.LSTM(3, in_size=1)

    def run(x):
        return lstm(x) * 1.0

    with dezero.no_grad():
        traced = dezero.trace(run)
        xs = [np.full((1, 1), v, np.float32) for v in (0.5, -1.0, 2.0, 0.3)]
        traced(xs[0])
        traced(xs[1])  # records with LSTM.h and LSTM.c as carried state
        graph = traced.graph
        graph.save(str(tmp_path / "lstm"))
        loaded = dezero.static.load(str(tmp_path / "lstm"))
        for x in xs[2:]:
            np.testing.assert_allclose(loaded(x).data, traced(x).data, rtol=1e-6)
    assert "h <- " in str(loaded) and set(loaded.state) >= {"h", "c"}


def test_traced_step_of_a_float64_model_matches_eager():
    # The optimizer's rate turns float64 at the first update, inside the trace.
    x = np.random.default_rng(0).standard_normal((8, 2))
    t = np.random.default_rng(1).integers(0, 3, 8)
    a, b = twins(lambda: models.MLP((5, 3)), x.astype(np.float32))
    for pa, pb in zip(a.params(), b.params()):
        pa.data, pb.data = pa.data.astype(np.float64), pb.data.astype(np.float64)
    eager = make_step(a, optimizers.SGD(0.1).setup(a), F.softmax_cross_entropy)
    traced = dezero.trace(make_step(b, optimizers.SGD(0.1).setup(b), F.softmax_cross_entropy))
    for _ in range(4):
        expected, got = eager(x, t), traced(x, t)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got.data, expected.data, rtol=1e-12)
    assert traced.entries == 1



@pytest.mark.parametrize("make_opt", [
    lambda: optimizers.MomentumSGD(lr=0.1),
    lambda: optimizers.Adam(alpha=0.01),
    lambda: optimizers.AdamW(alpha=0.01),
], ids=["MomentumSGD", "Adam", "AdamW"])
def test_parameters_that_join_later_get_fresh_state_in_a_traced_step(make_opt):
    # `extra` gets no gradient until the fourth call: its slots (and Adam's
    # count of its updates) start there, in the eager run and in the replays.
    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.l0, self.l1, self.extra = L.Linear(10), L.Linear(3), L.Linear(3, in_size=10)

        def forward(self, x, use_extra=False):
            h = F.sigmoid(self.l0(x))
            return self.l1(h) + self.extra(h) if use_extra else self.l1(h)

    def make(model, opt):
        def step(x, t, use_extra):
            loss = F.softmax_cross_entropy(model(x, use_extra), t)
            model.cleargrads()
            loss.backward()
            opt.update()
            return loss
        return step

    rng = np.random.default_rng(9)
    batches = classification_batches(rng, n=7)
    a, b = twins(Net, batches[0][0])
    eager = make(a, make_opt().setup(a))
    traced = dezero.trace(make(b, make_opt().setup(b)), static_argnames="use_extra",
                          check=True)
    for i, (x, t) in enumerate(batches):
        use_extra = i >= 3
        np.testing.assert_allclose(traced(x, t, use_extra).data, eager(x, t, use_extra).data,
                                   rtol=1e-5, atol=1e-6)
        for pa, pb in zip(a.params(), b.params()):
            np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5, atol=1e-6)
    assert traced.entries == 2
