"""The small core of steps 23-32 (dezero/core_simple.py), imported directly."""
import numpy as np
import pytest

from dezero import core_simple
from dezero.core_simple import Variable, no_grad, setup_variable

setup_variable()


def test_polynomial_gradient():
    x = Variable(np.array(2.0))
    y = x ** 3 + 2 * x - 1 / x + (4 - x) * -x
    y.backward()
    assert np.isclose(y.data, 8 + 4 - 0.5 - 4)
    assert np.isclose(x.grad, 3 * 4 + 2 + 1 / 4 - 4 + 2 * 2)  # d/dx of x^2 - 4x is 2x - 4


def test_diamond_graph_adds_gradients_in_generation_order():
    x = Variable(np.array(2.0))
    a = x ** 2
    y = a ** 2 + a ** 2  # 2 x^4
    y.backward()
    assert x.grad == 64.0  # 8 x^3
    assert a.grad is None  # intermediate gradients are dropped unless retained


def test_retain_grad_and_no_grad():
    x = Variable(np.array(3.0))
    a = x * x
    y = a + 1
    y.backward(retain_grad=True)
    assert a.grad == 1.0 and y.grad == 1.0
    with no_grad():
        z = x * 2
    assert z.creator is None
    assert core_simple.Config.enable_backprop is True


def test_operators_with_arrays_and_float32():
    x = Variable(np.array([1.0, 2.0], dtype=np.float32))
    y = np.array([3.0, 3.0], dtype=np.float32) * x - x / 2.0
    assert isinstance(y, Variable) and y.dtype == np.float32
    y.backward()
    np.testing.assert_allclose(x.grad, [2.5, 2.5])
    assert x.grad.dtype == np.float32
    assert repr(Variable(np.array([[1, 2], [3, 4]]))) == "variable([[1 2]\n          [3 4]])"


def test_deep_chain_does_not_recurse():
    x = Variable(np.array(0.0))
    y = x
    for _ in range(5000):
        y = y + 1
    y.backward()
    assert x.grad == 1.0 and y.data == 5000


def test_rejects_non_arrays():
    with pytest.raises(TypeError, match="float"):
        Variable(1.0)
