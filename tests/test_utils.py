"""dezero.utils: numerical gradients, gradient_check, shape helpers and sizes."""
import numpy as np
import pytest

import dezero.functions as F
from dezero import Function, Variable, utils


def test_numerical_grad_of_a_known_function():
    x = np.array([[0.5, -1.0], [2.0, 0.0]])
    grad = utils.numerical_grad(lambda v: v ** 3, Variable(x))
    np.testing.assert_allclose(grad, 3 * x ** 2, rtol=1e-6, atol=1e-7)
    assert grad.shape == x.shape


def test_numerical_grad_on_plain_arrays_with_extra_args():
    x = np.array([1.0, 2.0])
    grad = utils.numerical_grad(lambda v, c: v * c, x, 3.0)
    np.testing.assert_allclose(grad, [3.0, 3.0])


def test_numerical_grad_leaves_the_input_unchanged():
    x = np.array([1.0, 2.0])
    utils.numerical_grad(np.sin, x)
    np.testing.assert_array_equal(x, [1.0, 2.0])


class WrongSquare(Function):
    def forward(self, x):
        return x * x

    def backward(self, gy):
        x, = self.inputs
        return gy * x  # should be 2 * x * gy


def test_gradient_check_accepts_a_right_backward():
    assert utils.gradient_check(F.tanh, np.linspace(-1, 1, 4))


def test_gradient_check_rejects_a_wrong_backward_and_names_the_worst_element(capsys):
    x = np.array([[0.1, 0.2], [0.3, 3.0]])
    assert utils.gradient_check(lambda v: WrongSquare()(v), x) is False
    out = capsys.readouterr().out
    assert "worst element at (1, 1)" in out
    assert "backprop 3," in out and "numerical 6 " in out


def test_gradient_check_works_from_float32_input():
    x = np.array([0.3, 0.7], dtype=np.float32)
    assert utils.gradient_check(F.sin, x)


@pytest.mark.parametrize("shape, target, expected", [
    ((2, 3), (3,), [5, 7, 9]),
    ((2, 3), (1, 3), [[5, 7, 9]]),
    ((2, 3), (2, 1), [[6], [15]]),
    ((2, 3), (), 21),
    ((2, 3), (2, 3), [[1, 2, 3], [4, 5, 6]]),
])
def test_sum_to(shape, target, expected):
    x = np.arange(1, 7).reshape(shape)
    y = utils.sum_to(x, target)
    assert y.shape == target
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("x_shape, axis, keepdims, gy_shape, expected", [
    ((2, 3, 4), 1, False, (2, 4), (2, 1, 4)),
    ((2, 3, 4), (0, 2), False, (3,), (1, 3, 1)),
    ((2, 3, 4), -1, False, (2, 3), (2, 3, 1)),
    ((2, 3, 4), 1, True, (2, 1, 4), (2, 1, 4)),
    ((2, 3, 4), None, False, (), ()),
])
def test_reshape_sum_backward(x_shape, axis, keepdims, gy_shape, expected):
    gy = Variable(np.ones(gy_shape))
    assert utils.reshape_sum_backward(gy, x_shape, axis, keepdims).shape == expected


def test_logsumexp_is_stable_for_large_values():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]])
    y = utils.logsumexp(x, axis=1)
    np.testing.assert_allclose(y, [[1000 + np.log(2)], [-1000 + np.log(2)]])
    small = np.array([[0.5, 1.5, -2.0]])
    np.testing.assert_allclose(utils.logsumexp(small), np.log(np.exp(small).sum(1, keepdims=True)))


@pytest.mark.parametrize("axis, expected", [(None, (1, 1, 1)), (1, (2, 1, 4)),
                                            ((0, 2), (1, 3, 1)), (-1, (2, 3, 1))])
def test_max_backward_shape(axis, expected):
    assert utils.max_backward_shape(np.zeros((2, 3, 4)), axis) == expected


def test_conv_sizes_and_pair():
    assert utils.get_conv_outsize(4, 3, 1, 1) == 4
    assert utils.get_conv_outsize(28, 5, 2, 0) == 12
    assert utils.get_deconv_outsize(4, 3, 1, 1) == 4
    assert utils.get_deconv_outsize(12, 4, 2, 1) == 24
    # deconv undoes conv's size when stride divides evenly
    assert utils.get_conv_outsize(utils.get_deconv_outsize(7, 4, 2, 1), 4, 2, 1) == 7
    assert utils.pair(3) == (3, 3) and utils.pair((2, 5)) == (2, 5)
    assert utils.pair(np.int64(2)) == (2, 2)
    with pytest.raises(ValueError, match="pair"):
        utils.pair((1, 2, 3))


def test_array_equal_and_allclose_accept_variables():
    a = Variable(np.array([1.0, 2.0]))
    assert utils.array_equal(a, np.array([1.0, 2.0]))
    assert utils.array_allclose(a, np.array([1.0, 2.0 + 1e-7]))
    assert not utils.array_allclose(a, np.array([1.0, 2.1]))
