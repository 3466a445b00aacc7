"""The functions a transformer is built of: concat, stack, split, where, tril, triu,
layer_norm, gelu, silu, scaled_dot_product_attention, batched matmul and
softmax_cross_entropy over sequences.

Their values, gradients and dtypes are checked row by row in the op table
(tests/op_table.py, against numpy and PyTorch); here are what a row cannot say:
bad input and its messages, and the cases around the edges.
"""
import doctest

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable


def x_of(*shape, seed=0, dtype=np.float64):
    return Variable(np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype))


def test_doc_examples_run():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    names = ["concat", "stack", "split", "where", "tril", "triu", "erf", "gelu", "silu",
             "layer_norm", "scaled_dot_product_attention", "softmax_cross_entropy"]
    for name in names:
        for test in finder.find(getattr(F, name), name, globs={"np": np, **vars(F)}):
            runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    assert runner.summarize(verbose=False).attempted >= len(names)


# =============================================================================
# concat, stack, split
# =============================================================================


def test_concat_refuses_shapes_that_differ_off_the_axis_naming_them():
    with pytest.raises(ValueError, match=r"concat: shapes \(2, 3\), \(2, 2\) differ on an "
                                         r"axis other than axis 0.*join along another axis"):
        F.concat([x_of(2, 3), x_of(2, 2)])
    with pytest.raises(ValueError, match=r"concat: shapes \(2, 3\), \(3,\) do not have one "
                                         r"number of axes"):
        F.concat([x_of(2, 3), x_of(3)], axis=0)


def test_concat_refuses_two_dtypes_rather_than_promoting():
    with pytest.raises(TypeError, match=r"concat: dtypes float32, float64 differ.*astype"):
        F.concat([x_of(2, 3), x_of(1, 3, dtype=np.float32)])
    with pytest.raises(TypeError, match=r"^stack: dtypes float32, float64 differ"):
        F.stack([x_of(3), x_of(3, dtype=np.float32)])  # it named concat, which stack calls


def test_concat_and_stack_take_a_list_and_an_axis_in_range():
    with pytest.raises(TypeError, match=r"concat: xs must be a non-empty list.*concat\(\[a, b\]"):
        F.concat(x_of(2, 3))
    with pytest.raises(TypeError, match=r"stack: xs must be a non-empty list"):
        F.stack([])
    with pytest.raises(ValueError, match=r"concat: axis 2 is out of range for 2-d arrays"):
        F.concat([x_of(2, 3), x_of(2, 3)], axis=2)
    with pytest.raises(ValueError, match=r"stack: shapes \(1, 3\), \(2, 3\) differ.*concat"):
        F.stack([x_of(2, 3), x_of(1, 3)])


def test_concat_joins_arrays_numbers_and_variables_and_negative_axes():
    y = F.concat([x_of(2, 1), np.zeros((2, 2))], axis=-1)
    assert y.shape == (2, 3)
    np.testing.assert_array_equal(F.stack([1.0, 2.0]).data, [1.0, 2.0])


def test_split_refuses_sections_that_do_not_divide_the_axis():
    with pytest.raises(ValueError, match=r"split: axis 1 of x \(shape \(2, 5\)\) has length 5, "
                                         r"which 2 sections do not divide equally.*\[2\]"):
        F.split(x_of(2, 5), 2, axis=1)
    with pytest.raises(ValueError, match=r"cut points \[3, 1\] must be increasing"):
        F.split(x_of(5), [3, 1])


def test_split_of_an_empty_axis_in_sections_gives_empty_parts_as_numpy():
    # The parts' length, 0, was the step of a range: "range() arg 3 must not be zero".
    x = Variable(np.zeros((0, 3)))
    parts = F.split(x, 3)
    assert [p.shape for p in parts] == [p.shape for p in np.split(x.data, 3)]
    F.sum(F.concat(parts[1:])).backward()
    assert x.grad.shape == (0, 3)


def test_split_cuts_as_numpy_at_negative_and_repeated_points():
    a = np.arange(10.0).reshape(5, 2)
    for cuts in ([-2], [2, 2], [0, 5], 5, [1, 2, 3]):
        parts = F.split(a, cuts)
        assert [p.shape for p in parts] == [p.shape for p in np.split(a, cuts)]
        for p, q in zip(parts, np.split(a, cuts)):
            np.testing.assert_array_equal(p.data, q)


@pytest.mark.parametrize("backend", ["interpreter", "python"])
def test_a_concat_of_one_and_a_split_in_one_part_replay_as_eager(backend):
    # Their gradients are one part: the replay code once read a part for all of them.
    def step(a):
        x = Variable(a)
        y = F.split(F.concat([x], axis=1), 1, axis=1)[0] * x
        y.backward()
        return y, x.grad

    a = x_of(2, 3).data
    got = dezero.trace(step).lower(a).compile(backend)(a)
    for g, w in zip(got, step(a)):
        np.testing.assert_array_equal(g.data, w.data)


def test_split_gives_zeros_to_parts_no_gradient_reached():
    x = x_of(6, 2)
    a, _, c = F.split(x, 3)
    F.sum(a * c).backward()
    np.testing.assert_array_equal(x.grad.data[2:4], 0.0)
    np.testing.assert_array_equal(x.grad.data[:2], x.data[4:])


# =============================================================================
# where, tril, triu
# =============================================================================


def test_where_refuses_a_condition_that_is_not_boolean():
    with pytest.raises(TypeError, match=r"where: condition must be boolean, got dtype "
                                        r"float64.*mask > 0"):
        F.where(np.ones(3), x_of(3), 0.0)


def test_where_refuses_shapes_that_do_not_broadcast_naming_all_three():
    with pytest.raises(ValueError, match=r"where: condition of shape \(2,\), x of shape "
                                         r"\(2, 3\) and y of shape \(\) do not broadcast"):
        F.where(np.ones(2, bool), x_of(2, 3), 0.0)


def test_where_keeps_the_dtype_of_a_float32_branch_against_a_python_number():
    y = F.where(np.array([True, False]), x_of(2, dtype=np.float32), -np.inf)
    assert y.dtype == np.float32 and y.data[1] == -np.inf


def test_where_of_numpy_arithmetic_on_a_traced_argument_keeps_its_float32():
    # inside a trace the argument is a traced array: a Python number beside it took
    # float64 (np.array(-1.0)) where eager numpy keeps float32
    def f(c, x):
        return F.where(c, x * 2.0, -1.0)
    c, x = np.array([True, False]), np.ones(2, np.float32)
    traced = dezero.trace(f)
    for _ in range(2):
        y = traced(c, x)
        assert y.dtype == f(c, x).dtype == np.float32
        np.testing.assert_array_equal(y.data, [2.0, -1.0])


def test_where_of_a_traced_boolean_argument_replays_each_call_condition():
    traced = dezero.trace(lambda c, x: F.where(c, x, 0.0))
    rng = np.random.default_rng(0)
    for _ in range(3):
        c, x = rng.uniform(size=(2, 3)) > 0.5, rng.uniform(size=(2, 3))
        np.testing.assert_array_equal(traced(c, x).data, np.where(c, x, 0.0))


@pytest.mark.parametrize("op", ["tril", "triu"])
def test_triangles_refuse_a_vector_and_a_diagonal_that_is_no_int(op):
    with pytest.raises(ValueError, match=rf"{op}: x must have 2 or more axes.*shape \(3,\)"):
        getattr(F, op)(x_of(3))
    with pytest.raises(TypeError, match=rf"{op}: k must be an int"):
        getattr(F, op)(x_of(3, 3), 0.5)


# =============================================================================
# erf, gelu, silu, layer_norm
# =============================================================================


def test_erf_at_its_limits_and_of_integers():
    y = F.erf(np.array([-np.inf, -6.0, 0.0, 1e-300, np.inf, np.nan]))
    np.testing.assert_array_equal(y.data[:5], [-1.0, -1.0, 0.0, 1e-300 * 2 / np.sqrt(np.pi),
                                               1.0])
    assert np.isnan(y.data[5])
    assert F.erf(np.array([0, 1])).dtype == np.float64
    assert F.erf(np.full(2, 0.5, np.float32)).dtype == np.float32


def test_gelu_names_the_two_forms_it_knows():
    with pytest.raises(ValueError, match=r"gelu: approximate must be 'none' \(the erf form\) "
                                         r"or 'tanh', got 'exact'"):
        F.gelu(x_of(3), approximate="exact")


def test_gelu_and_silu_of_large_inputs_are_x_and_zero():
    x = np.array([-40.0, 40.0])
    for y in (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x)):
        np.testing.assert_allclose(y.data, [0.0, 40.0], atol=1e-15)


def test_layer_norm_refuses_gamma_and_beta_of_another_length():
    with pytest.raises(ValueError, match=r"layer_norm: gamma must have shape \(4,\), the "
                                         r"length of the last axis of x \(shape \(2, 4\)\), "
                                         r"got \(2,\)"):
        F.layer_norm(x_of(2, 4), np.ones(2), np.zeros(4))
    with pytest.raises(ValueError, match=r"layer_norm: beta must have shape \(4,\)"):
        F.layer_norm(x_of(2, 4), np.ones(4), np.zeros((1, 4)))


def test_layer_norm_gives_each_row_mean_0_and_variance_1_in_float32():
    x = x_of(3, 5, 8, dtype=np.float32) * 100 + 50
    y = F.layer_norm(x, np.ones(8, np.float32), np.zeros(8, np.float32)).data
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)


# =============================================================================
# scaled_dot_product_attention, batched matmul
# =============================================================================

attention = F.scaled_dot_product_attention


def test_attention_refuses_a_mask_that_does_not_broadcast_to_the_scores():
    q, k, v = x_of(2, 3, 4), x_of(2, 5, 4), x_of(2, 5, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 3\) does not broadcast to the "
                                         r"scores' shape \(2, 3, 5\).*give it shape \(3, 5\)"):
        attention(q, k, v, mask=np.ones((5, 3), bool))
    # One that broadcasts only by growing the scores (a batch of masks for one query
    # batch) is refused too: the result would have another shape than attention's.
    with pytest.raises(ValueError, match=r"mask of shape \(4, 2, 3, 5\) does not broadcast"):
        attention(q, k, v, mask=np.ones((4, 2, 3, 5), bool))


def test_attention_refuses_a_float_mask_and_a_mask_with_is_causal():
    q = x_of(3, 4)
    with pytest.raises(TypeError, match=r"mask must be boolean \(True: attend\), got dtype "
                                        r"float64.*m > 0"):
        attention(q, q, q, mask=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"give mask or is_causal, not both.*np.tri\(3, 3"):
        attention(q, q, q, mask=np.ones((3, 3), bool), is_causal=True)


def test_attention_refuses_q_k_v_that_do_not_fit():
    with pytest.raises(ValueError, match=r"q of shape \(3, 4\), k of shape \(3, 2\) and v of "
                                         r"shape \(3, 4\) do not fit"):
        attention(x_of(3, 4), x_of(3, 2), x_of(3, 4))
    with pytest.raises(ValueError, match=r"do not fit"):
        attention(x_of(3, 4), x_of(5, 4), x_of(4, 4))


def test_attention_of_float32_stays_float32_and_a_query_of_no_keys_gets_zeros():
    q = x_of(2, 3, 4, dtype=np.float32)
    mask = np.array([[True, False, False], [False, False, False], [True, True, True]])
    y = attention(q, q, q, mask=mask)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.data[:, 1], 0.0)
    np.testing.assert_allclose(y.data[:, 0], q.data[:, 0], rtol=1e-6)  # its own value


def test_attention_drops_weights_in_training_only():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 8, 16)) for _ in range(3))
    with dezero.test_mode():
        np.testing.assert_array_equal(attention(q, k, v, dropout_p=0.5).data,
                                      attention(q, k, v).data)
    np.random.seed(0)
    dropped = attention(q, k, v, dropout_p=0.5).data
    assert not np.allclose(dropped, attention(q, k, v).data)
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: dropout_p must be in "
                                         r"\[0, 1\), got 1.0"):
        attention(q, k, v, dropout_p=1.0)


def test_attention_with_a_traced_mask_replays_each_call_mask():
    traced = dezero.trace(lambda q, mask: attention(q, q, q, mask=mask))
    rng = np.random.default_rng(1)
    for _ in range(3):
        q, mask = rng.standard_normal((3, 4)), rng.uniform(size=(3, 3)) > 0.3
        np.testing.assert_allclose(traced(q, mask).data, attention(q, q, q, mask=mask).data,
                                   rtol=1e-14)


def test_matmul_names_batch_axes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"matmul: the batch axes \(all but the last two\) of "
                                         r"shapes \(2, 4, 5\) and \(3, 5, 2\) do not broadcast"):
        F.matmul(x_of(2, 4, 5), x_of(3, 5, 2))


# =============================================================================
# softmax_cross_entropy over sequences, ignore_index
# =============================================================================


def test_cross_entropy_over_sequences_names_labels_of_another_shape():
    with pytest.raises(ValueError, match=r"scores of shape \(2, 3, 5\) need one label per row "
                                         r"of their last axis, labels of shape \(2, 3\); got "
                                         r"labels of shape \(6,\).*t.reshape\(2, 3\)"):
        F.softmax_cross_entropy(x_of(2, 3, 5), np.zeros(6, np.int64))


def test_cross_entropy_checks_the_labels_it_does_not_ignore():
    t = np.array([[0, 7], [-100, 1]])
    with pytest.raises(IndexError, match=r"softmax_cross_entropy: id 7 is out of range for 5 "
                                         r"classes"):
        F.softmax_cross_entropy(x_of(2, 2, 5), t, ignore_index=-100)
    with pytest.raises(IndexError, match=r"softmax_cross_entropy: id -100 is out of range"):
        F.softmax_cross_entropy(x_of(2, 2, 5), np.array([[0, 4], [-100, 1]]))  # no ignore_index
    with pytest.raises(TypeError, match=r"integer class labels"):
        F.softmax_cross_entropy(x_of(4, 5), np.zeros(4), ignore_index=0)


@pytest.mark.parametrize("ignore_index, t", [
    (1.5, np.zeros(4, np.int64)), ("a", np.zeros(4, np.int64)),  # matched nothing, in silence
    (True, np.zeros(4, np.int64)), (-100, np.zeros(4, np.uint8))], ids=str)
def test_cross_entropy_names_an_ignore_index_that_is_no_label(ignore_index, t):
    with pytest.raises(TypeError, match=rf"softmax_cross_entropy: ignore_index must be an int "
                       rf"that labels of dtype {t.dtype} can hold, got {ignore_index!r}"):
        F.softmax_cross_entropy(x_of(4, 5), t, ignore_index=ignore_index)


def test_ignored_labels_get_no_gradient_and_the_mean_is_over_the_others():
    x = x_of(4, 3)
    t = np.array([2, -1, 0, -1])
    loss = F.softmax_cross_entropy(x, t, ignore_index=-1)
    loss.backward()
    np.testing.assert_array_equal(x.grad.data[[1, 3]], 0.0)
    kept = F.softmax_cross_entropy(x.data[[0, 2]], t[[0, 2]])
    np.testing.assert_allclose(loss.data, kept.data, rtol=1e-15)


def test_cross_entropy_of_float32_sequences_stays_float32():
    x = x_of(2, 3, 4, dtype=np.float32)
    for ignore_index in (None, -100):
        t = np.array([[1, 2, 3], [0, 0, 2]]) if ignore_index is None else \
            np.array([[1, -100, 3], [0, 0, -100]])
        loss = F.softmax_cross_entropy(x, Variable(t.astype(np.int32)), ignore_index)
        x.cleargrad()
        loss.backward()
        assert loss.dtype == x.grad.dtype == np.float32


def test_cross_entropy_of_labels_all_ignored_is_nan_as_in_torch(torch):
    x = x_of(2, 3, 4)
    with np.errstate(invalid="ignore"):  # 0 / 0
        nothing = F.softmax_cross_entropy(x, np.full((2, 3), -100), ignore_index=-100)
    nothing_torch = torch.nn.functional.cross_entropy(
        torch.tensor(x.data).reshape(-1, 4), torch.full((6,), -100), ignore_index=-100)
    assert np.isnan(nothing.data) and torch.isnan(nothing_torch)


def test_cross_entropy_with_ignore_index_replays_each_call_labels():
    def step(x, t):
        x = Variable(x)
        loss = F.softmax_cross_entropy(x, t, ignore_index=-100)
        loss.backward()
        return loss, x.grad

    traced = dezero.trace(step)
    rng = np.random.default_rng(2)
    for _ in range(3):
        x, t = rng.standard_normal((2, 4, 6)), rng.integers(-1, 6, (2, 4))
        t[t < 0] = -100
        for got, want in zip(traced(x, t), step(x, t)):
            np.testing.assert_allclose(got.data, want.data, rtol=1e-13, atol=1e-15)


# =============================================================================
# A transformer block, traced
# =============================================================================


def block_loss(x, t, params):
    """One pre-norm decoder block on (B, T, D) inputs, its loss and the gradients of every
    parameter: every new function, forward and backward, in one graph."""
    W_qkv, W_out, W_up, W_down, gamma, beta = params
    for p in params:
        p.cleargrad()
    h = F.layer_norm(x, gamma, beta)
    q, k, v = F.split(F.matmul(h, W_qkv), 3, axis=-1)
    heads = [F.scaled_dot_product_attention(*qkv, is_causal=True)  # two heads
             for qkv in zip(*(F.split(a, 2, axis=-1) for a in (q, k, v)))]
    x = x + F.matmul(F.concat(heads, axis=-1), W_out)
    x = x + F.matmul(F.gelu(F.matmul(F.layer_norm(x, gamma, beta), W_up)), W_down)
    loss = F.softmax_cross_entropy(x, t, ignore_index=-100)
    loss.backward()
    return (loss, *[p.grad for p in params])


@pytest.mark.filterwarnings("ignore:block. output .* depends on no argument")
@pytest.mark.parametrize("backend", ["interpreter", "python", "cpu"])
def test_a_traced_transformer_block_replays_as_eager_on_every_backend(backend):
    rng = np.random.default_rng(3)
    D = 6
    params = [Variable(rng.standard_normal(s) * 0.5) for s in
              ((D, 3 * D), (D, D), (D, 2 * D), (2 * D, D), (D,), (D,))]

    def block(x, t):
        return block_loss(x, t, params)

    def inputs(seed):
        r = np.random.default_rng(seed)
        t = r.integers(0, D, (2, 5))
        t[:, -1] = -100  # padding
        return r.standard_normal((2, 5, D)), t

    plan = dezero.trace(block).lower(*inputs(0)).compile(backend)
    for seed in (1, 2):
        got = plan(*[Variable(a) for a in inputs(seed)])
        want = block(*inputs(seed))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.data, w.data, rtol=1e-12, atol=1e-14)
