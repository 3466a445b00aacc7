"""Common idioms replay like eager: clearing gradients first, traced methods,
arguments that carry a gradient, carried state however the model is reached."""
import gc
import sys
import types
import weakref

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable, models, optimizers, schedules
from dezero import layers as L
from dezero.static import TraceError


def twins(make, example):
    a, b = make(), make()
    with dezero.no_grad(), dezero.test_mode():
        a(example), b(example)
    for pa, pb in zip(a.params(), b.params()):
        pb.data = pa.data.copy()
    return a, b


def recordings(err):
    return sum(line.startswith(("trace ", "retrace ")) for line in err.splitlines())


@pytest.mark.parametrize("make_opt", [lambda: optimizers.SGD(0.1),
                                      lambda: optimizers.Adam(0.01)], ids=["SGD", "Adam"])
def test_clearing_gradients_first_replays_after_one_recording(make_opt, capsys):
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 3, 8))
               for _ in range(6)]
    a, b = twins(lambda: models.MLP((10, 3)), batches[0][0])

    def make(model, optimizer):
        def step(x, t):
            model.cleargrads()  # zero_grad first, as in PyTorch
            loss = F.softmax_cross_entropy(model(x), t)
            loss.backward()
            optimizer.update()
            return loss
        return step

    eager = make(a, make_opt().setup(a))
    traced = dezero.trace(make(b, make_opt().setup(b)))
    with dezero.static.debug(1):
        for x, t in batches:
            np.testing.assert_allclose(traced(x, t).data, eager(x, t).data, rtol=1e-5)
            for pa, pb in zip(a.params(), b.params()):
                np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(pb.grad.data, pa.grad.data, rtol=1e-5, atol=1e-6)
    assert recordings(capsys.readouterr().err) == 1 and traced.entries == 1


def test_clearing_gradients_of_single_variables_first_replays_after_one_recording(capsys):
    # The book's steps 40-45: W.cleargrad(); b.cleargrad() before backward().
    def make(W, b):
        def step(x, y):
            W.cleargrad()
            b.cleargrad()
            loss = F.mean_squared_error(F.matmul(x, W) + b, y)
            loss.backward()
            W.data -= 0.1 * W.grad.data
            b.data -= 0.1 * b.grad.data
            return loss
        return step

    rng = np.random.default_rng(0)
    pairs = [(Variable(np.zeros((2, 1))), Variable(np.zeros(1))) for _ in range(2)]
    eager, traced = make(*pairs[0]), dezero.trace(make(*pairs[1]))
    with dezero.static.debug(1):
        for _ in range(12):
            x = rng.standard_normal((10, 2))
            y = x @ np.array([[2.0], [-1.0]]) + 0.5
            np.testing.assert_allclose(traced(x, y).data, eager(x, y).data, rtol=1e-6)
            for a, b in zip(*pairs):
                np.testing.assert_allclose(b.data, a.data, rtol=1e-6)
                np.testing.assert_allclose(b.grad.data, a.grad.data, rtol=1e-6)
    assert recordings(capsys.readouterr().err) == 1 and traced.entries == 1


def test_training_step_records_once_on_its_first_call(capsys):
    model = models.MLP((10, 3))
    optimizer = optimizers.MomentumSGD(0.1).setup(model)

    @dezero.trace
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    x, t = np.ones((4, 2), np.float32), np.array([0, 1, 2, 0])
    with dezero.static.debug(1):
        for _ in range(4):
            step(x, t)
    assert recordings(capsys.readouterr().err) == 1


def test_a_gradient_read_before_clearing_still_retraces():
    # update() first reads the gradients of the previous call: the first recording,
    # which saw none, cannot replay once they are set.
    a, b = twins(lambda: models.MLP((3,)), np.ones((2, 2), np.float32))

    def make(model, optimizer):
        def step(x):
            optimizer.update()
            model.cleargrads()
            loss = F.sum(model(x) ** 2)
            loss.backward()
            return loss
        return step

    eager = make(a, optimizers.SGD(0.1).setup(a))
    traced = dezero.trace(make(b, optimizers.SGD(0.1).setup(b)))
    for i in range(4):
        x = np.full((2, 2), 0.1 * i, np.float32)
        np.testing.assert_allclose(traced(x).data, eager(x).data, rtol=1e-5)
        for pa, pb in zip(a.params(), b.params()):
            np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5)


class TwoHeads(models.Model):
    def __init__(self, built):
        super().__init__()
        size = 4 if built else None  # lazy: a head's parameters exist once it runs
        self.body, self.a, self.b = L.Linear(4), L.Linear(2, in_size=size), \
            L.Linear(3, in_size=size)

    def forward(self, x, head):
        return getattr(self, head)(F.tanh(self.body(x)))


def same_parameters(a, b, call):
    for (name, pa), (_, pb) in zip(a._named(), b._named()):
        assert (pa.data is None) == (pb.data is None), f"{name} after call {call}"
        if pa.data is not None:
            np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} after call {call}")
        assert (pa.grad is None) == (pb.grad is None), f"{name}.grad after call {call}"
        if pa.grad is not None:
            np.testing.assert_allclose(pb.grad.data, pa.grad.data, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}.grad after call {call}")


@pytest.mark.parametrize("built", [True, False], ids=["built", "lazy"])
def test_cleargrads_clears_the_gradient_of_a_head_this_call_does_not_use(built):
    # Eager cleargrads() sets every .grad to None; a replay of head a's graph left
    # head b's gradient of the call before, which the update outside applied again.
    a, b = TwoHeads(built), TwoHeads(built)
    rng = np.random.default_rng(0)
    with dezero.no_grad():
        for net in (a, b):
            net(np.zeros((1, 3), np.float32), "a")
    for pa, pb in zip(a.params(), b.params()):
        pb.data = pa.data.copy() if pa.data is not None else None
    keep, keep_eager = (Variable(np.ones(2, np.float32)) for _ in range(2))
    for var in (keep, keep_eager):
        var.grad = Variable(np.full(2, 5.0, np.float32))  # never cleared: kept

    def make(model):
        def step(x, head):
            model.cleargrads()
            loss = F.sum(model(x, head) ** 2)
            loss.backward()
            return loss
        return step

    eager, traced = make(a), dezero.trace(make(b), static_argnames="head")
    opt_eager, opt = optimizers.MomentumSGD(0.1).setup(a), optimizers.MomentumSGD(0.1).setup(b)
    for i, head in enumerate(["a", "b", "a", "a", "b", "a", "b"]):
        x = rng.standard_normal((5, 3)).astype(np.float32)
        np.random.seed(i)  # a lazy head draws its weights on its first call
        got = traced(x, head)
        np.random.seed(i)
        np.testing.assert_allclose(got.data, eager(x, head).data, rtol=1e-5)
        same_parameters(a, b, i)
        opt_eager.update(), opt.update()  # outside the traced step
        same_parameters(a, b, i)
    np.testing.assert_array_equal(keep.grad.data, keep_eager.grad.data)
    assert traced.entries <= 3


class LazyScale(L.Layer):
    """The book's lazy initialisation, in a layer of the user's: W has no .data until
    the first call, and nothing else of the layer changes when it gets one."""

    def __init__(self):
        super().__init__()
        self.W = dezero.Parameter(None, name="W")

    def forward(self, x):
        if self.W.data is None:
            self.W.data = np.full(x.shape[1:], 0.5, np.float32)
        return x * self.W


def test_cleargrads_clears_the_gradient_of_a_parameter_built_after_the_recording():
    # The recording cleared a .grad of a parameter without .data; built and given a
    # gradient by eager code later, the parameter kept it through the replay.
    def make():
        model = models.Model()
        model.body, model.head = L.Linear(3, in_size=2), LazyScale()
        return model

    a, b = make(), make()
    b.body.W.data = a.body.W.data.copy()

    def step(model, x):
        model.cleargrads()
        loss = F.sum(model.body(x) ** 2)
        loss.backward()
        return loss

    traced = dezero.trace(lambda x: step(b, x))
    rng = np.random.default_rng(2)
    for i in range(4):
        x = rng.standard_normal((4, 2)).astype(np.float32)
        np.testing.assert_allclose(traced(x).data, step(a, x).data, rtol=1e-5)
        same_parameters(a, b, i)
        for net in (a, b):  # eager code that builds the head and leaves it a gradient
            F.sum(net.head(net.body(x))).backward()
    assert traced.entries == 1  # the graph that clears head.W.grad replaced the first


def test_cleargrads_clears_the_gradient_of_a_frozen_part_set_between_calls():
    # The backbone runs under no_grad: the traced step reads it but gives it no
    # gradient. A gradient set between calls (pretraining it eagerly) was left by the
    # replay, and the update outside moved the frozen backbone with it.
    a, b = twins(lambda: models.MLP((4, 2)), np.ones((1, 3), np.float32))
    rng = np.random.default_rng(1)

    def make(model):
        def step(x):
            model.cleargrads()
            with dezero.no_grad():
                h = F.relu(model.l0(x))
            loss = F.sum(model.l1(h) ** 2)
            loss.backward()
            return loss
        return step

    eager, traced = make(a), dezero.trace(make(b))
    opts = optimizers.SGD(0.05).setup(a), optimizers.SGD(0.05).setup(b)
    for i in range(5):
        x = rng.standard_normal((4, 3)).astype(np.float32)
        for net in (a, b):  # an eager pass that leaves the backbone a gradient
            F.sum(net(x)).backward()
        np.testing.assert_allclose(traced(x).data, eager(x).data, rtol=1e-5)
        same_parameters(a, b, i)
        for opt in opts:
            opt.update()
        same_parameters(a, b, i)
    assert traced.entries == 1


class Scaled:
    def __init__(self, w):
        self.w = Variable(np.array(w, np.float32))

    @dezero.trace
    def __call__(self, x):
        return x * self.w


def test_traced_method_has_one_cache_per_instance_held_weakly():
    x = np.ones(3, np.float32)
    one, two = Scaled(2.0), Scaled(3.0)
    for _ in range(3):
        np.testing.assert_allclose(one(x).data, 2.0)
        np.testing.assert_allclose(two(x).data, 3.0)
    assert one.__call__.entries == 1 and two.__call__.entries == 1
    assert one.__call__ is one.__call__ and Scaled.__call__.entries == 0
    gone = weakref.ref(one)
    del one
    gc.collect()
    assert gone() is None and two(x).data[0] == 3.0


class SelfTraining(models.Model):
    """A model that trains itself: its optimizer (which the step reads) refers back
    to it, so the graphs' guards do too."""

    def __init__(self):
        super().__init__()
        self.fc = L.Linear(2, in_size=3)
        self.optimizer = optimizers.MomentumSGD(0.1).setup(self)

    @dezero.trace
    def step(self, x, t):
        loss = F.mean_squared_error(self.fc(x), t)
        self.cleargrads()
        loss.backward()
        self.optimizer.update()
        return loss


def test_a_traced_method_whose_graphs_refer_back_to_the_instance_frees_it():
    x, t = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    model = SelfTraining()
    for _ in range(3):
        model.step(x, t)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_a_copied_model_with_a_traced_method_traces_on_its_own():
    import copy

    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((4, 3)).astype(np.float32), np.zeros((4, 2), np.float32)
    model = SelfTraining()
    model.step(x, t), model.step(x, t)
    twin, eager = copy.deepcopy(model), copy.deepcopy(model)
    for _ in range(3):
        np.testing.assert_allclose(twin.step(x, t).data,
                                   SelfTraining.step.fn(eager, x, t).data, rtol=1e-6)
    np.testing.assert_allclose(twin.fc.W.data, eager.fc.W.data, rtol=1e-6)
    assert not np.array_equal(twin.fc.W.data, model.fc.W.data)  # the copy trained alone


def test_variable_argument_with_a_gradient_accumulates_like_eager():
    def value_and_grad(x):
        y = F.sum(x * x * x)
        y.backward()  # adds to x.grad when it is set, as eager does
        return y

    traced = dezero.trace(value_and_grad)
    xe = Variable(np.array([1.0, -2.0, 0.5], np.float32))
    xt = Variable(xe.data.copy())
    for i in range(4):
        ye, yt = value_and_grad(xe), traced(xt)
        np.testing.assert_allclose(yt.data, ye.data, rtol=1e-6)
        np.testing.assert_allclose(xt.grad.data, xe.grad.data, rtol=1e-6)
        xe.data = xe.data + 0.25  # a new value, the gradient kept
        xt.data = xt.data + 0.25
    assert traced.entries == 2  # without, then with a gradient to add to


# ---- carried state, however the model is reached ------------------------------------


class Recurrent(models.Model):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = L.RNN(4), L.Linear(1)

    def forward(self, x):
        return self.fc(self.rnn(x))


class HolderClass:
    net = None


HUGE = [object() for _ in range(30000)]  # more objects than any search cap
holder_module = types.ModuleType("holder_module")
in_dict, in_list = {}, []


def reach_module(net):
    holder_module.net = net
    return lambda x: holder_module.net(x)


def reach_class(net):
    HolderClass.net = net
    return lambda x: HolderClass.net(x)


def reach_dict(net):
    in_dict["net"] = net
    return lambda x: in_dict["net"](x)


def reach_list(net):
    in_list[:] = [net]
    return lambda x: in_list[0](x)


def reach_behind_huge_globals(net):
    in_dict["late"] = (HUGE, net)  # a search walks the 30,000 objects first
    return lambda x: in_dict["late"][1](x)


@pytest.mark.parametrize("reach", [reach_module, reach_class, reach_dict, reach_list,
                                   reach_behind_huge_globals])
def test_carried_state_is_found_however_the_model_is_reached(reach):
    rng = np.random.default_rng(3)
    a, b = twins(Recurrent, np.zeros((1, 1), np.float32))
    a.rnn.reset_state(), b.rnn.reset_state()
    forward = reach(b)

    def make(model_call):
        def window(x):
            with dezero.no_grad():
                return model_call(x)
        return window

    eager, traced = make(a), dezero.trace(make(forward))
    for _ in range(5):
        x = rng.standard_normal((1, 1)).astype(np.float32)
        np.testing.assert_allclose(traced(x).data, eager(x).data, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.rnn.h.data, a.rnn.h.data, rtol=1e-5, atol=1e-6)
    assert traced.entries == 1


class Memory:
    """Carried state on a plain object (not a Layer), reached only by the search."""
    h = None


BEHIND = (HUGE, Memory())  # a search walks the 30,000 objects first


def test_carried_state_on_a_plain_object_behind_many_globals():
    def step(x):
        memory = BEHIND[1]
        h = x * 1.0 if memory.h is None else memory.h * 0.5 + x
        memory.h = h
        return h * 1.0

    traced = dezero.trace(step)
    eager_h = None
    with dezero.no_grad():
        for i in range(5):
            x = Variable(np.full(2, float(i), np.float32))
            eager_h = x.data if eager_h is None else eager_h * 0.5 + x.data
            np.testing.assert_allclose(traced(x).data, eager_h, rtol=1e-6)
            assert len(HUGE) == 30000


def test_carried_state_kept_in_a_dict_or_list_is_an_error():
    state = {}
    history = []

    def in_dict(x):
        state["h"] = x * 2.0
        return state["h"]

    def in_list(x):
        y = x * 2.0
        history.append(y)
        return y

    for f in (in_dict, in_list):
        with pytest.raises(TraceError, match="computed in the traced run"):
            dezero.trace(f)(Variable(np.ones(2, np.float32)))


def test_user_modules_are_searched_and_libraries_are_not():
    from dezero.static.reach import is_user_module
    assert is_user_module(sys.modules[__name__]) and is_user_module(holder_module)
    assert not is_user_module(np) and not is_user_module(dezero) and not is_user_module(sys)


class Slotted:
    __slots__ = ("h",)  # no __dict__: no search can read it


def test_carried_state_the_search_cannot_reach_is_an_error_not_a_silent_skip():
    def in_closure():
        h = None

        def step(x):
            nonlocal h
            h = x * 2.0 if h is None else h * 0.5 + x
            return h * 1.0
        return step

    slot = Slotted()
    slot.h = None

    def in_slot(x):
        slot.h = x * 2.0 if slot.h is None else slot.h * 0.5 + x
        return slot.h * 1.0

    for step, holder in ((in_closure(), "cell"), (in_slot, "Slotted")):
        with pytest.raises(TraceError, match=rf"\(f32\[2\] from mul at .*\) is still held "
                                             f"after the call by .*{holder}.* "
                                             f"that the tracer cannot reach"):
            dezero.trace(step)(Variable(np.ones(2, np.float32)))


def test_results_kept_by_the_caller_are_not_carried_state():
    traced = dezero.trace(lambda x: F.exp(x) * 2.0)
    kept = [traced(Variable(np.full(2, float(i), np.float32))) for i in range(3)]
    np.testing.assert_allclose(kept[2].data, np.exp(2.0) * 2.0, rtol=1e-6)
    assert traced.entries == 1


def test_the_layers_observer_belongs_to_the_recording_thread():
    import threading
    seen = []
    previous = L.set_observer("recording")
    try:
        thread = threading.Thread(target=lambda: seen.append(L.observer()))
        thread.start()
        thread.join()
        assert L.observer() == "recording" and seen == [None]
    finally:
        L.set_observer(previous)


class RunningSum(L.Layer):
    """Carries a Variable it computed to the next call, and updates it there."""

    def __init__(self, in_place):
        super().__init__()
        self.in_place, self.total = in_place, None

    def forward(self, x):
        if self.total is None:
            self.total = x * 1.0
        elif self.in_place:
            self.total.data += x.data  # the book's idiom, on carried state
        else:
            self.total.data = (self.total + x).data
        return self.total * 2.0


@pytest.mark.parametrize("check", [False, True], ids=["", "check"])
@pytest.mark.parametrize("in_place", [True, False], ids=["+=", "= new"])
def test_carried_state_updated_through_data_replays_like_eager(in_place, check):
    a, b = RunningSum(in_place), RunningSum(in_place)
    traced = dezero.trace(lambda x: a(x), check=check)
    for i in range(5):
        x = Variable(np.full(3, i + 1.0, np.float32))
        np.testing.assert_array_equal(traced(x).data, b(x).data)
        np.testing.assert_array_equal(a.total.data, b.total.data)


def rate_step(spelling, model, optimizer):
    def step(x):
        model.cleargrads()
        loss = F.sum(model(x) ** 2)
        if spelling == "branch" and optimizer.lr < 0.07:  # Python control flow on it
            loss = loss * 0.5
        loss.backward()
        if spelling == "by hand":  # the book's update
            for p in model.params():
                p.data -= optimizer.lr * p.grad.data
            return loss
        optimizer.update()
        return (loss, optimizer.lr) if spelling == "returned" else loss
    return step


@pytest.mark.parametrize("spelling", ["returned", "by hand", "branch"])
def test_a_learning_rate_read_as_a_number_follows_a_schedule_like_eager(spelling, capsys):
    # opt.lr is a Python number: the graph held the first call's value (returned,
    # multiplied or branched on) while the schedule halved the rate, in silence.
    a, b = twins(lambda: models.MLP((4, 2)), np.ones((1, 3), np.float32))
    opts = [optimizers.SGD(0.1).setup(net) for net in (a, b)]
    decays = [schedules.StepDecay(opt, step_size=1, gamma=0.5) for opt in opts]
    eager, traced = rate_step(spelling, a, opts[0]), dezero.trace(rate_step(spelling, b, opts[1]))
    rng = np.random.default_rng(3)
    with dezero.static.debug(1):
        for epoch in range(4):
            for i in range(3):
                x = rng.standard_normal((5, 3)).astype(np.float32)
                got, want = traced(x), eager(x)
                if spelling == "returned":
                    assert got[1] == want[1] == opts[0].lr, f"epoch {epoch}"
                    got, want = got[0], want[0]
                np.testing.assert_allclose(got.data, want.data, rtol=1e-5, atol=1e-6)
                same_parameters(a, b, f"{i} of epoch {epoch}")
            for decay in decays:
                decay.step()
    err = capsys.readouterr().err
    assert recordings(err) == 4 and "SGD.lr 0.1 -> 0.05" in err and traced.entries == 1


def test_a_learning_rate_only_the_optimizer_reads_never_retraces(capsys):
    model = models.MLP((4, 2))
    optimizer = optimizers.Adam(0.01).setup(model)
    decay = schedules.StepDecay(optimizer, step_size=1, gamma=0.5)
    traced = dezero.trace(rate_step("update", model, optimizer))
    with dezero.static.debug(1):
        for _ in range(3):
            traced(np.ones((2, 3), np.float32))
            decay.step()
    assert recordings(capsys.readouterr().err) == 1
