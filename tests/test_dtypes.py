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


@pytest.mark.parametrize("dtype, values, op, number", [
    (np.int8, [1, 2], "mul", 200), (np.uint8, [3], "mul", -1), (np.int8, [1], "add", -200),
    (np.uint8, [3], "rsub", 1000), (np.int16, [7, -7], "mul", 3)], ids=str)
def test_a_python_int_beyond_an_integer_dtype_widens_it_rather_than_wrapping(
        dtype, values, op, number):
    # numpy 1.x value-based casting: the int's smallest dtype joins the array's.
    a = np.array(values, dtype)
    ops = {"mul": lambda v: v * number, "add": lambda v: v + number,
           "rsub": lambda v: number - v}
    y = ops[op](Variable(a))
    wide = ops[op](a.astype(np.int64))
    np.testing.assert_array_equal(y.data, wide)
    assert y.dtype == np.promote_types(dtype, np.min_scalar_type(number))
