"""The fast check (trace.fast_check): after a replay, a call with the same kinds of
arguments is checked by one generated function (the signature, the structure and the
guards on state, one test a line) instead of the general path. Whatever it tests, a
change still retraces or is explained, as eager code would have it."""
import copy

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.models import MLP
from dezero.static import debug
from dezero.static.trace import TracedFunction

X = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
T = np.arange(6) % 3


def twins():
    """(eager step, traced step, eager model, traced model) from one init."""
    np.random.seed(0)
    a = MLP((5, 3))
    a(X)
    b = copy.deepcopy(a)
    steps = []
    for model in (a, b):
        optimizer = optimizers.SGD(0.1).setup(model)

        def step(x, t, model=model, optimizer=optimizer):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        steps.append(step)
    return steps[0], dezero.trace(steps[1]), a, b


def test_a_replayed_call_is_checked_by_one_generated_function(monkeypatch):
    eager, traced, a, b = twins()
    traced(X, T), eager(X, T)
    assert traced._hot is None  # a recording is not a replay
    traced(X, T), eager(X, T)
    entry = traced._hot
    assert entry is not None and entry.fast(X, T) is True
    source = entry.fast.source
    assert "[a0, a1] = args" in source and "a0.shape ==" in source and "# state MLP_l0_W" in source
    assert entry.fast(X) is False and entry.fast(X, T, T) is False  # other calls: the general way
    # from now on the general path is not taken
    monkeypatch.setattr(TracedFunction, "_signature", lambda *a, **k: pytest.fail("slow"))
    for _ in range(3):
        np.testing.assert_allclose(traced(X, T).data, eager(X, T).data, rtol=1e-6)
    for p, q in zip(a.params(), b.params()):
        np.testing.assert_allclose(q.data, p.data, rtol=1e-6, atol=1e-7)


def new_shape(a, b):
    return (X[:4], T[:4]), {}


def new_dtype(a, b):
    return (X, T.astype(np.int32)), {}


def a_variable(a, b):
    return (Variable(X), T), {}


def a_variable_with_grad(a, b):
    v = Variable(X)
    v.grad = Variable(np.zeros_like(X))
    return (v, T), {}


class Sub(np.ndarray):
    pass


def an_array_subclass(a, b):
    return (X.view(Sub), T), {}


def by_keyword(a, b):
    return (X,), {"t": T}


def in_test_mode(a, b):
    return (X, T), {"config": dezero.test_mode}


def a_parameter_of_another_class(a, b):
    for model in (a, b):
        model.l1.W.data = model.l1.W.data.view(Sub)
    return (X, T), {}


def a_layer_replaced(a, b):
    np.random.seed(1)
    a.l1 = dezero.layers.Linear(3, in_size=5)
    b.l1 = copy.deepcopy(a.l1)
    return (X, T), {}


@pytest.mark.parametrize("change", [
    new_shape, new_dtype, a_variable, a_variable_with_grad, an_array_subclass, by_keyword,
    in_test_mode, a_parameter_of_another_class, a_layer_replaced])
def test_what_the_fast_check_tests_still_retraces_or_replays_like_eager(change):
    eager, traced, a, b = twins()
    for _ in range(3):  # recorded, replayed, replayed by the fast check
        traced(X, T), eager(X, T)
    assert traced._hot is not None
    args, kwargs = change(a, b)
    config = kwargs.pop("config", None)
    for _ in range(3):
        with config() if config else _nothing():
            want = eager(*args, **kwargs)
            got = traced(*args, **kwargs)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-5, atol=1e-6)
        for p, q in zip(a.params(), b.params()):
            np.testing.assert_allclose(q.data, p.data, rtol=1e-5, atol=1e-6)
    # and back to the first kind of call
    np.testing.assert_allclose(traced(X, T).data, eager(X, T).data, rtol=1e-5, atol=1e-6)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_same_variable_twice_after_two_is_another_graph():
    def f(u, v):
        return u * 2.0 + v
    traced = dezero.trace(f)
    u, v = Variable(np.ones(3, np.float32)), Variable(np.full(3, 2.0, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(traced(u, v).data, [4, 4, 4])
    assert traced._hot is not None
    np.testing.assert_array_equal(traced(u, u).data, [3, 3, 3])
    assert traced.entries == 2


def test_a_call_inside_another_trace_runs_inline():
    inner = dezero.trace(lambda x: x * 2.0)
    x = Variable(np.ones(3, np.float32))
    for _ in range(3):
        inner(x)
    assert inner._hot is not None
    outer = dezero.trace(lambda x: inner(x) + 1.0)
    outer(x)
    assert len(outer.graph.of_kind("op")) == 2  # the inner ops were recorded in it
    np.testing.assert_array_equal(outer(x).data, [3, 3, 3])


def test_an_attribute_gone_from_a_layer_reads_as_a_change():
    model = MLP((5, 3))
    model.scale = 2.0
    traced = dezero.trace(lambda x: F.sum(model(x)) * model.scale)
    for _ in range(3):
        traced(X)
    assert traced._hot is not None
    del model.scale  # the fast check's lookup fails (KeyError): the general path runs
    with pytest.raises(AttributeError, match="scale"):
        traced(X)


def test_debug_level_2_logs_every_replay_of_a_hot_entry(capsys):
    eager, traced, a, b = twins()
    for _ in range(3):
        traced(X, T)
    with debug(2):
        traced(X, T)
    assert "replay step" in capsys.readouterr().err
