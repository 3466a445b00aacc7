"""Symbolic sizes: the Size type, and traces whose graphs hold them (automatic dynamic,
dynamic=True), checked against eager execution of the same code."""
import copy

import numpy as np
import pytest
from backend_helpers import assert_replay_equal

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.static import sizes
from dezero.static.sizes import Relation, Size

B, T = Size.name("B"), Size.name("T")


# ---- the Size type ---------------------------------------------------------------
def test_sizes_print_as_python_and_parse_back():
    for size in (B * T, B * T - 1, (T - 1) // 2, B - (T - 1), 1 / B, 2 * (B + 3), -B,
                 B * (T // 2), 3 * (B // 2), -(B * T) + T):
        text = str(size)
        assert sizes.parse(text) == size
        assert sizes.evaluate(size, {"B": 7, "T": 5}) == eval(text, {"B": 7, "T": 5})


def test_numbers_fold_and_sizes_compare_as_expressions():
    assert B * 1 == B and B + 0 == B and 0 * B == 0 and (B // 1) == B
    # sums and products of names take one written form, so equal sizes are equal
    assert B * T == T * B and (B - 1) == (-1 + B) and B * T * 2 * 4 == 8 * T * B
    assert B * (T // 2) != (B * T) // 2  # not algebra beyond + - *
    assert str(B * T) == "B*T" and str(T - 1) == "T - 1" and str(T - B) == "T - B"
    assert str(B * (T // 2)) == "B*(T//2)" and str(-(B * 2)) == "-(B*2)"
    with pytest.raises(TypeError, match="no value until a call"):
        np.zeros((B, 3))


def test_parse_refuses_what_is_not_a_size():
    for text in ("__import__('os')", "B; T", "B ** 2", "(B", "B +", "1e400e"):
        with pytest.raises(ValueError, match="not a size|identifier"):
            sizes.parse(text)


def test_bind_reads_names_and_checks_relations_between_inputs():
    bindings, why = sizes.bind([(B, 3), (B,), (B * T,)], [(4, 3), (4,), (20,)])
    assert bindings is None and "whose names no axis gives" in why
    bindings, why = sizes.bind([(B, T), (B * T,)], [(4, 5), (20,)], ["x", "y"])
    assert bindings == {"B": 4, "T": 5} and why is None
    assert "y axis 0 is 21, but B*T is 20" in sizes.bind([(B, T), (B * T,)],
                                                         [(4, 5), (21,)], ["x", "y"])[1]
    assert "x axis 1 is 4, the graph takes 3" in sizes.bind([(B, 3)], [(2, 4)], ["x"])[1]
    assert "t axis 0 is 5, but B is 4" in sizes.bind([(B, 3), (B,)], [(4, 3), (5,)],
                                                     ["x", "t"])[1]


def test_settle_fixes_and_unifies_names():
    replacements, left = sizes.settle([Relation(B, ">=", 2), Relation(T, "==", B),
                                       Relation(B * T, "!=", 6), Relation(B, "!=", 1)])
    assert replacements == {"T": B} and left == [Relation(B, ">=", 2),
                                                 Relation(B * B, "!=", 6)]
    replacements, left = sizes.settle([Relation(B, ">=", 2), Relation(B, "==", 8)])
    assert replacements == {"B": 8} and left == []


# ---- traces ------------------------------------------------------------------------
def _step_pair(optimizer=optimizers.Adam):
    """The same MLP training step twice (weights made equal): eager and to trace."""
    def make():
        np.random.seed(0)
        model = dezero.models.MLP((10, 3))
        model(np.zeros((1, 2), np.float32))  # its weights, before any step
        opt = optimizer().setup(model)

        def step(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            opt.update()
            return loss
        return model, step
    return make(), make()


def _batches(sizes_, seed=1):
    rng = np.random.default_rng(seed)
    for n in sizes_:
        yield rng.standard_normal((n, 2)).astype(np.float32), rng.integers(0, 3, n)


@pytest.mark.parametrize("dynamic, graphs", [(None, 2), (True, 1)])
def test_batch_sizes_replay_one_symbolic_graph_equal_to_eager(dynamic, graphs):
    (m1, eager), (m2, step) = _step_pair()
    traced = dezero.trace(step, dynamic=dynamic)
    for x, t in _batches([8, 5, 7, 2, 13, 3, 10, 4, 9, 11, 8]):  # primes, 2, repeats
        want, got = eager(x, t), traced(x, t)
        assert_replay_equal(got.data, want.data)  # bit for bit on the python backend
        for p, q in zip(m1.params(), m2.params()):
            assert_replay_equal(q.data, p.data)
    assert traced.entries == graphs
    assert "x: f32[B,2], t: i64[B]" in str(traced.graph)
    assert any("symbolic: x axis 0 is B, t axis 0 is B" in r for r in traced.retraces)


def test_sizes_zero_and_one_record_graphs_of_their_own():
    (_, eager), (_, step) = _step_pair(optimizers.SGD)
    traced = dezero.trace(step, dynamic=True)
    for x, t in _batches([6, 1, 4, 1]):
        assert_replay_equal(traced(x, t).data, eager(x, t).data)
    assert traced.entries == 2  # B (two or more) and the batch of one
    with np.errstate(all="ignore"):  # an empty batch's mean: NaN, as eager
        x, t = np.zeros((0, 2), np.float32), np.zeros(0, np.int64)
        assert np.isnan(traced(x, t).data) and np.isnan(eager(x, t).data)


def test_dynamic_false_keeps_a_graph_per_shape():
    traced = dezero.trace(lambda x: x * 2.0, dynamic=False)
    for n in (2, 3, 4):
        traced(Variable(np.ones(n, np.float32)))
    assert traced.entries == 3
    with pytest.raises(TypeError, match="dynamic is None"):
        dezero.trace(lambda x: x, dynamic="yes")


def test_expressions_of_sizes_are_recorded():
    def f(x):
        n, t, c = x.shape
        y = F.reshape(x, (n * t, c)) * (1 / t)  # a number of sizes: an op of the graph
        return F.sum(y, axis=0) + x.shape[0]

    traced = dezero.trace(f, dynamic=True)
    for shape in [(2, 3, 4), (5, 7, 4), (3, 2, 4)]:
        x = np.random.default_rng(0).standard_normal(shape)
        assert_replay_equal(traced(Variable(x)).data, f(Variable(x)).data)
    text = str(traced.graph)
    assert traced.entries == 1 and "shape=(B*T, N)" in text and "value=1/T" in text
    # the number is computed at each call, spelled inline (the replays above equal eager)
    assert "_xp.asarray((1/_n_T), dtype='float64')" in traced.graph.compile("python").source
    assert "x: f64[B,T,N]) where B >= 2, T >= 2, N >= 2\n" in text  # nothing implied


def test_a_concatenation_of_symbolic_sizes_sums_them():
    def f(x, y):
        return F.concat([x, y], axis=0) * 2.0

    traced = dezero.trace(f)
    rng = np.random.default_rng(0)
    for n, m in [(2, 3), (4, 5), (6, 7), (3, 2)]:
        x, y = rng.standard_normal((n, 4)), rng.standard_normal((m, 4))
        assert_replay_equal(traced(x, y).data, f(x, y).data)
    assert traced.entries == 2  # the first call static, then both lengths symbolic
    assert "f64[B + T,4] = concat(x, y)" in str(traced._symbolic[0].graph)


def test_a_branch_on_a_size_is_a_relation_the_replay_checks():
    def f(x):
        return x * 2.0 if x.shape[0] > 4 else x * 3.0

    traced = dezero.trace(f, dynamic=True)
    for n in (6, 9, 3, 2, 5, 7):
        x = Variable(np.ones(n))
        assert_replay_equal(traced(x).data, f(x).data)
    assert traced.entries == 2  # B > 4 and B <= 4
    assert {str(r) for e in traced._symbolic for r in e.graph.relations} >= {"B > 4", "B <= 4"}


def test_a_size_read_as_a_number_stays_static():
    def f(x):
        return x * float(len(x))  # len() must give an int: the size is fixed

    traced = dezero.trace(f)
    for n in (3, 4, 5, 6):
        x = Variable(np.ones(n))
        assert_replay_equal(traced(x).data, f(x).data)
    assert traced.entries == 4  # the first, one fixed at 4 and kept static, then 5, 6
    assert any("static: x axis 0" in r for r in traced.retraces)


def test_equal_sizes_share_a_name_and_a_call_that_splits_them_records_again():
    def f(x, t):
        return x + t

    traced = dezero.trace(f, dynamic=True)
    a = np.ones((3, 3))
    traced(Variable(a), Variable(a))
    assert "x: f64[B,B]" in str(traced.graph)
    x, t = np.ones((3, 4)), np.ones((3, 4))
    assert_replay_equal(traced(Variable(x), Variable(t)).data, x + t)
    assert traced.entries == 2


def test_calling_a_symbolic_graph_with_sizes_that_break_it_names_the_input():
    traced = dezero.trace(lambda x, t: F.softmax_cross_entropy(x, t), dynamic=True)
    traced(np.zeros((4, 3), np.float32), np.zeros(4, np.int64))
    graph = traced.graph
    with pytest.raises(TypeError, match="input t axis 0 is 5, but B is 4"):
        graph(np.zeros((4, 3), np.float32), np.zeros(5, np.int64))
    with pytest.raises(TypeError, match="B >= 2"):
        graph(np.zeros((1, 3), np.float32), np.zeros(1, np.int64))
    y = graph(np.ones((6, 3), np.float32), np.zeros(6, np.int64))
    np.testing.assert_allclose(y.data, np.log(3.0), rtol=1e-6)


def test_interpreter_and_python_replays_agree_on_a_symbolic_graph():
    (_, eager), (_, step) = _step_pair(optimizers.SGD)
    traced = dezero.trace(step, dynamic=True)
    x, t = next(_batches([5]))
    traced(x, t)
    graph = traced.graph
    snapshot = copy.deepcopy([p.data for p in traced._symbolic[0].graph.state.values()])
    for n in (7, 3):
        x, t = next(_batches([n], seed=n))
        for var, data in zip(graph.state.values(), snapshot):
            var.data = data.copy()
        a = graph.interpret(x, t).data
        for var, data in zip(graph.state.values(), snapshot):
            var.data = data.copy()
        b = graph(x, t).data
        assert a == b


def test_a_symbolic_graph_missed_by_dtype_says_dtype_not_shape():
    traced = dezero.trace(lambda x: x * 2.0)
    for n in (4, 2):
        traced(np.ones((n, 3), np.float32))
    traced(np.ones((2, 3), np.float64))
    assert traced.retraces[-1].startswith("x dtype float32 -> float64")
    assert "x: f64[B,3]" in str(traced.graph)  # recorded with the size still symbolic


@pytest.mark.parametrize("fn, sizes", [
    (lambda x: x * len(str(x.shape[0])), (4, 11, 7)),           # text of a size
    (lambda x: x * f"{x.shape[0]}".count("1"), (4, 11, 7)),
    (lambda x: x * {4: 1.0, 5: 2.0}.get(x.shape[0], 3.0), (3, 4, 5)),  # a lookup that misses
    (lambda x: x * 2.0 if len(set(x.shape)) == 1 else x, (4, 6, 3)),   # a set of sizes
    (lambda x: x * (x.shape[1] % 2), (5, 7, 6)),                 # what sizes do not express
    (lambda x: x / x.shape[1] ** 0.5, (5, 7, 6)),
    (lambda x: x * abs(x.shape[0] - 5), (4, 6, 7)),
    (lambda x: x * round(x.shape[0] / 3), (4, 6, 8)),
    (lambda x: x * divmod(x.shape[1], 3)[0], (5, 7, 6)),
    (lambda x: x * (x.shape[0] << 1), (4, 6, 7)),
])
def test_python_that_reads_a_size_as_a_number_fixes_it_with_a_guard(fn, sizes):
    traced = dezero.trace(fn, dynamic=True)
    for n in sizes:
        x = Variable(np.ones((n, n + 1), np.float32))
        assert_replay_equal(traced(x).data, fn(x).data)


def test_a_size_kept_past_its_trace_is_the_number_it_was():
    import functools

    @functools.lru_cache(None)
    def inverse(n):
        return 1.0 / float(n)

    first = dezero.trace(lambda x: x * inverse(x.shape[0]), dynamic=True)
    second = dezero.trace(lambda x: x * inverse(x.shape[0]) + 1.0, dynamic=True)
    first(np.ones((4, 3), np.float32))
    second(np.ones((4, 3), np.float32))  # the cache's key is first's B, with 4
    for n in (8, 4, 5):
        x = np.ones((n, 3), np.float32)
        assert_replay_equal(second(x).data, x / n + 1.0)


def test_a_captured_variable_named_as_a_size_replays():
    T = Variable(np.array(2.0, np.float32), name="T")  # a temperature, and a size T
    traced = dezero.trace(lambda x: F.softmax(x / T), dynamic=True)
    for shape in ((4, 5), (3, 7)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        assert_replay_equal(traced(x).data, F.softmax(x / T).data)
