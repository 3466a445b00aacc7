"""The replay backends: memory, aliasing of what a replay returns, the backend
registry, and the reference interpreter against the replay code and eager."""
import ast
import inspect
import sys
import tracemalloc

import numpy as np
import pytest
from backend_helpers import assert_replay_equal, python_code

import dezero
import dezero.functions as F
from dezero import Function, Variable, models, optimizers
from dezero import layers as L
from dezero.static import backends, horizontal, passes

# =============================================================================
# Memory: each intermediate is freed after its last use
# =============================================================================


def chain(x):
    y = x
    for _ in range(6):
        y = F.tanh(y * 0.5)
    return y


def peak_bytes(fn):
    """Most memory fn holds at once beyond what it started with (a first call makes
    the arrays it leaves behind visible to tracemalloc, so their frees count)."""
    tracemalloc.start()
    try:
        fn()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_replay_frees_each_intermediate_after_its_last_use():
    x = Variable(np.random.default_rng(0).standard_normal(10 ** 6).astype(np.float32))
    traced = dezero.trace(chain)
    traced(x)
    for _ in range(3):  # 12 ops: holding every intermediate would peak at 12 arrays
        assert_replay_equal(traced(x).data, chain(x).data)  # kernels if in the cache
        assert peak_bytes(lambda: traced(x)) < 3.5 * x.data.nbytes
    assert "del " in python_code(traced.graph)


@pytest.mark.skipif(backends.DEFAULT == "interpreter",
                    reason="the interpreter keeps every value: the reference, not the fast path")
def test_replay_stores_each_new_state_array_as_soon_as_it_is_computed():
    rng = np.random.default_rng(1)
    params = [Variable(rng.standard_normal(10 ** 6).astype(np.float32)) for _ in range(4)]
    twins = [Variable(p.data.copy()) for p in params]

    def make_step(params):
        def step(lr):
            with dezero.no_grad():
                for p in params:
                    p.data = (p - lr * p).data
        return step

    eager, traced = make_step(twins), dezero.trace(make_step(params))
    traced(0.5), eager(0.5)
    for _ in range(3):  # the same static lr: replays
        # Eager code frees each old parameter as it assigns the new one; so must
        # the replay (4 new arrays held until the end would peak at 5 arrays).
        peak = peak_bytes(lambda: traced(0.5))  # two calls
        eager(0.5), eager(0.5)
        for p, q in zip(params, twins):
            np.testing.assert_array_equal(p.data, q.data)
    assert peak < 2.5 * params[0].data.nbytes


# =============================================================================
# Backends: chosen by name, one interface
# =============================================================================


class Doubled(Function):
    """y = 2 x, its forward returning a tuple of one array (the book's `return y,`)."""

    def forward(self, x):
        return (x * 2.0,)

    def backward(self, gy):
        return gy * 2.0


@pytest.mark.parametrize("backend", ["interpreter", "python", "cpu"])
def test_a_forward_returning_a_tuple_of_one_array_replays_that_array(backend):
    # eager code takes the tuple's array for the one output; the replay code bound the
    # tuple itself, and the next op met a (1, 2, 3) array
    def f(x):
        y = Doubled()(x)
        y = F.exp(Doubled()(y * 0.5)) * y
        y.backward()
        return y, x.grad

    rng = np.random.default_rng(0)
    x = Variable(rng.standard_normal((2, 3)).astype(np.float32))
    graph = dezero.trace(f).lower(x)
    plan = graph.compile(backend).wait()
    for _ in range(2):
        x = Variable(rng.standard_normal((2, 3)).astype(np.float32))
        for got, want in zip(plan(x), f(Variable(x.data)), strict=True):
            assert got.shape == want.shape == (2, 3)
            np.testing.assert_allclose(got.data, want.data, rtol=1e-6 * (backend == "cpu"))


def test_backends_are_chosen_by_name_and_give_the_same_result():
    W = Variable(np.arange(6, dtype=np.float32).reshape(3, 2))
    graph = dezero.trace(lambda x: F.tanh(F.matmul(x, W))).lower(np.ones((4, 3), np.float32))
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    # Every backend for graphs on the CPU (cupy's, for the GPU, is tested in tests/gpu).
    plans = {name: graph.compile(name) for name in backends.BACKENDS if name != "cupy"}
    assert set(plans) >= {"interpreter", "python"}
    assert graph.compile("python") is plans["python"]  # made once, kept
    for plan in plans.values():
        np.testing.assert_array_equal(plan(x).data, graph(x).data)
        np.testing.assert_array_equal(plan.run([x]).data, graph.interpret(x).data)
    with pytest.raises(ValueError, match="unknown backend 'cuda'.*interpreter, python"):
        graph.compile("cuda")


# =============================================================================
# Aliasing: what a replay returns is its own
# =============================================================================


def state_times_one(S):
    return lambda x: S * 1.0  # simplified to S itself


def input_times_one(S):
    return lambda x: (x * 1.0, x - 0.0)


def folded_constant(S):
    return lambda x: (x + S, F.exp(Variable(np.zeros(3, np.float32))))  # folded


def written_state(S):
    def step(x):
        with dezero.no_grad():
            S.data = (S + x).data
        return S * 1.0  # the array just stored into S
    return step


@pytest.mark.filterwarnings("ignore:.*depends on no argument")
@pytest.mark.parametrize("make", [state_times_one, input_times_one, folded_constant,
                                  written_state])
def test_writing_into_a_returned_array_changes_nothing_else(make):
    S_eager, S_traced = (Variable(np.ones(3, np.float32)) for _ in range(2))
    eager, traced = make(S_eager), dezero.trace(make(S_traced))
    for i in range(4):
        x_eager = Variable(np.full(3, i, np.float32))
        x_traced = Variable(x_eager.data.copy())
        ys_eager, ys_traced = eager(x_eager), traced(x_traced)
        if not isinstance(ys_eager, tuple):
            ys_eager, ys_traced = (ys_eager,), (ys_traced,)
        for y_eager, y_traced in zip(ys_eager, ys_traced):
            np.testing.assert_array_equal(y_traced.data, y_eager.data)
            y_eager.data[...] += 100  # eager results are fresh arrays
            y_traced.data[...] += 100
        np.testing.assert_array_equal(S_traced.data, S_eager.data)
        np.testing.assert_array_equal(x_traced.data, x_eager.data)
    graph = traced.graph
    for run in (graph, graph.interpret):  # the graph called alone, by both backends
        ys = run(x_traced)
        state, x = S_traced.data.copy(), x_traced.data.copy()
        for y in ys if isinstance(ys, tuple) else (ys,):
            y.data[...] += 100
        np.testing.assert_array_equal(S_traced.data, state)
        np.testing.assert_array_equal(x_traced.data, x)


# =============================================================================
# Op facts live on the Function classes; passes build new graphs
# =============================================================================


class Halve(Function):
    """A user op that states its replay spelling and an identity on its class."""
    py = "{x} * 0.5"

    def forward(self, x):
        return x * 0.5


class Scale(F.Mul):
    """A subclass that changes Mul's forward: Mul's facts (py, x * 1 == x) no longer
    hold, so the replay must call this forward and simplify must keep the op."""

    def forward(self, x0, x1):
        return x0 * x1 + 1


def test_replay_spelling_and_identities_come_from_the_op_class():
    S = Variable(np.arange(3, dtype=np.float32))

    def f(x):
        return Halve()(x) + Scale()(x, 1.0) + S * 1.0

    traced = dezero.trace(f)
    for i in range(3):
        x = Variable(np.full(3, i, np.float32))
        np.testing.assert_array_equal(traced(x).data, f(x).data)
    code = traced.graph.code
    assert " * 0.5" in code and "_halve" not in code  # Halve.py, spelled inline
    assert "Scale0(x, a)" in code  # Scale's own forward: Mul's py is not inherited
    ops = [n.op for n in traced.graph.of_kind("op")]
    assert ops.count(Scale.op_name) == 1 and "mul" not in ops  # S * 1.0 dropped


def test_passes_import_only_the_ir_and_leave_the_old_graph_as_it_was(monkeypatch):
    source = inspect.getsource(passes)
    imported = {(node.module, alias.name) for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom) for alias in node.names
                if node.module.startswith("dezero.static")}
    # the IR and the naming rules below it, the debug log, and the horizontal rule,
    # which imports only the IR and the size type below it
    others = {("dezero.static", "debugging"), ("dezero.static", "horizontal")}
    assert {m for m, name in imported if (m, name) not in others} == \
        {"dezero.static.ir", "dezero.static.names", "dezero.static.sizes"}
    assert {node.module for node in ast.walk(ast.parse(inspect.getsource(horizontal)))
            if isinstance(node, ast.ImportFrom)} == {"__future__", "dezero.static.ir",
                                                     "dezero.static.sizes"}

    def snapshot(graph):
        return str(graph), [(id(v), v.name) for n in graph.nodes for v in n.inputs + n.outputs]

    seen = []

    def optimize_and_compare(graph):  # the trace's own call of the pipeline
        before = snapshot(graph)
        optimized = passes.optimize(graph)
        seen.append((before, snapshot(graph), optimized))
        return optimized

    monkeypatch.setattr(sys.modules["dezero.static.trace"], "optimize", optimize_and_compare)
    W = Variable(np.ones((3, 2), np.float32), name="W")

    def f(x):
        unused = F.exp(x)  # noqa: F841 - removed by dce
        y = F.sum(F.matmul(x, W) * 1.0 + F.exp(Variable(np.zeros(2, np.float32))))
        y.backward()
        return y

    dezero.trace(f)(Variable(np.ones((4, 3), np.float32)))
    (before, after, optimized), = seen
    assert after == before  # not one node or value of the recorded graph was edited
    assert len(optimized.nodes) < len(before[0].splitlines())


# =============================================================================
# The interpreter runs every graph the replay code runs
# =============================================================================


def triplets(make, example):
    """Three models with equal parameters: eager, replayed, interpreted."""
    made = [make() for _ in range(3)]
    with dezero.no_grad(), dezero.test_mode():
        for model in made:
            model(example)  # lazy layers make their parameters at the first call
            getattr(model, "reset_state", lambda: None)()
    for params in zip(*(model.params() for model in made)):
        for p in params[1:]:
            p.data = params[0].data.copy()
    return made


def run_three_ways(make_model, make_optimizer, make_step, example, calls):
    """Each call's arguments (a list of tuples) go to an eager step, a traced step and
    a traced step whose graph runs on the interpreter once recorded; the three
    results and models must agree at every call."""
    made = triplets(make_model, example)
    steps = [make_step(m, make_optimizer().setup(m)) for m in made]
    eager, replayed = steps[0], dezero.trace(steps[1])
    interpreted = dezero.trace(steps[2])
    for i, args in enumerate(calls):
        leaves = [a for arg in args for a in (arg if isinstance(arg, tuple) else (arg,))]
        random_state, results = np.random.get_state(), []
        for run in (eager, replayed, interpreted if i < 2 else None):
            np.random.set_state(random_state)  # dropout draws the same masks in all
            # (a step may record twice, .grad unset then set, before the graph runs alone)
            results.append(run(*args) if run else interpreted.graph.interpret(*leaves))
        for got in results[1:]:
            np.testing.assert_allclose(got.data, results[0].data, rtol=1e-5, atol=1e-6)
        assert_replay_equal(results[2].data, results[1].data)
        for params in zip(*(m.params() for m in made)):
            for p in params[1:]:
                np.testing.assert_allclose(p.data, params[0].data, rtol=1e-5, atol=1e-6)
            assert_replay_equal(params[2].data, params[1].data)
            assert_replay_equal(params[2].grad.data, params[1].grad.data)
    return made


def classifier_step(loss_fn):
    def make_step(model, optimizer):
        def step(x, t):
            loss = loss_fn(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        return step
    return make_step


def classification_calls(n=5, batch=8):
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((batch, 4)).astype(np.float32), rng.integers(0, 3, batch))
            for _ in range(n)]


@pytest.mark.parametrize("make_optimizer", [
    lambda: optimizers.SGD(lr=0.1),
    lambda: optimizers.MomentumSGD(lr=0.1),
    lambda: optimizers.Adam(alpha=0.01),
    lambda: optimizers.AdamW(alpha=0.01, weight_decay=0.1),
], ids=["SGD", "MomentumSGD", "Adam", "AdamW"])
def test_interpreter_runs_training_step_graphs_like_the_replay(make_optimizer):
    calls = classification_calls()
    run_three_ways(lambda: models.MLP((10, 3)), make_optimizer,
                   classifier_step(F.softmax_cross_entropy), calls[0][0], calls)


def test_interpreter_runs_a_cnn_with_batchnorm_and_dropout_like_the_replay():
    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.fc = L.Conv2d(4, kernel_size=3, pad=1), L.BatchNorm(), \
                L.Linear(3)

        def forward(self, x):
            y = F.pooling(F.relu(self.bn(self.conv(x))), 2, 2)
            return self.fc(F.dropout(F.reshape(y, (y.shape[0], -1)), 0.3))

    rng = np.random.default_rng(6)
    calls = [(rng.standard_normal((2, 1, 6, 6)).astype(np.float32), rng.integers(0, 3, 2))
             for _ in range(5)]
    made = run_three_ways(Net, lambda: optimizers.MomentumSGD(lr=0.1),
                          classifier_step(F.softmax_cross_entropy), calls[0][0], calls)
    assert_replay_equal(made[2].bn.avg_mean.data, made[1].bn.avg_mean.data)


def test_interpreter_runs_an_lstm_window_that_carries_its_state():
    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.lstm, self.fc = L.LSTM(4), L.Linear(1)

        def forward(self, x):
            return self.fc(self.lstm(x))

        def reset_state(self):
            self.lstm.reset_state()

    def make_step(model, optimizer):
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

    rng = np.random.default_rng(8)
    calls = []
    for _ in range(5):
        xs = tuple(rng.standard_normal((1, 1)).astype(np.float32) for _ in range(3))
        calls.append((xs, tuple(np.sin(x) for x in xs)))
    made = run_three_ways(Net, lambda: optimizers.Adam(alpha=0.01), make_step,
                          np.zeros((1, 1), np.float32), calls)
    assert_replay_equal(made[2].lstm.h.data, made[1].lstm.h.data)
    np.testing.assert_allclose(made[2].lstm.h.data, made[0].lstm.h.data, rtol=1e-5, atol=1e-6)


def test_softmax_cross_entropy_simple_reads_its_labels_through_the_graph():
    calls = classification_calls()  # new labels at every call
    run_three_ways(lambda: models.MLP((10, 3)), lambda: optimizers.SGD(lr=0.1),
                   classifier_step(F.softmax_cross_entropy_simple), calls[0][0], calls)
    graph = dezero.trace(F.softmax_cross_entropy_simple).lower(*calls[0])
    t = graph.input_values[1]
    assert any(t in node.inputs for node in graph.of_kind("op"))  # an op reads t
    for x, labels in calls:
        assert_replay_equal(graph(x, labels).data,
                            F.softmax_cross_entropy_simple(x, labels).data)


@pytest.mark.parametrize("bad", [-1, 4])  # 4 classes: ids 0..3
def test_a_replay_checks_the_class_ids_of_every_call(bad):
    x, labels = classification_calls()[0]
    loss = dezero.trace(F.softmax_cross_entropy_simple)
    loss(x, labels)
    loss(x, labels)  # replayed
    labels = labels.copy()
    labels[0] = bad  # eager raises; a replay must not read row -1 or past the end
    with pytest.raises(IndexError, match=f"softmax_cross_entropy_simple: id {bad} is out"):
        loss(x, labels)


@pytest.mark.parametrize("backend", ["python", "interpreter"])
def test_an_in_place_state_write_updates_the_shared_array_after_its_last_reader(backend):
    W = Variable(np.arange(3, dtype=np.float32))

    def step(x):
        with dezero.no_grad():
            new = W + 1.0
            y = W * x  # reads the old values after the new ones are computed
            W.data = new.data
            return y

    graph = dezero.trace(step).lower(Variable(np.ones(3, np.float32)))
    write, = graph.of_kind("write")
    write.attrs["in_place"] = True  # as the tracer marks `W.data += 1`
    sharer = Variable(W.data)  # another Variable on the same array
    y = backends.compile(graph, backend)(np.full(3, 2, np.float32))  # not the cached plan
    np.testing.assert_array_equal(y.data, [0, 2, 4])
    np.testing.assert_array_equal(W.data, [1, 2, 3])
    assert sharer.data is W.data


@pytest.mark.parametrize("backend", ["python", "interpreter"])
def test_state_set_to_a_constant_gets_its_own_array(backend):
    S = Variable(np.ones(3, np.float32))

    def reset():
        with dezero.no_grad():
            S.data = F.exp(Variable(np.zeros(3, np.float32))).data  # folded: a constant

    plan = backends.compile(dezero.trace(reset).lower(), backend)
    for _ in range(2):
        plan()
        S.data[...] += 1  # an in-place update of the state, as the book writes them
        np.testing.assert_array_equal(S.data, 2)  # the next reset starts from 1 again
