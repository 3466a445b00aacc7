"""A traced optimizer step writes the new parameters and moments over the old arrays
(lowering._into, kernels/outputs.py) where nobody but the replay holds them, and
gives the state new arrays, as eager code always does, where someone else holds
them: an array kept, a view of it, or a state that is itself a view of other memory.
Every replay equals eager execution of the same steps."""
import threading

import numpy as np
import pytest
from train_helpers import training_step

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.errors import TraceError
from dezero.kernels import cpu, outputs
from dezero.models import MLP

pytestmark = pytest.mark.skipif(cpu.missing_reason() is not None,
                                reason=str(cpu.missing_reason()))

# 300 x 256 weights: above horizontal.MAX_SEGMENT, so each update is a kernel of its
# own (a horizontal kernel's outputs are always new arrays).
X = np.random.default_rng(0).standard_normal((8, 300)).astype(np.float32)
T = np.arange(8) % 3


def models_and_steps():
    """(eager model, eager step), (traced model, its optimizer, its compiled plan), from
    one init, each step run once (the traced one recorded)."""
    pairs = []
    for _ in range(2):
        np.random.seed(0)
        model = MLP((256, 3), activation=F.relu)
        model(X[:1])  # the weights, from the seed
        pairs.append((model, optimizers.Adam(0.01).setup(model)))
    (eager, eager_optimizer), (model, optimizer) = pairs
    eager_step = training_step(eager, eager_optimizer)
    traced = training_step(model, optimizer, traced=True)
    traced(X, T)  # records, and runs eagerly
    eager_step(X, T)
    return eager, eager_step, model, optimizer, traced.graph.compile("cpu").wait()


def state_of(model, optimizer):
    W = model.l0.W
    return [W.data, optimizer.ms[W].data, optimizer.vs[W].data]


def assert_equal_models(a, b):
    for p, q in zip(a.params(), b.params()):
        np.testing.assert_allclose(p.data, q.data, rtol=1e-6, atol=1e-7)


def test_the_update_writes_over_the_parameter_and_its_moments():
    eager, eager_step, model, optimizer, plan = models_and_steps()
    assert "into model_l0_W's array" in plan.source
    assert "into optimizer_ms_l0_W's array" in plan.source
    # small states (the step count, the last layer's) get buffers of the pool
    assert "into optimizer_t's array" not in plan.source and "into model_l1_W's" not in plan.source
    for _ in range(4):
        ids = [id(a) for a in state_of(model, optimizer)]
        plan(X, T)
        eager_step(X, T)
        assert [id(a) for a in state_of(model, optimizer)] == ids
        assert_equal_models(model, eager)


@pytest.mark.parametrize("keep", ["array", "view", "moment"])
def test_an_array_someone_kept_keeps_its_values(keep):
    eager, eager_step, model, optimizer, plan = models_and_steps()
    W = model.l0.W
    kept = {"array": lambda: W.data, "view": lambda: W.data[3:5],
            "moment": lambda: optimizer.ms[W].data}[keep]()
    snapshot = kept.copy()
    plan(X, T)
    eager_step(X, T)
    np.testing.assert_array_equal(kept, snapshot)
    assert not any(np.shares_memory(kept, a) for a in state_of(model, optimizer))
    assert_equal_models(model, eager)
    del kept  # nobody holds the old arrays now: the updates write in place again
    plan(X, T)
    eager_step(X, T)
    ids = [id(a) for a in state_of(model, optimizer)]
    plan(X, T)
    eager_step(X, T)
    assert [id(a) for a in state_of(model, optimizer)] == ids
    assert_equal_models(model, eager)


def test_a_parameter_that_views_other_memory_is_never_written():
    eager, eager_step, model, optimizer, plan = models_and_steps()
    W = model.l0.W
    memory = np.zeros((2, *W.shape), np.float32)
    memory[1] = W.data
    W.data = memory[1]  # the user's own buffer: eager code would leave it alone
    snapshot = memory.copy()
    for _ in range(2):
        plan(X, T)
        eager_step(X, T)
        np.testing.assert_array_equal(memory, snapshot)
    assert not np.shares_memory(W.data, memory)
    assert_equal_models(model, eager)


def test_the_count_of_the_replays_own_references_is_measured():
    # the state's slot, the replay's name, the call's argument and out tuples, the
    # check's own: what this interpreter counts for them
    assert 4 <= outputs.REPLAY_REFS <= 6

    class Slot:
        pass
    slot, extra = Slot(), []
    slot.data = np.zeros(3)
    name = slot.data

    def kernel(*arrays, out=None):
        return outputs.writable(out)
    assert kernel(name, out=(name,))[0] is name
    extra.append(name)  # someone else holds it now
    assert kernel(name, out=(name,)) == [None]


def eager_and_replayed(body, keep=lambda model: [], steps=3):
    """[eager, replayed]: (parameters, Q, what keep returned) after each of `steps`
    steps from one init, eager and replayed by a compiled plan. body(model,
    optimizer, Q) ends each step after backward (Q: a captured Variable of l0.W's
    shape); keep(model), called before each step: the arrays a user holds through it."""
    runs = []
    for traced in (False, True):
        np.random.seed(0)
        model = MLP((256, 3), activation=F.relu)
        model(X[:1])
        optimizer = optimizers.SGD(0.01).setup(model)
        Q = Variable(np.zeros(model.l0.W.shape, np.float32))

        def step(x, t, model=model, optimizer=optimizer, Q=Q):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            body(model, optimizer, Q)
            return loss
        if traced:
            recorder = dezero.trace(step)
            recorder(X, T)
            step = recorder.graph.compile("cpu").wait()
        else:
            step(X, T)
        run = []
        for _ in range(steps):
            kept = keep(model)
            step(X, T)
            run.append(([p.data.copy() for p in model.params()], Q.data.copy(), kept))
        runs.append(run)
    return runs


def assert_same_runs(eager, replayed):
    for (params, Q, kept), (params_r, Q_r, kept_r) in zip(eager, replayed, strict=True):
        for a, b in zip([*params, Q, *kept], [*params_r, Q_r, *kept_r], strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def test_a_full_write_of_other_state_from_a_parameter_copies_its_old_values():
    # Q.data[...] = W.data runs last in the replay (after every reader of Q's
    # array); the update of W must not have written its new values over W's old
    # array by then
    def body(model, optimizer, Q):
        Q.data[...] = model.l0.W.data
        optimizer.update()
    eager, replayed = eager_and_replayed(body)
    assert_same_runs(eager, replayed)
    (params, Q, _), = replayed[-1:]
    assert not np.allclose(Q, params[0])  # Q holds the weights before the update


def test_an_in_place_write_after_a_new_array_writes_into_the_new_array():
    # p.data = new; p.data *= c: eager code multiplies the new array, and an array
    # someone kept of the old one keeps its values (as does a Variable first read
    # after it got a new array)
    def body(model, optimizer, Q):
        optimizer.update()
        for p in model.params():
            p.data *= 0.5
        Q.data = (model.l0.W * 2).data
        Q.data *= 0.5
    eager, replayed = eager_and_replayed(body, keep=lambda m: [m.l0.W.data, m.l1.b.data])
    assert_same_runs(eager, replayed)


def test_a_new_array_after_an_in_place_write_is_refused():
    # eager code leaves the in-place result in the old array and gives the state the
    # new one; a replay would write only one of them
    W = Variable(np.ones((3, 2), np.float32), name="W")

    @dezero.trace
    def decay_then_update(x):
        W.data *= 0.9
        W.data = (W - x).data
    with pytest.raises(TraceError, match=r"W.data gets a new array after an in-place.*\n  fix"):
        decay_then_update(np.ones((3, 2), np.float32))


def test_an_array_read_before_its_variable_gets_a_new_one_keeps_the_old_value():
    # Nesterov momentum as cs231n writes it: v_prev = v.data, read before the run
    # reads v any other way, stands for v's value before the new array
    def body(model, optimizer, Q):
        v, W = Q, model.l0.W
        v_prev = v.data
        v.data = (v * 0.9 - 0.01 * W.grad).data
        W.data = (W - 0.9 * v_prev + 1.9 * v).data
    eager, replayed = eager_and_replayed(body, keep=lambda m: [m.l0.W.data])
    assert_same_runs(eager, replayed)



def test_while_other_threads_run_the_kernel_counts_the_references_itself():
    # another thread may take W.data at any bytecode: the kernel counts the references
    # of the arrays it would write over as it starts, holding the GIL from that count
    # until it is done, so that an array the other thread took keeps its values, and
    # one that nobody took is still written over
    eager, eager_step, model, optimizer, plan = models_and_steps()
    taken, turn, done = [], threading.Event(), threading.Event()

    def take():
        while not done.is_set():
            if turn.wait(0.01):
                turn.clear()
                taken.append((model.l0.W.data, model.l0.W.data.copy()))
    other = threading.Thread(target=take)
    other.start()
    try:
        ids = [id(a) for a in state_of(model, optimizer)]
        plan(X, T)
        eager_step(X, T)
        assert [id(a) for a in state_of(model, optimizer)] == ids  # nobody took them
        turn.set()
        while turn.is_set():
            other.join(0.001)
        plan(X, T)
        eager_step(X, T)
    finally:
        done.set()
        other.join()
    (array, values), = taken
    np.testing.assert_array_equal(array, values)
    assert not np.shares_memory(array, model.l0.W.data)
    assert_equal_models(model, eager)
