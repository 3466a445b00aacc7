"""The trace contract: a traced call returns what eager execution returns and leaves
the same state, or raises TraceError at record time. Each test runs the same code
traced and eagerly, side by side, over several calls with changing inputs."""
import threading
import warnings

import numpy as np
import pytest
from backend_helpers import assert_replay_equal

import dezero
import dezero.functions as F
from dezero import Function, Variable, core
from dezero.static import TraceError


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def side_by_side(fn, make_args, calls=4, state=()):
    """Run fn traced and eagerly on the same arguments (`state`: pairs of Variables,
    (traced copy, eager copy), compared after each call) and return the traced one."""
    traced = dezero.trace(fn[0])
    for i in range(calls):
        args = make_args(i)
        got, want = traced(*args), fn[1](*args)
        for g, w in zip(_leaves(got), _leaves(want)):
            assert_replay_equal(g, w, err_msg=f"call {i}")
        for a, b in state:
            assert_replay_equal(a.data, b.data, err_msg=f"state after call {i}")
    return traced


def _leaves(obj):
    if isinstance(obj, (tuple, list)):
        return [a for o in obj for a in _leaves(o)]
    return [obj.data if isinstance(obj, Variable) else np.asarray(obj)]


# =============================================================================
# The core's hooks: one tracer per thread, backward reports its Functions
# =============================================================================


def test_backward_reports_each_function_to_the_tracer_hooks():
    class Watch(core.TracerHooks):
        def __init__(self):
            self.steps = []

        def backward_step(self, function):
            self.steps.append(function.op_name)

    x = Variable(np.array(2.0))
    y = F.exp(x * 3.0)
    watch = Watch()
    previous = core.set_tracer(watch)
    try:
        y.backward()
    finally:
        core.set_tracer(previous)
    assert watch.steps == ["exp", "mul"]
    assert core.current_tracer() is None


def test_backward_into_a_function_made_before_the_call_raises_even_if_it_records_nothing():
    class Identity(Function):
        def forward(self, x):
            return x

        def backward(self, gy):
            return gy  # runs no Function: nothing for the tracer to see but the hook

    W = Variable(np.ones(2), name="W")
    h = Identity()(W)
    step = dezero.trace(lambda x: F.sum(h * x).backward())
    with pytest.raises(TraceError, match="reached .*Identity, computed before the call"):
        step(np.ones(2))


def test_eager_code_in_another_thread_is_not_recorded_while_a_trace_records():
    recording, eager_done = threading.Event(), threading.Event()
    seen = {}

    def eager():
        recording.wait(5)
        try:
            v = Variable(np.array(3.0))
            y = v * v + 1.0
            y.backward()
            v.data = v.data * 2  # an assignment: no state write in the other trace
            seen["result"] = (float(y), float(v.grad), float(v))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            seen["error"] = e
        eager_done.set()

    def f(x):
        y = F.sin(x)
        recording.set()
        eager_done.wait(5)
        return y * 2.0

    thread = threading.Thread(target=eager)
    thread.start()
    traced = dezero.trace(f)
    x = np.array([0.5, 1.0])
    traced(x)
    thread.join()
    assert "error" not in seen, seen.get("error")
    assert seen["result"] == (10.0, 6.0, 6.0)
    assert [n.op for n in traced.graph.of_kind("op")] == ["sin", "mul"]
    assert not traced.graph.of_kind("write")
    for i in range(3):
        np.testing.assert_array_equal(traced(x + i).data, np.sin(x + i) * 2.0)


def test_two_threads_trace_at_once():
    barrier = threading.Barrier(2, timeout=5)
    W = Variable(np.array([1.0, 2.0]), name="W")
    results, errors = {}, []

    def step_a(x):
        y = F.tanh(x * W)
        barrier.wait()  # both recordings are in progress now
        return y

    def step_b(x):
        y = F.exp(x) + 1.0
        barrier.wait()
        return y * y

    def run(name, fn, reference):
        try:
            traced = dezero.trace(fn)
            for i in range(3):
                x = np.array([0.5, -1.0]) + i
                got = traced(x)  # the barrier is crossed only while recording
                np.testing.assert_allclose(got.data, reference(x), rtol=1e-12)
            results[name] = [n.op for n in traced.graph.of_kind("op")]
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=("a", step_a, lambda x: np.tanh(x * W.data))),
               threading.Thread(target=run, args=("b", step_b,
                                                  lambda x: (np.exp(x) + 1.0) ** 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {"a": ["mul", "tanh"], "b": ["exp", "add", "mul"]}


def test_threads_making_the_first_call_at_once_record_one_graph():
    barrier = threading.Barrier(8, timeout=10)
    W = Variable(np.array([1.0, 2.0]), name="W")
    results, errors = [], []

    @dezero.trace
    def step(x):
        y = F.tanh(x * W)
        if x.shape == (2,):
            barrier.wait()  # all eight are inside their first call at once
        return y

    def run(i):
        try:
            results.append((i, step(np.full(2, float(i))).data))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, y in results:
        np.testing.assert_allclose(y, np.tanh(np.full(2, float(i)) * W.data), rtol=1e-6)
    assert step.entries == 1  # one recording per signature; the others ran eagerly
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a new signature records: no max_entries warning
        step(np.ones((3, 2)))
    assert step.entries == 2


def test_no_grad_in_another_thread_leaves_a_recording_as_it_is():
    W = Variable(np.array([1.0, 2.0]), name="W")
    inside, release = threading.Event(), threading.Event()

    def eval_loop():
        with dezero.no_grad():  # held while the main thread records
            inside.set()
            release.wait(5)

    def step(x):
        loss = F.sum(x * W)
        W.cleargrad()
        loss.backward()
        W.data = (W - 0.1 * W.grad).data
        return loss

    thread = threading.Thread(target=eval_loop)
    thread.start()
    try:
        inside.wait(5)
        assert dezero.Config.enable_backprop  # this thread's setting
        traced = dezero.trace(step)
        x = np.array([0.5, -1.0])
        for _ in range(3):
            traced(x)
    finally:
        release.set()
        thread.join()
    np.testing.assert_allclose(W.data, [1.0, 2.0] - 3 * 0.1 * x)
    assert traced.graph.of_kind("write")  # the update is part of the graph


# =============================================================================
# Identity: values are known by the Variable or argument they came from
# =============================================================================


def test_the_same_array_passed_as_two_arguments():
    def f(x, y):
        return x * 2.0 + y * 3.0  # arithmetic on array arguments is recorded

    rng = np.random.default_rng(0)
    shared = f32(rng, 3)
    traced = dezero.trace(f)
    np.testing.assert_array_equal(traced(shared, shared), f(shared, shared))  # first call
    for _ in range(3):
        x, y = f32(rng, 3), f32(rng, 3)
        np.testing.assert_array_equal(traced(x, y), x * 2.0 + y * 3.0)
        np.testing.assert_array_equal(traced(y, y), f(y, y))
    assert traced.entries == 1


def test_the_same_variable_passed_as_two_arguments_then_two_variables():
    def f(x, y):
        z = (x - y) * y
        z.backward()  # the one Variable of the first call gets both gradients
        return z

    traced = dezero.trace(f)
    for x, y in [(3.0, None), (10.0, 4.0), (5.0, None), (2.0, 7.0)]:
        got, want = [Variable(np.array(x))], [Variable(np.array(x))]
        for args in (got, want):
            args.append(args[0] if y is None else Variable(np.array(y)))
        assert traced(*got).data == f(*want).data
        for g, w in zip(got, want):
            assert g.grad.data == w.grad.data
    assert traced(Variable(np.array(10.0)), Variable(np.array(4.0))).data == 24.0
    assert traced.entries == 2


def test_the_same_zeros_as_h0_and_c0_of_an_lstm_like_cell():
    rng = np.random.default_rng(1)
    W = Variable(f32(rng, 3, 3), name="W")

    def cell(x, h, c):
        c_new = F.sigmoid(F.matmul(x, W)) * c + F.tanh(F.matmul(h, W))
        return F.tanh(c_new) + h, c_new

    traced = dezero.trace(cell)
    zeros = np.zeros((2, 3), np.float32)
    for i in range(4):
        x = f32(rng, 2, 3)
        h, c = (zeros, zeros) if i == 0 else (f32(rng, 2, 3), f32(rng, 2, 3))
        for got, want in zip(traced(x, h, c), cell(x, h, c)):
            assert_replay_equal(got.data, want.data)
    assert traced.entries == 1


def test_a_state_variables_array_passed_as_an_argument():
    def make(W):
        def step(x):
            y = x * W  # at the first call x is W.data: two names, one array
            with dezero.no_grad():
                W.data = (W * 2.0).data
            return y
        return step

    W, W_eager = Variable(np.array([1.0, 2.0])), Variable(np.array([1.0, 2.0]))
    traced, eager = dezero.trace(make(W)), make(W_eager)
    for i in range(4):
        x, x_eager = (W.data, W_eager.data) if i < 2 else (np.array([3.0, -1.0]) + i,) * 2
        np.testing.assert_array_equal(traced(x).data, eager(x_eager).data)
        np.testing.assert_array_equal(W.data, W_eager.data)
    assert traced.entries == 1


def test_two_variables_sharing_one_array_are_two_states():
    online = Variable(np.array([1.0, 2.0]), name="online")
    target = Variable(online.data)  # shares the array; updates assign, so they part
    eager_online = Variable(np.array([1.0, 2.0]))
    eager_target = Variable(eager_online.data)

    def make(online, target):
        def step(x):
            with dezero.no_grad():
                online.data = (online - 0.5 * x).data
            return F.sum(target * x)
        return step

    side_by_side((make(online, target), make(eager_online, eager_target)),
                 lambda i: (np.array([1.0, -1.0]) * (i + 1),),
                 state=[(online, eager_online), (target, eager_target)])


def test_a_variable_made_from_data_inside_the_run_follows_its_source():
    W = Variable(np.array([1.0, 2.0]), name="W")

    def f(x):
        h = F.exp(x)
        copy = Variable(h.data)  # same value as h, not a constant
        return copy * W + Variable(x) * 0.5

    side_by_side((f, f), lambda i: (np.array([0.0, 1.0]) + i,))


def test_a_variable_made_inside_the_run_is_fresh_at_every_call():
    def f(x):
        acc = Variable(np.zeros(2))
        for _ in range(3):
            acc.data = (acc + x).data
        acc.data += 1.0
        return acc

    traced = side_by_side((f, f), lambda i: (np.array([1.0, 2.0]) * (i + 1),))
    assert not traced.graph.of_kind("state") and not traced.graph.of_kind("write")


# =============================================================================
# Numbers never leak: the guard on traced arrays, the global random state
# =============================================================================


def _h(x):
    return F.tanh(x) * 2.0


@pytest.mark.parametrize("body, what", [
    (lambda x: _h(x) * (1.0 if _h(x).data.sum() > 0 else -1.0), r"\.sum of a traced array"),
    (lambda x: _h(x) - np.mean(_h(x).data), "numpy's mean of a traced array"),
    (lambda x: _h(x) * _h(x).data[0, 0], r"indexing \[\(0, 0\)\] of a traced array"),
    (lambda x: _h(x) * len(_h(x).data.tolist()), r"\.tolist of a traced array"),
    (lambda x: _h(x) / np.abs(_h(x).data).max(), "numpy's absolute of a traced array"),
    (lambda x: float(F.sum(_h(x)).data), r"float\(\) of a traced array"),
    (lambda x: F.exp(x.reshape(len(x), -1) / 255), r"\.reshape of a traced array"),
    (lambda x: F.exp(x) if (x > 0).all() else x, "`>` of a traced array"),
    (lambda x: F.exp(x) * bool(_h(x).data.shape and _h(x).data), r"bool\(\) of a traced"),
    (lambda x: F.exp(Variable(np.asarray(x))), "conversion to a numpy array of a traced"),
])
def test_reading_numbers_of_a_traced_array_raises_naming_the_line_and_the_fix(body, what):
    with pytest.raises(TraceError, match=what) as info:
        dezero.trace(body)(np.ones((2, 3), np.float32))
    message = str(info.value)
    assert "test_trace_contract.py:" in message  # the user's line
    assert "fix: use dezero functions" in message and "static argument" in message


def test_shape_dtype_and_len_of_traced_arrays_are_fine_and_eager_sees_no_guard():
    W = Variable(np.ones((3, 2), np.float32), name="W")

    def f(x):
        h = F.matmul(x, W)
        assert h.data.shape == (len(x), 2) and h.data.dtype == np.float32
        assert x.ndim == 2 and W.data.size == 6 and np.zeros_like(x).shape == x.shape
        return h, h.data

    traced = dezero.trace(f)
    for i in range(3):
        x = np.full((i + 1, 3), i, np.float32)
        h, data = traced(x)
        assert type(data) is np.ndarray and type(h.data) is np.ndarray
        np.testing.assert_array_equal(data, x @ W.data)
    assert type(W.data) is np.ndarray


def test_a_traced_array_kept_past_its_recording_refuses_to_be_used():
    kept = []

    def f(x):
        y = F.exp(x)
        kept.append(y.data)
        return y

    dezero.trace(f)(np.ones(2))
    with pytest.raises(TraceError, match="after that recording ended"):
        np.asarray(kept[0])


def test_global_random_draws_inside_a_recording_raise():
    import random

    def noisy(x):
        return x + Variable(np.random.randn(*x.shape))

    def python_noise(x):
        return F.exp(x) * random.random()

    def dropout(x):  # a dezero random op draws from np.random: fine
        return F.dropout(F.exp(x))

    with pytest.raises(TraceError, match="drew random numbers from np.random"):
        dezero.trace(noisy)(Variable(np.ones(3)))
    with pytest.raises(TraceError, match="drew random numbers"):
        dezero.trace(python_noise)(Variable(np.ones(3)))
    traced = dezero.trace(dropout)
    first, second = traced(Variable(np.ones(100))), traced(Variable(np.ones(100)))
    assert not np.array_equal(first.data, second.data)


class CountingNet(dezero.models.Model):
    def __init__(self):
        super().__init__()
        self.fc = dezero.layers.Linear(2, in_size=3)
        self.calls, self.built = 0, False

    def forward(self, x):
        self.calls += 1  # Python state: a replay runs no Python
        return self.fc(x)


class LazyFlagNet(CountingNet):
    def forward(self, x):
        if not self.built:  # changes once, on the first call only
            self.built = True
        return self.fc(x)


def test_python_state_a_run_changes_at_every_call_raises_naming_it():
    model = CountingNet()
    traced = dezero.trace(lambda x: model(x))
    traced(np.ones((2, 3), np.float32))  # eager, not kept: it may be a one-time init
    assert model.calls == 1
    with pytest.raises(TraceError, match=r"model\.calls 1 -> 2") as info:
        traced(np.ones((2, 3), np.float32))
    assert "Variable" in str(info.value)  # the way out


def test_python_state_a_run_changes_once_replays_after_a_second_recording():
    np.random.seed(0)
    model, eager = LazyFlagNet(), LazyFlagNet()
    for a, b in zip(model.params(), eager.params()):
        b.data = a.data.copy()
    traced = side_by_side((lambda x: model(x), lambda x: eager(x)),
                          lambda i: (np.full((2, 3), i, np.float32),))
    assert model.built and traced.entries == 1


def _mutations():
    import collections
    return {"list.append": ([], lambda log, n: log.append(n)),
            "list.extend": ([], lambda log, n: log.extend([n, n])),
            "list item": ([0], lambda log, n: log.__setitem__(0, log[0] + n)),
            "list.pop": (list(range(10)), lambda log, n: log.pop()),
            "dict new key": ({}, lambda log, n: log.__setitem__(len(log), n)),
            "set.add": (set(), lambda log, n: log.add(len(log))),
            "deque.append": (collections.deque(), lambda log, n: log.append(n))}


@pytest.mark.parametrize("mutation", list(_mutations()))
def test_a_python_container_the_step_changes_at_every_call_raises_naming_it(mutation):
    # A replay runs no Python: the list would grow once in five calls.
    log, mutate = _mutations()[mutation]
    holder = {"log": log}

    def step(x):
        mutate(holder["log"], len(x))
        return F.exp(x)

    traced = dezero.trace(step)
    traced(np.ones(3))  # eager, not kept: it may be a one-time initialisation
    with pytest.raises(TraceError, match=r"changes Python state at every call \(holder\['log'\]"):
        traced(np.ones(3))


def test_an_array_the_step_changes_in_place_at_every_call_raises_naming_it():
    # A replay runs no Python: the count would reach 1 in five calls.
    count = np.zeros(1)

    def step(x):
        count[0] += 1
        return F.exp(x)

    traced = dezero.trace(step)
    traced(np.ones(3))  # eager, not kept: it may be a one-time initialisation
    with pytest.raises(TraceError, match=r"changes Python state at every call \(array "
                                         r"count changed in place\)"):
        traced(np.ones(3))
    assert count[0] == 2
    model = dezero.models.MLP((3,))  # a layer's array: the same
    model.count = np.zeros(1)

    def counting(x):
        model.count[0] += 1
        return model(x)

    traced = dezero.trace(counting)
    traced(np.ones((1, 2)))
    with pytest.raises(TraceError, match=r"array model\.count changed in place"):
        traced(np.ones((1, 2)))


def test_a_python_container_filled_once_or_only_read_replays():
    cache, table = [], {"scale": [2.0, 3.0]}

    def step(x):
        if not cache:
            cache.append(len(x))  # filled on the first call only
        return F.exp(x) * table["scale"][0] + cache[0]

    traced = dezero.trace(step)
    for i in range(4):
        np.testing.assert_array_equal(traced(np.full(3, float(i))).data,
                                      step(np.full(3, float(i))).data)
    assert traced.entries == 1 and cache == [3]


def test_draws_from_a_random_generator_of_the_user_raise_naming_it():
    rng = np.random.default_rng(0)
    legacy = np.random.RandomState(0)

    def noisy(x):
        return F.exp(x) + rng.standard_normal(x.shape)

    def legacy_noisy(x):
        return F.exp(x) + legacy.randn(*x.shape)

    for f, name in ((noisy, "rng"), (legacy_noisy, "legacy")):
        traced = dezero.trace(f)
        traced(np.ones(3))
        with pytest.raises(TraceError, match=f"{name}"):
            traced(np.ones(3))


def _unseeded_sources():
    import random
    import secrets
    import time
    return {"default_rng()": lambda: np.random.default_rng().standard_normal(3),
            "RandomState()": lambda: np.random.RandomState().standard_normal(3),
            "Generator(PCG64())": lambda: np.random.Generator(np.random.PCG64()).random(3),
            "random.Random()": lambda: random.Random().random(),
            "time.time()": lambda: time.time() % 1.0,
            "time.time_ns()": lambda: time.time_ns() % 7,
            "secrets.randbits": lambda: secrets.randbits(8),
            "secrets.token_bytes": lambda: len(secrets.token_bytes(4)) * 0.5,
            "random.SystemRandom": lambda: random.SystemRandom().random()}


@pytest.mark.parametrize("source", list(_unseeded_sources()))
def test_fresh_entropy_inside_a_recording_raises_naming_the_line(source):
    # No global state moves: its numbers were frozen into the graph in silence.
    draw = _unseeded_sources()[source]

    def noisy(x):
        noise = draw()
        return F.exp(x) + noise

    with pytest.raises(TraceError, match=r"while it was traced \(test_trace_contract.py:\d+, "
                                         r"`[^`]+`\)[\s\S]*fix:"):
        dezero.trace(noisy)(np.ones(3))
    assert core.current_tracer() is None
    draw()  # outside a recording, as before


def test_seeded_generators_made_inside_a_recording_replay_like_eager():
    import random

    from dezero.datasets import get_spiral

    def seeded(x):
        a = np.random.RandomState(0).standard_normal(3)  # seeds as numpy's legacy does
        b = np.random.default_rng(1).standard_normal(3)
        c = random.Random(2).random()
        d = get_spiral(train=True)[0][:3, 0]  # dezero's data set: RandomState(seed)
        return F.exp(x) + a + b + c + d.astype(np.float64)

    traced = dezero.trace(seeded)
    for i in range(3):
        x = np.full(3, float(i))
        assert_replay_equal(traced(x).data, seeded(x).data)
    assert traced.entries == 1


def test_unseeded_generators_of_other_threads_are_not_the_recordings():
    def step(x):
        thread = threading.Thread(target=np.random.default_rng)
        thread.start()
        thread.join()
        return F.exp(x)

    traced = dezero.trace(step)
    for _ in range(3):
        np.testing.assert_array_equal(traced(np.ones(3)).data, step(np.ones(3)).data)
    assert traced.entries == 1


def test_a_draw_after_the_last_op_is_not_blamed_on_the_callers_line():
    def f(x):
        y = F.exp(x)
        np.random.rand()  # after the last recorded op
        return y

    with pytest.raises(TraceError, match="after the last recorded op") as info:
        dezero.trace(f)(np.ones(3))  # this line is the caller's, not the draw's
    assert "this line" not in str(info.value)


def test_lazy_layers_initialise_inside_a_recording_without_a_random_alarm():
    np.random.seed(0)
    model = dezero.models.MLP((4, 2))
    traced = dezero.trace(lambda x: model(x))
    for i in range(3):
        x = np.full((2, 3), i, np.float32)
        assert_replay_equal(traced(x).data, model(x).data)


# =============================================================================
# The book's in-place idioms on .data of captured state are state writes
# =============================================================================


def test_sgd_by_hand_with_in_place_updates_replays_like_eager():
    rng = np.random.default_rng(3)

    def make():
        model = dezero.models.MLP((5, 1))
        model(np.zeros((1, 2), np.float32))  # initialise before the twins part
        return model

    np.random.seed(1)
    traced_model = make()
    np.random.seed(1)
    eager_model = make()

    def make_step(model, lr=0.1):
        def step(x, t):
            loss = F.mean_squared_error(model(x), t)
            model.cleargrads()
            loss.backward()
            for p in model.params():
                p.data -= lr * p.grad.data
            return loss
        return step

    traced = dezero.trace(make_step(traced_model))
    eager = make_step(eager_model)
    for i in range(5):
        x, t = f32(rng, 8, 2), f32(rng, 8, 1)
        assert_replay_equal(traced(x, t).data, eager(x, t).data)
        for a, b in zip(traced_model.params(), eager_model.params()):
            assert_replay_equal(a.data, b.data)
    assert traced.entries == 1
    assert len(traced.graph.of_kind("write")) >= 4


def test_newtons_method_with_in_place_update_replays_like_eager():
    def make(x):
        def newton():
            y = x ** 4 - 2 * x ** 2
            x.cleargrad()
            y.backward(create_graph=True)
            gx = x.grad
            x.cleargrad()
            gx.backward()
            gx2 = x.grad
            x.data -= gx.data / gx2.data
            return y
        return newton

    x, x_eager = Variable(np.array(2.0)), Variable(np.array(2.0))
    traced, eager = dezero.trace(make(x)), make(x_eager)
    for i in range(6):
        np.testing.assert_array_equal(traced().data, eager().data)
        np.testing.assert_array_equal(x.data, x_eager.data)
    np.testing.assert_allclose(x.data, 1.0)


def test_plus_equals_and_full_slice_writes_on_state_replay_like_eager():
    def make(count, avg):
        def step(x):
            count.data += 1
            avg.data[...] = (avg * 0.9 + x * 0.1).data
            alias = avg.data
            alias *= 2.0  # the array of avg changes: eager sees it through avg
            return avg * 1.0
        return step

    twins = [(Variable(np.array(0)), Variable(np.zeros(3))) for _ in range(2)]
    side_by_side((make(*twins[0]), make(*twins[1])),
                 lambda i: (np.array([1.0, 2.0, 3.0]) * i,),
                 state=[(twins[0][0], twins[1][0]), (twins[0][1], twins[1][1])])


def test_in_place_writes_into_arguments_or_parts_of_arrays_raise():
    W = Variable(np.zeros(3), name="W")

    def into_argument(x):
        x += 1.0
        return F.exp(x)

    def into_part(x):
        W.data[0] = 1.0
        return W * x

    def into_variable_argument(v):
        v.data += 1.0
        return F.exp(v)

    with pytest.raises(TraceError, match="writes into its argument x in place"):
        dezero.trace(into_argument)(np.ones(3))
    with pytest.raises(TraceError, match="assigns .data of its argument v"):
        dezero.trace(into_variable_argument)(Variable(np.ones(3)))
    with pytest.raises(TraceError, match=r"a write into part of it \(\[0\] = \.\.\.\)"):
        dezero.trace(into_part)(np.ones(3))


def test_in_place_updates_cast_back_to_the_dtype_of_the_state_like_numpy():
    def make(W):
        def step(x):
            W.data -= x * 0.5  # float64 argument into float32 state
            return W * 1.0
        return step

    W, W_eager = (Variable(np.ones(3, np.float32)) for _ in range(2))
    side_by_side((make(W), make(W_eager)), lambda i: (np.arange(3.0) * (i + 1),),
                 state=[(W, W_eager)])
    assert W.dtype == np.float32


# =============================================================================
# State slots are small typed records that read and write their array
# =============================================================================


def test_state_nodes_read_through_typed_slots():
    from dezero.static.slots import AttrSlot, DataSlot, GradSlot

    class Carry:
        def __init__(self):
            self.h = Variable(np.zeros(2))

    carry, W = Carry(), Variable(np.ones(2), name="W")

    def step(x):
        y = F.sum(W * x + carry.h)
        y.backward()  # no cleargrad: W.grad adds up, so the old one is read
        with dezero.no_grad():
            carry.h = F.tanh(W * x)
        return y

    traced = dezero.trace(step)
    for i in range(4):
        traced(np.full(2, i + 1.0))
    slots = {type(n.payload) for n in traced.graph.of_kind("state")}
    assert slots == {DataSlot, GradSlot, AttrSlot}
    for node in traced.graph.of_kind("state"):
        slot = node.payload
        assert slot.read() is not None and slot.read().shape == node.outputs[0].shape
    (attr,) = [n.payload for n in traced.graph.of_kind("state") if isinstance(n.payload, AttrSlot)]
    assert (attr.holder, attr.name, str(attr)) == (carry, "h", "Carry.h")
    attr.write(np.full(2, 7.0))
    np.testing.assert_array_equal(carry.h.data, 7.0)
    grad = GradSlot(W)
    grad.write(None)
    assert W.grad is None and grad.read() is None and str(grad) == ".grad of W"
    assert set(traced.graph.state) == {"W"}  # the data slots: name -> Variable


@pytest.mark.parametrize("fix", [
    lambda x: F.exp(x) - F.average(F.exp(x)),
    lambda x: F.exp(x) * F.exp(x)[0, 0],
    lambda x: F.exp(x) / F.max(F.abs(F.exp(x))),
    lambda x: F.reshape(x, (len(x), -1)) / 255,
    lambda x: x * 2.0 / 255 + np.zeros_like(x),
])
def test_the_fixes_the_trace_mode_page_gives_replay_like_eager(fix):
    rng = np.random.default_rng(5)
    side_by_side((fix, fix), lambda i: (f32(rng, 2, 3),))


def test_in_place_updates_reach_variables_sharing_the_array_like_eager():
    def make(online, steps):
        def step(x):
            h = F.tanh(online * x)
            copy = Variable(h.data)  # shares h's array
            h.data *= 2.0  # so the copy sees this
            online.data -= 0.1 * x
            steps.data += 1
            return copy + online * 1.0
        return step

    pairs = []
    for _ in range(2):
        online, steps = Variable(np.array([1.0, 2.0])), Variable(np.array(0))
        target = Variable(online.data)  # shares the array; the step never reads it
        pairs.append((online, steps, target))
    traced = side_by_side((make(*pairs[0][:2]), make(*pairs[1][:2])),
                          lambda i: (np.array([1.0, -1.0]) * (i + 1),),
                          state=[(a, b) for a, b in zip(pairs[0], pairs[1])])
    online, _, target = pairs[0]
    assert target.data is online.data
    assert "s[...] <- " in str(traced.graph) or "[...] <-" in str(traced.graph)


def test_in_place_into_an_array_shared_with_an_argument_raises():
    W = Variable(np.array([1.0, 2.0]), name="W")

    def step(x):
        W.data -= 0.5 * x
        return x * 1.0  # eager: x is W's array, already updated

    traced = dezero.trace(step)
    with pytest.raises(TraceError, match="W shares with an argument"):
        traced(W.data)


def test_reading_a_variable_that_shares_an_array_written_in_place_raises():
    online = Variable(np.array([1.0, 2.0]), name="online")
    target = Variable(online.data)  # shares the array; eager reads the updated one

    def step(x):
        online.data -= 0.1 * x
        return target * 1.0 + online

    with pytest.raises(TraceError, match="shares"):
        dezero.trace(step)(np.ones(2))


def test_arrays_shared_after_the_recording_with_state_written_in_place_retrace():
    def make(online, target):
        def step(x):
            y = x * 2.0
            online.data -= 0.5 * x
            return y + x * online + target * 1.0
        return step

    pairs = [(Variable(np.ones(2), name="online"), Variable(np.ones(2), name="target"))
             for _ in range(2)]
    traced, eager = dezero.trace(make(*pairs[0])), make(*pairs[1])
    for i in range(2):
        np.testing.assert_array_equal(traced(np.full(2, i + 1.0)).data,
                                      eager(np.full(2, i + 1.0)).data)
    for online, target in pairs:  # a target network synced by sharing the array
        target.data = online.data
    with pytest.raises(TraceError, match="shares"):
        traced(np.ones(2))
    pairs[0][1].data = pairs[0][1].data.copy()
    with pytest.raises(TraceError, match="shares"):
        traced(pairs[0][0].data)  # the state's own array as the argument


def test_a_view_of_state_written_in_place_passed_as_the_argument_raises():
    W = Variable(np.array([1.0, 2.0, 3.0]), name="W")

    def step(x):
        W.data -= 0.1 * x
        return x * 2.0  # eager: x is a view of W's array, already updated

    traced = dezero.trace(step)
    traced(np.ones(3)), traced(np.ones(3))
    with pytest.raises(TraceError, match="shares"):
        traced(W.data[::-1])  # a replay would read x before the write
    with pytest.raises(TraceError, match="shares"):
        dezero.trace(step)(W.data[::-1])  # and so would a recording's graph


def test_an_array_result_with_a_state_update_from_an_array_argument_replays():
    def make(W):
        def step(x):
            W.data = (W - x * 0.1).data  # W - (a guard): the guard becomes a Constant
            return x * 2.0  # an array result: a guard until the call returns
        return step

    W, W_eager = Variable(np.array([1.0, 2.0, 3.0])), Variable(np.array([1.0, 2.0, 3.0]))
    side_by_side((make(W), make(W_eager)), lambda i: (np.full(3, i + 1.0),),
                 state=[(W, W_eager)])


@pytest.mark.parametrize("arg", ["array", "Variable"])
def test_returning_data_of_a_computed_variable_replays_like_eager(arg):
    W = Variable(np.array([1.0, -2.0, 0.5]), name="W")

    def step(x):
        y = F.exp(x) * W
        return y.data, {"loss": F.sum(y).data}  # arrays, as the book's loops print them

    traced = dezero.trace(step)
    for i in range(3):
        x = np.full(3, i * 0.5)
        x = Variable(x) if arg == "Variable" else x
        (got, got_loss), (want, want_loss) = traced(x), step(x)
        assert type(got) is np.ndarray and type(got_loss["loss"]) is np.ndarray
        assert_replay_equal(got, want)
        assert_replay_equal(got_loss["loss"], want_loss["loss"])
    assert traced.entries == 1


def test_functions_receive_plain_arrays_when_given_guards():
    seen = []

    class Spy(Function):
        def forward(self, x, y):
            seen.append((type(x), type(y)))
            return x + y

    def f(x, t):
        h = F.exp(t)
        return Spy()(x, h.data)  # an array argument and a .data: both guards

    traced = dezero.trace(f)
    for i in range(3):
        x, t = np.full(2, float(i)), np.ones(2) * i
        np.testing.assert_array_equal(traced(x, t).data, x + np.exp(t))
    assert seen == [(np.ndarray, np.ndarray)] * 3  # recorded once, then replayed


def test_check_and_lower_work_with_in_place_updates():
    W = Variable(np.array([1.0, 2.0]), name="W")

    def step(x):
        loss = F.sum(W * x)
        W.cleargrad()
        loss.backward()
        W.data -= 0.5 * W.grad.data
        return loss

    graph = dezero.trace(step).lower(np.ones(2))
    np.testing.assert_array_equal(W.data, [1.0, 2.0])  # lowering steps nothing
    assert "W[...] <- " in str(graph)
    checked = dezero.trace(step, check=True)
    for i in range(3):
        checked(np.full(2, i + 1.0))
    np.testing.assert_allclose(W.data, [1.0 - 0.5 * 6, 2.0 - 0.5 * 6])


# =============================================================================
# Replays store no array the caller owns as a gradient or as state
# =============================================================================


def test_gradients_accumulated_through_one_reused_input_buffer_replay_like_eager():
    def run(trace):
        W = Variable(np.zeros(3, np.float32), name="W")

        def step(x):
            loss = F.sum(W * x)  # d loss / dW is x itself once x * 1 is simplified
            loss.backward()
            return loss

        step = dezero.trace(step) if trace else step
        buffer = np.empty(3, np.float32)  # micro-batches copied into one buffer
        for epoch in range(2):
            W.cleargrad()
            for batch in ([1, 2, 3], [10, 20, 30], [5, 5, 5]):
                buffer[...] = batch
                step(buffer)
        grad = W.grad.data.copy()
        buffer[...] = 0  # the caller's buffer, refilled: W.grad stays
        assert_replay_equal(W.grad.data, grad)
        return grad

    np.testing.assert_array_equal(run(False), [16, 27, 38])
    np.testing.assert_array_equal(run(True), [16, 27, 38])


def test_an_inputs_gradient_is_not_the_array_of_state():
    W = Variable(np.array([1.0, 2.0, 3.0], np.float32), name="W")

    @dezero.trace
    def step(x):
        loss = F.sum(W * x)
        loss.backward()
        return loss

    for _ in range(3):
        x = Variable(np.ones(3, np.float32))
        W.cleargrad()
        step(x)
        assert not np.shares_memory(x.grad.data, W.data)
        W.data -= 0.5 * W.grad.data  # the book's update leaves x.grad as it was
        np.testing.assert_array_equal(x.grad.data, [1, 2, 3])
        W.data[...] = [1, 2, 3]


# =============================================================================
# What a replay returns: new values, never the objects the caller holds
# =============================================================================


@pytest.mark.parametrize("returned", ["parameter", "unread"])
def test_returning_a_variable_made_before_the_call_raises_naming_the_rule(returned):
    # Eager code returns that very object (later updates of it show through);
    # a replay returned a copy, also of a Variable the run never read.
    model = dezero.layers.Linear(2, in_size=3)
    other = Variable(np.zeros(2, np.float32), name="other")

    def step(x):
        loss = F.sum(model(x))
        model.cleargrads()
        loss.backward()
        return loss, (model.W if returned == "parameter" else other)

    with pytest.raises(TraceError, match=r"returns (W|other), a Variable made before the "
                                         r"call[\s\S]*fix: return a new value"):
        dezero.trace(step)(Variable(np.ones((4, 3), np.float32)))


def test_a_function_returning_its_argument_returns_that_very_object_like_eager():
    # Dropout in test mode returns its input: eager code hands back the object passed
    # in, and so does a replay (it was refused as "a Variable made before the call").
    traced = dezero.trace(lambda x: F.dropout(x, 0.5))
    rng = np.random.default_rng(0)
    with dezero.test_mode():
        for i in range(4):
            x = Variable(f32(rng, 3, 2))
            assert traced(x) is x and F.dropout(x, 0.5) is x, f"call {i}"
    assert traced.entries == 1


def test_an_argument_returned_beside_new_values_keeps_its_gradient_like_eager():
    def step(x, a):
        loss = F.sum(x * x) * 0.5
        loss.backward()
        return {"x": x, "pair": (loss, a)}

    traced, rng = dezero.trace(step), np.random.default_rng(1)
    for i in range(4):
        data, a = f32(rng, 3), f32(rng, 2)
        x, x_eager = Variable(data), Variable(data.copy())
        got, want = traced(x, a), step(x_eager, a)
        assert got["x"] is x and got["pair"][1] is a and want["pair"][1] is a, f"call {i}"
        assert_replay_equal(got["pair"][0].data, want["pair"][0].data, err_msg=f"call {i}")
        assert_replay_equal(x.grad.data, x_eager.grad.data, err_msg=f"call {i}")
    assert traced.entries == 1
    with_check = dezero.trace(step, check=True)
    x = Variable(f32(rng, 3))
    assert with_check(x, a)["x"] is x and with_check(x, a)["x"] is x


def test_a_saved_graph_returning_its_argument_returns_what_it_is_given(tmp_path):
    x = Variable(np.ones(3, np.float32))
    graph = dezero.trace(lambda x, y: (x, F.exp(y))).lower(x, np.zeros(2, np.float32))
    graph.save(str(tmp_path / "g"))
    loaded = dezero.static.load(str(tmp_path / "g"))
    y = np.arange(2, dtype=np.float32)
    for run in (graph, loaded):
        got = run(x, y)
        assert got[0] is x
        np.testing.assert_allclose(got[1].data, np.exp(y), rtol=1e-6)


def test_returning_a_new_value_of_a_parameter_replays_like_eager():
    W, W_eager = Variable(np.ones(3), name="W"), Variable(np.ones(3), name="W")

    def make(W):
        def step(x):
            with dezero.no_grad():
                W.data = (W - x).data
            return W * 1.0  # the fix the error gives
        return step

    side_by_side((make(W), make(W_eager)), lambda i: (Variable(np.full(3, i + 0.5)),),
                 state=[(W, W_eager)])


class LoggingNet(dezero.models.Model):
    def __init__(self):
        super().__init__()
        self.fc, self.sizes = dezero.layers.Linear(2, in_size=3), []

    def forward(self, x):
        self.sizes.append(len(x))  # Python state: a replay runs no Python
        return self.fc(x)


def test_a_list_a_model_appends_to_in_forward_raises_naming_it():
    model = LoggingNet()
    traced = dezero.trace(lambda x: model(x))
    traced(np.ones((2, 3), np.float32))
    with pytest.raises(TraceError, match=r"model\.sizes changed \(1 -> 2 items\)"):
        traced(np.ones((2, 3), np.float32))


@pytest.mark.parametrize("mutation", ["list.append", "list item", "list.pop", "dict new key",
                                      "dict key renamed"])
@pytest.mark.parametrize("nested", [False, True], ids=["argument", "inside an argument"])
def test_a_container_argument_the_step_changes_raises_at_once(mutation, nested):
    # The step runs on a copy of a container argument, so even the first call would
    # lose the change (eager: log grows at every call).
    renamed = ({"a": 1.0}, lambda log, n: log.__setitem__(f"b{n}", log.pop("a")))
    log, mutate = renamed if mutation == "dict key renamed" else _mutations()[mutation]
    arg = {"log": log} if nested else log

    def step(x, arg):
        mutate(arg["log"] if nested else arg, len(x))
        return F.exp(x)

    traced = dezero.trace(step)
    with pytest.raises(TraceError, match=r"changes its argument arg(\['log'\])? .*test_trace_"
                                         r"contract.py:\d+, `traced\(np.ones\(3\), arg\)`"
                                         r"[\s\S]*fix: "):
        traced(np.ones(3), arg)


def test_a_container_argument_only_read_replays():
    scales = [np.float64(2.0)]
    traced = dezero.trace(lambda x, scales: F.exp(x) * scales[0])
    for _ in range(3):
        np.testing.assert_array_equal(traced(np.ones(3), scales).data, np.exp(np.ones(3)) * 2.0)
    assert traced.entries == 1 and scales == [2.0]
