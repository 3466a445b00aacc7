"""dtypes of 0-d inputs: a float32 scalar stays float32 through every elementwise
op, forward, gradient and gradient of the gradient.

Under numpy 1.x, a 0-d float32 array meeting a Python number in an array
expression (x * 0.5, maximum(x, 0), x ** 2.0) is promoted to float64 by value-based
casting; numpy 2 keeps float32 (NEP 50). CI runs this module under both.
"""
import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable

# name -> (function, input value); values sit away from kinks and inside domains.
ZERO_D = {
    "sigmoid": (F.sigmoid, -0.7),
    "relu": (F.relu, 0.7),
    "relu_negative": (F.relu, -0.7),
    "leaky_relu": (F.leaky_relu, -0.7),
    "leaky_relu_positive": (lambda x: F.leaky_relu(x, slope=0.1), 0.7),
    "softplus": (F.softplus, -0.7),
    "clip": (lambda x: F.clip(x, -1.0, 1.0), 0.7),
    "clip_outside": (lambda x: F.clip(x, 0, 0.5), 0.7),
    "pow2": (lambda x: x ** 2, -0.7),
    "pow3": (lambda x: F.pow(x, 3), -0.7),
    "pow2.5": (lambda x: x ** 2.5, 0.7),
    "pow-1": (lambda x: x ** -1, -0.7),
    "pow0.5": (lambda x: x ** 0.5, 0.7),
    "sin": (F.sin, 0.7), "cos": (F.cos, 0.7), "tan": (F.tan, 0.7), "tanh": (F.tanh, 0.7),
    "exp": (F.exp, 0.7), "log": (F.log, 0.7), "sqrt": (F.sqrt, 0.7),
    "square": (F.square, -0.7), "abs": (F.abs, -0.7), "neg": (F.neg, 0.7),
    "sigmoid_simple": (F.sigmoid_simple, -0.7),
    "scalar_arithmetic": (lambda x: (2 * x + 1) / 3 - 1.5 / x, 0.7),
    "sum": (F.sum, 0.7), "mean": (F.mean, 0.7), "max": (F.max, 0.7),
    "erf": (F.erf, -0.7), "gelu": (F.gelu, -0.7), "silu": (F.silu, -0.7),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), -0.7),
}


@pytest.mark.parametrize("name", ZERO_D)
def test_0d_float32_stays_float32_forward_and_backward(name):
    fn, value = ZERO_D[name]
    x = Variable(np.array(value, dtype=np.float32))
    y = fn(x)
    assert y.dtype == np.float32 and y.shape == (), f"{name}: forward gave {y.dtype}"
    y.backward(create_graph=True)
    assert x.grad.dtype == np.float32, f"{name}: gradient {x.grad.dtype}"
    gx = x.grad
    x.cleargrad()
    gx.backward()
    assert x.grad is None or x.grad.dtype == np.float32, f"{name}: second derivative"


@pytest.mark.parametrize("name", ["sigmoid", "relu", "leaky_relu", "softplus", "clip",
                                  "pow2.5"])
def test_0d_values_match_float64(name):
    fn, value = ZERO_D[name]
    y32 = fn(Variable(np.array(value, dtype=np.float32))).data
    y64 = fn(Variable(np.array(value, dtype=np.float32).astype(np.float64))).data
    np.testing.assert_allclose(y32, y64, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float16], ids=str)
def test_a_0d_array_argument_meets_a_python_number_in_a_trace_as_in_numpy(dtype):
    # numpy 1.x promotes a 0-d array and a Python number as two scalars (float32 0-d
    # * 2.0 is float64 there); the recording promoted them as a Variable and an array.
    def step(s):
        return s * 2.0, 3 - s, s / 2

    s = np.array(3, dtype)
    y = dezero.trace(step).lower(s)(s)
    for got, want in zip(y, step(s), strict=True):
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got.data, want)


@pytest.mark.filterwarnings("ignore:step. output . depends on no argument")  # linear ops
@pytest.mark.parametrize("backend", ["python", "interpreter"])
@pytest.mark.parametrize("name", sorted(ZERO_D))
def test_0d_float32_stays_float32_in_a_replay(name, backend):
    fn, value = ZERO_D[name]

    def step(x):
        y = fn(x)
        y.backward()
        return y, x.grad

    x = np.array(value, dtype=np.float32)
    graph = dezero.trace(step).lower(Variable(x))
    eager_y, eager_gx = step(Variable(x))
    y, gx = graph.compile(backend)(Variable(x))
    assert (y.dtype, gx.dtype) == (np.float32, np.float32), f"{name}: {y.dtype}, {gx.dtype}"
    np.testing.assert_array_equal(y.data, eager_y.data)
    np.testing.assert_array_equal(gx.data, eager_gx.data)


NUMPY_2 = int(np.__version__.split(".")[0]) >= 2
SCALAR_OPS = {"mul": lambda v, n: v * n, "add": lambda v, n: v + n, "sub": lambda v, n: v - n,
              "rsub": lambda v, n: n - v, "div": lambda v, n: v / n, "rdiv": lambda v, n: n / v}


@pytest.mark.parametrize("dtype, values, op, number", [
    (np.uint8, [3], "mul", -1), (np.uint8, [10], "sub", 300), (np.int32, [1], "mul", 2**40),
    (np.int8, [1, 2], "mul", 200), (np.int8, [1], "add", -200), (np.uint8, [3], "rsub", 1000),
    (np.uint64, [1], "add", -1), (np.int16, [7, -7], "mul", 3), (np.uint8, [3], "add", True),
    (np.bool_, [True], "add", 2), (np.int8, [1], "mul", 2.5), (np.uint8, [7], "mul", 0.5),
    (np.int32, [3], "div", 2), (np.float32, [1.5], "mul", 2.5), (np.float32, [1.5], "add", 2),
    (np.float16, [1.5], "mul", 1e6), (np.float32, [1.5], "mul", 1e300),
    (np.float32, [1.5], "mul", 1j), (np.float64, [1.5], "sub", 2**40),
    # numpy 1.x: an int the float dtype cannot hold exactly widens it (float32 there)
    (np.float16, [1.5], "add", 300), (np.float32, [1.5], "mul", 2**40),
    # a division of integers is in float64, for numpy 2 an int beyond the dtype too
    (np.uint8, [3], "div", -1), (np.int32, [3], "div", 2**40), (np.uint8, [3], "rdiv", 300)],
    ids=str)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("ndim", [1, 0])
def test_a_python_number_meets_an_array_as_in_numpy(dtype, values, op, number, ndim):
    # numpy 2 (NEP 50): the array's dtype holds the number or OverflowError; numpy 1.x:
    # value-based casting (uint8 [3] * -1 is int16). A 0-d Variable counts as an array.
    a = np.array(values, dtype)
    try:
        expected = SCALAR_OPS[op](a, number)
    except OverflowError:
        with pytest.raises(OverflowError, match=f"Python integer {number} out of bounds.*widen"):
            SCALAR_OPS[op](Variable(a if ndim else np.array(a[0])), number)
        return
    y = SCALAR_OPS[op](Variable(a if ndim else np.array(a[0])), number)
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y.data, expected if ndim else expected[0])


def test_numpy_2_refuses_a_python_int_beyond_the_dtype_and_numpy_1_widens():
    a = Variable(np.array([3], np.uint8))
    if NUMPY_2:
        for number in (-1, 300, 2**40):
            with pytest.raises(OverflowError, match="out of bounds for uint8"):
                a * number
    else:
        assert (a * -1).dtype == np.int16 and (a * -1).data[0] == -3
    assert (Variable(np.array([1.0], np.float32)) * 2.5).dtype == np.float32


@pytest.mark.filterwarnings("ignore:step. output . depends on no argument")
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("backend", ["python", "interpreter"])
@pytest.mark.parametrize("dtype, number", [(np.uint8, 3), (np.uint8, 300), (np.int8, -200),
                                           (np.float16, 1e6), (np.int8, 2.5),
                                           (np.float16, 300)], ids=str)
def test_a_python_number_in_a_replay_as_in_eager(dtype, number, backend):
    # The trace's constant is the array the eager op was given: same dtype, same refusal.
    def step(x):
        return x * number - 1

    x = np.array([1, 2], dtype)
    try:
        expected = np.array([1, 2], dtype) * number - 1
    except OverflowError:
        with pytest.raises(OverflowError, match="out of bounds"):
            dezero.trace(step).lower(Variable(x))
        return
    y = dezero.trace(step).lower(Variable(x)).compile(backend)(Variable(x))
    assert y.dtype == step(Variable(x)).dtype == expected.dtype
    np.testing.assert_array_equal(y.data, expected)
