"""Op tests driven by the op table (tests/op_table.py): forward against numpy,
gradients against numerical ones, second derivatives, broadcasting and dtypes."""
import math
import re
import warnings

import numpy as np
import pytest
from backend_helpers import FUSED, assert_replay_equal
from op_table import ROWS

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.utils import gradient_check, numerical_grad

IDS = [row.name for row in ROWS]


def _grads_of(fn, xs, create_graph=False):
    """Backprop of sum(fn(*xs)); a missing gradient counts as zero."""
    for x in xs:
        x.cleargrad()
    y = F.sum(fn(*xs))
    y.backward(create_graph=create_graph)
    return [x.grad if x.grad is not None else Variable(np.zeros_like(x.data)) for x in xs]


# =============================================================================
# Forward, first and second derivatives of every row
# =============================================================================


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_forward_matches_numpy(row):
    arrays = row.inputs()
    y = row.fn(*[Variable(a) for a in arrays])
    expected = row.ref(*arrays)
    assert y.shape == np.shape(expected)
    np.testing.assert_allclose(y.data, expected, rtol=1e-12)


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_gradient_check_each_input(row):
    arrays = row.inputs()
    for i in range(len(arrays)):
        def f(x, i=i):
            xs = [Variable(a) for a in arrays]
            xs[i] = x
            return row.fn(*xs)

        assert gradient_check(f, arrays[i]), f"{row.name}: input {i}"


@pytest.mark.parametrize("row", [r for r in ROWS if r.second], ids=[r.name for r in ROWS
                                                                      if r.second])
def test_second_derivative_matches_numerical_derivative_of_gradient(row):
    # s(xs) = sum_i <w_i, d sum(f) / d x_i> is a scalar made of the gradients; its
    # backprop (through the backward graph) must match its numerical derivative.
    # Cross terms (d/dW of dL/dx for matmul, mul ...) are covered this way too.
    arrays = row.inputs()
    rng = np.random.default_rng(1)
    weights = [rng.uniform(0.5, 1.5, size=a.shape) for a in arrays]

    def s(*values):
        xs = [Variable(v) for v in values]
        gxs = _grads_of(row.fn, xs, create_graph=True)
        total = F.sum(gxs[0] * weights[0])
        for gx, w in zip(gxs[1:], weights[1:]):
            total = total + F.sum(gx * w)
        return total, xs

    total, xs = s(*arrays)
    for x in xs:
        x.cleargrad()
    total.backward()
    for i, x in enumerate(xs):
        backprop = np.zeros_like(arrays[i]) if x.grad is None else x.grad.data

        def s_i(v, i=i):
            values = list(arrays)
            values[i] = v
            return s(*values)[0]

        numerical = numerical_grad(s_i, arrays[i].copy())
        np.testing.assert_allclose(backprop, numerical, rtol=1e-4, atol=1e-6,
                                   err_msg=f"{row.name}: input {i}")


# =============================================================================
# dtypes: float32 stays float32, forward and backward, with Python scalars too
# =============================================================================


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_float32_in_float32_out_and_grads(row):
    xs = [Variable(a) for a in row.inputs(np.float32)]
    y = row.fn(*xs)
    assert y.dtype == np.float32, row.name
    gxs = _grads_of(row.fn, xs, create_graph=True)
    assert [g.dtype for g in gxs] == [np.float32] * len(xs), row.name
    if row.second:
        total = F.sum(gxs[0])
        for gx in gxs[1:]:
            total = total + F.sum(gx)
        for x in xs:
            x.cleargrad()
        total.backward()
        for x in xs:
            assert x.grad is None or x.grad.dtype == np.float32, row.name


SCALAR_FORMS = {
    "x+2.0": lambda x: x + 2.0, "2.0+x": lambda x: 2.0 + x,
    "x-1": lambda x: x - 1, "1-x": lambda x: 1 - x,
    "x*2.0": lambda x: x * 2.0, "2.0*x": lambda x: 2.0 * x,
    "x/3": lambda x: x / 3, "3.0/x": lambda x: 3.0 / x,
    "x**2": lambda x: x ** 2, "x**0.5": lambda x: F.abs(x) ** 0.5,
    "-x": lambda x: -x,
    "F.add(2.0,x)": lambda x: F.add(2.0, x), "F.mul(2.0,x)": lambda x: F.mul(2.0, x),
    "F.sub(2.0,x)": lambda x: F.sub(2.0, x), "F.div(2.0,x)": lambda x: F.div(2.0, x),
    "mean": lambda x: F.mean(x), "average_axis": lambda x: F.average(x, axis=0),
    "np.float64*x": lambda x: np.float64(2.0) * x,
}


@pytest.mark.parametrize("form", SCALAR_FORMS)
def test_python_scalars_are_weak(form):
    x = Variable(np.array([[1.5, 2.0], [0.5, 3.0]], dtype=np.float32))
    y = SCALAR_FORMS[form](x)
    assert y.dtype == np.float32
    y.backward(create_graph=True)
    assert x.grad.dtype == np.float32
    gx = x.grad
    x.cleargrad()
    gx.backward()
    assert x.grad is None or x.grad.dtype == np.float32


def test_int_variable_with_float_scalar_promotes_like_numpy():
    x = Variable(np.array([1, 2], dtype=np.int32))
    assert (x * 2).dtype == np.int32
    assert (x * 0.5).dtype == np.result_type(np.int32, np.float64)


# =============================================================================
# Broadcasting: add, sub, mul, div with (2,3)+(3,), (2,3)+(2,1), scalar
# =============================================================================

BINARY = {"add": (F.add, np.add), "sub": (F.sub, np.subtract),
          "mul": (F.mul, np.multiply), "div": (F.div, np.divide)}
SHAPE_PAIRS = [((2, 3), (3,)), ((3,), (2, 3)), ((2, 3), (2, 1)), ((2, 1), (1, 3)),
               ((2, 3), ()), ((), (2, 3))]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_broadcasting_forward_and_gradients(op, shapes):
    fn, ref = BINARY[op]
    rng = np.random.default_rng(2)
    a, b = (rng.uniform(0.5, 2.0, size=s) for s in shapes)
    y = fn(Variable(a), Variable(b))
    np.testing.assert_allclose(y.data, ref(a, b))
    x0, x1 = Variable(a), Variable(b)
    F.sum(fn(x0, x1)).backward()
    assert x0.grad.shape == a.shape and x1.grad.shape == b.shape
    assert gradient_check(lambda x: fn(x, Variable(b)), a)
    assert gradient_check(lambda x: fn(Variable(a), x), b)


@pytest.mark.parametrize("op", BINARY)
def test_broadcasting_with_python_scalar(op):
    fn, ref = BINARY[op]
    a = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    x = Variable(a)
    y = fn(x, 2.0)
    np.testing.assert_allclose(y.data, ref(a, np.float32(2.0)))
    y.backward()
    assert x.grad.shape == a.shape and x.grad.dtype == np.float32


# =============================================================================
# Ops with special gradients: get_item scatter-add, max/min ties, clip, pow
# =============================================================================


def test_get_item_index_array_with_repeats_scatter_adds():
    x = Variable(np.arange(12.0).reshape(4, 3))
    y = x[np.array([0, 0, 1, 0])]
    F.sum(y).backward()
    np.testing.assert_array_equal(x.grad.data[:, 0], [3, 1, 0, 0])


def test_get_item_on_operator_form():
    x = Variable(np.arange(24.0).reshape(2, 3, 4))
    y = x[1, ..., ::2]
    np.testing.assert_array_equal(y.data, x.data[1, ..., ::2])
    y.backward()
    expected = np.zeros((2, 3, 4))
    expected[1, :, ::2] = 1
    np.testing.assert_array_equal(x.grad.data, expected)


# name -> (dezero, torch) reductions; x below has ties for the maximum and minimum
# in rows, columns and overall.
TIED_EXTREMES = {
    "max": (F.max, lambda a: a.amax()),
    "max_axis1": (lambda x: F.max(x, axis=1), lambda a: a.amax(1)),
    "max_axis0_keepdims": (lambda x: x.max(axis=0, keepdims=True),
                           lambda a: a.amax(0, keepdim=True)),
    "max_axes": (lambda x: F.max(x, axis=(0, 2)), lambda a: a.amax((0, 2))),
    "min": (F.min, lambda a: a.amin()),
    "min_axis1": (lambda x: F.min(x, axis=1), lambda a: a.amin(1)),
    "min_axis-1_keepdims": (lambda x: F.min(x, axis=-1, keepdims=True),
                            lambda a: a.amin(-1, keepdim=True)),
}


def _tied():
    return np.array([[[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], [[3.0, 0.0, 3.0], [0.0, 1.0, 0.0]]])


@pytest.mark.parametrize("name", TIED_EXTREMES)
def test_max_min_share_the_gradient_among_ties_as_torch_amax(name, torch):
    fn, torch_fn = TIED_EXTREMES[name]
    x = Variable(_tied())
    y = fn(x)
    w = np.random.default_rng(3).uniform(0.5, 1.5, size=y.shape)
    F.sum(y * w).backward(create_graph=True)
    xt = torch.tensor(_tied(), requires_grad=True)
    (torch_fn(xt) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12)
    # The gradient of each reduction sums to its upstream gradient.
    np.testing.assert_allclose(x.grad.data.sum(), w.sum(), rtol=1e-12)
    assert x.grad.creator is not None  # written with functions: differentiable again


def test_max_min_gradient_splits_ties_without_torch():
    x = Variable(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], dtype=np.float32))
    F.max(x, axis=1).backward()
    np.testing.assert_array_equal(x.grad.data, [[0, 0.5, 0.5], [0.5, 0.5, 0]])
    assert x.grad.dtype == np.float32


# name -> (function, input maker); a traced run of the function and its gradient must
# equal eager execution, call after call with new (tied, batched, large) inputs.
def _ints(*shape, high=3):
    return lambda r: r.integers(0, high, shape).astype(np.float32)


REPLAYED = {
    "max_ties": (lambda x: F.max(x, axis=1), _ints(4, 5)),
    "min_ties_overall": (F.min, _ints(4, 5, high=2)),
    "pooling_simple_ties": (lambda x: F.pooling_simple(x, 2, 2), _ints(2, 2, 4, 4)),
    "linear_batched": (lambda x: F.linear(x, np.arange(6, dtype=np.float32).reshape(3, 2)) ** 2,
                       lambda r: r.standard_normal((2, 4, 3)).astype(np.float32)),
    "log_softmax_large": (F.log_softmax,
                          lambda r: (r.standard_normal((4, 5)) + 1e5).astype(np.float32)),
    "mean_squared_error_ints": (lambda x: F.mean_squared_error(x, np.ones((3, 2), np.int64)),
                                lambda r: r.integers(0, 5, (3, 2))),
}


@pytest.mark.parametrize("name", REPLAYED)
def test_trace_replays_as_eager(name, capsys):
    fn, make = REPLAYED[name]

    def step(x):
        y = fn(x)
        F.sum(y).backward()
        return y, x.grad

    traced = dezero.trace(step)
    r = np.random.default_rng(0)
    with dezero.static.debug(1):  # one line per recording
        for _ in range(3):
            a = make(r)
            y, gx = step(Variable(a.copy()))
            y_t, gx_t = traced(Variable(a.copy()))
            assert y_t.dtype == y.dtype
            assert_replay_equal(y_t.data, y.data)
            if gx is not None:
                np.testing.assert_allclose(gx_t.data, gx.data, rtol=1e-6,
                                           atol=1e-7 if FUSED else 0)
    assert capsys.readouterr().err.count("trace step") == 1  # the later calls replayed


def test_clip_gradient_is_zero_outside_the_range():
    x = Variable(np.array([-2.0, -0.5, 0.5, 2.0], dtype=np.float32))
    F.clip(x, -1.0, 1.0).backward()
    np.testing.assert_array_equal(x.grad.data, [0, 1, 1, 0])
    assert x.grad.dtype == np.float32


@pytest.mark.parametrize("lo, hi", [(None, 1.0), (-1.0, None)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_clip_reads_a_none_bound_as_no_bound_as_numpy(lo, hi, dtype):
    a = np.array([-2, -0.5, 0.5, 2, np.nan] if dtype != np.int64 else [-2, 0, 2], dtype)
    x = Variable(a)
    y = F.clip(x, lo, hi)
    np.testing.assert_array_equal(y.data, np.clip(a, lo, hi))
    assert y.dtype == np.clip(a, lo, hi).dtype
    if dtype != np.int64:
        y.backward()
        np.testing.assert_array_equal(x.grad.data, (a == np.clip(a, lo, hi)).astype(dtype))
    with pytest.raises(ValueError, match="clip: x_min and x_max are both None"):
        F.clip(x, None, None)


def test_clip_with_a_none_bound_matches_torch_clamp(torch):
    a = np.array([-2.0, -0.5, 0.5, 2.0])
    for lo, hi in ((None, 1.0), (-1.0, None)):
        x, tx = Variable(a), torch.tensor(a, requires_grad=True)
        F.clip(x, lo, hi).backward()
        ty = torch.clamp(tx, lo, hi)
        ty.sum().backward()
        np.testing.assert_array_equal(x.grad.data, tx.grad.numpy())


def test_pow_rejects_a_variable_exponent():
    x = Variable(np.array(2.0))
    with pytest.raises(TypeError, match="exponent"):
        F.pow(x, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_square_and_cube_are_products_in_eager_and_in_the_python_replay(dtype):
    # np.power's cube is ~40x as slow as x * x * x and differs from it in the last bit
    # for about a quarter of float32 values; eager computes products, and the replay
    # code must spell exactly that.
    a = (np.random.default_rng(0).standard_normal(4096) * 3).astype(dtype)
    assert (a * a * a != a ** dtype(3)).any()  # the two spellings are not the same bits
    traced = dezero.trace(lambda x: (x ** 3, x ** 2))
    traced(a)
    for y, expected in zip(traced(a), (a * a * a, a * a)):  # the second call replays
        assert y.dtype == dtype
        np.testing.assert_array_equal(y.data, expected, strict=True)
    for c, expected in ((3, a * a * a), (2, a * a)):
        np.testing.assert_array_equal((Variable(a) ** c).data, expected, strict=True)
    ints = np.arange(-5, 6)
    np.testing.assert_array_equal((Variable(ints) ** 3).data, ints ** 3, strict=True)


def test_erf_is_within_two_ulp_of_math_erf_element_by_element():
    # erf's numpy forward is piecewise polynomials in float64; math.erf is the
    # reference, over [-7, 7], near zero, tiny and subnormal values, piece edges and
    # the ends: signed zeros, +-1 beyond 6, inf and NaN.
    rng = np.random.default_rng(0)
    edges = np.arange(0, 6.1, 1 / 32)
    special = [0.0, 5e-324, 1e-310, 1e-300, 1e-20, 1e-8, 5.9, 5.95, 6.0, 30.0, 1e300, np.inf]
    a = np.concatenate([rng.uniform(-7, 7, 200_000), rng.standard_normal(20_000) * 1e-3,
                        edges, np.nextafter(edges, 0), np.nextafter(edges, 7), special])
    a = np.concatenate([a, -a, [np.nan]])
    expected = np.array([math.erf(v) for v in a])
    y = F.erf(a).data
    assert y.dtype == np.float64
    assert np.array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_array_equal(np.signbit(y[a == 0]), np.signbit(a[a == 0]))
    known = ~np.isnan(expected)
    ulps = np.abs(y[known] - expected[known]) / np.spacing(np.abs(expected[known]))
    assert ulps.max() <= 2, a[known][ulps.argmax()]
    with np.errstate(over="ignore"):  # 1e300 is inf in float32
        x32 = a.astype(np.float32)  # float32: computed in float64, then rounded
    y32 = F.erf(x32).data
    assert y32.dtype == np.float32
    np.testing.assert_array_equal(y32, np.array([math.erf(v) for v in x32], np.float32))
    assert F.erf(np.float64(0.5)).data == math.erf(0.5)  # 0-d


def test_gradient_of_x_to_the_zero_is_zero_also_at_zero():
    # c * x ** (c - 1) at c = 0, x = 0 was 0 * inf = NaN (with a divide warning).
    x = Variable(np.array([0.0, 1.0, -2.0], dtype=np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x ** 0).backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.data, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(numerical_grad(lambda v: v ** 0, x.data), [0.0, 0.0, 0.0])
    from dezero import core_simple
    x = core_simple.Variable(np.array(0.0))
    core_simple.pow(x, 0).backward()
    assert x.grad == 0.0


@pytest.mark.parametrize("shape, axis", [((0,), None), ((0, 3), 0), ((3, 0), 1), ((0, 3), 1)])
def test_mean_of_no_elements_is_nan_as_in_numpy(shape, axis):
    # y.size / x.size was a ZeroDivisionError.
    x = Variable(np.zeros(shape))
    y = F.mean(x, axis=axis)
    F.sum(y).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "Mean of empty slice"
        want = np.mean(x.data, axis=axis)
    np.testing.assert_array_equal(y.data, want)
    assert x.grad.shape == x.shape


def test_matmul_shape_error_names_op_and_shapes():
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(2, 4\)"):
        F.matmul(Variable(np.ones((2, 3))), Variable(np.ones((2, 4))))


def test_linear_refuses_a_weight_that_is_not_2d():
    with pytest.raises(ValueError, match=r"linear: W must be 2-d \(in, out\).*\(2, 3, 4\)"):
        F.linear(Variable(np.ones((2, 2, 3))), Variable(np.ones((2, 3, 4))))


def test_transpose_negative_axes_backward():
    x = Variable(np.arange(24.0).reshape(2, 3, 4))
    y = F.transpose(x, (-1, 0, 1))
    assert y.shape == (4, 2, 3)
    assert gradient_check(lambda v: F.transpose(v, (-1, 0, 1)) * np.arange(24.0).reshape(4, 2, 3),
                          x.data)


def test_sum_negative_axis_and_axis_list():
    x = Variable(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(F.sum(x, axis=-1).data, [3, 12])
    np.testing.assert_array_equal(F.sum(x, axis=[0, 1]).data, 15)
    assert gradient_check(lambda v: F.sum(v, axis=-1) * np.array([1.0, 2.0]), x.data)


@pytest.mark.parametrize("x_shape, shape", [((2, 3), (4,)), ((2, 3), (2,)), ((3,), (2, 3)),
                                            ((2, 3), (3, 3)), ((2, 1), (2, 3))], ids=str)
def test_sum_to_an_unreachable_shape_names_both_shapes(x_shape, shape):
    pattern = rf"sum_to: cannot sum shape {re.escape(str(x_shape))} to shape " \
              rf"{re.escape(str(shape))}"
    with pytest.raises(ValueError, match=pattern):
        F.sum_to(Variable(np.ones(x_shape)), shape)


def test_reshape_and_broadcast_of_same_shape_return_the_input():
    x = Variable(np.ones((2, 3)))
    assert F.reshape(x, (2, 3)) is x
    assert F.broadcast_to(x, (2, 3)) is x
    assert F.sum_to(x, (2, 3)) is x


@pytest.mark.parametrize("axis", [3, -4, 5])
def test_expand_dims_refuses_an_axis_out_of_range_as_numpy(axis):
    a = np.zeros((4, 3))
    with pytest.raises(ValueError, match=rf"expand_dims: axis {axis} is out of range for "
                                         r"shape \(4, 3\).*-3\.\.2"):
        F.expand_dims(Variable(a), axis)
    with pytest.raises(np.exceptions.AxisError if hasattr(np, "exceptions") else ValueError):
        np.expand_dims(a, axis)


@pytest.mark.parametrize("axis", [-3, -1, 0, 2])
def test_expand_dims_in_range_matches_numpy(axis):
    a = np.zeros((4, 3))
    assert F.expand_dims(Variable(a), axis).shape == np.expand_dims(a, axis).shape


@pytest.mark.parametrize("shape", [(0, 3, 4), (0, 0), (2, 0, 5)], ids=str)
def test_flatten_of_an_empty_batch_keeps_the_batch_axis(shape):
    x = Variable(np.zeros(shape))
    y = F.flatten(x)
    assert y.shape == (shape[0], int(np.prod(shape[1:])))
    y.backward()
    assert x.grad.shape == shape


@pytest.mark.parametrize("x_shape", [(2, 3, 0), (0, 3, 4), (2, 0, 4)], ids=str)
def test_linear_backward_on_batched_inputs_with_an_empty_axis(x_shape):
    x = Variable(np.ones(x_shape))
    W = Variable(np.ones((x_shape[-1], 5)))
    y = F.linear(x, W, Variable(np.ones(5)))
    y.backward()
    assert x.grad.shape == x_shape and W.grad.shape == W.shape
    rows = int(np.prod(x_shape[:-1]))
    np.testing.assert_array_equal(W.grad.data, np.full(W.shape, rows))


@pytest.mark.parametrize("name", ["max", "min", "sum"])
def test_reductions_take_a_list_of_axes_as_numpy(name):
    a = np.random.default_rng(0).normal(size=(2, 3, 4))
    x = Variable(a)
    y = getattr(F, name)(x, axis=[0, 2])
    np.testing.assert_array_equal(y.data, getattr(np, name)(a, axis=(0, 2)))
    assert gradient_check(lambda v: getattr(F, name)(v, axis=[0, 2]), a)


@pytest.mark.parametrize("name", ["reshape", "broadcast_to", "sum_to"])
def test_shape_functions_take_an_int_shape_as_numpy_and_name_a_bad_one(name):
    x = Variable(np.ones((6,)) if name != "broadcast_to" else np.ones((1,)))
    assert getattr(F, name)(x, 6).shape == (6,)
    assert getattr(F, name)(x, np.int64(6)).shape == (6,)
    with pytest.raises(TypeError, match=rf"{name}: shape must be an int or a tuple of ints, "
                                        r"got 6\.0"):
        getattr(F, name)(x, 6.0)
    with pytest.raises(TypeError, match=rf"{name}: shape must be"):
        getattr(F, name)(x, (2, "3"))
