"""Step 10: testing the framework.

Adds unit tests (the standard library's unittest) for the functions of
step 9. The key test is the gradient check: the gradient from backprop must
match the central difference of step 4 on random inputs. Running this file
runs the tests and exits non-zero when one fails.
Run: python steps/step10.py   (or: python -m unittest steps/step10.py)
"""
import sys
import unittest

import numpy as np


# =============================================================================
# Framework (as in step 9): Variable, Function, square, exp, numerical_diff
# =============================================================================
class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(
                f"Variable holds a numpy.ndarray, got {type(data).__name__}; "
                f"wrap it first: Variable(np.array({data!r}))")
        self.data = data
        self.grad = None
        self.creator = None

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)
        funcs = [self.creator]
        while funcs:
            f = funcs.pop()
            x, y = f.input, f.output
            x.grad = f.backward(y.grad)
            if x.creator is not None:
                funcs.append(x.creator)


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


class Function:
    def __call__(self, input):
        x = input.data
        y = self.forward(x)
        output = Variable(as_array(y))
        output.set_creator(self)
        self.input = input
        self.output = output
        return output

    def forward(self, x):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(x) returning an array")

    def backward(self, gy):
        raise NotImplementedError(
            f"{type(self).__name__} must define backward(gy) returning the input's gradient")


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        return 2 * self.input.data * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        return np.exp(self.input.data) * gy


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def numerical_diff(f, x, eps=1e-4):
    y_plus = f(Variable(x.data + eps))
    y_minus = f(Variable(x.data - eps))
    return (y_plus.data - y_minus.data) / (2 * eps)


# =============================================================================
# Tests: SquareTest, ExpTest
# =============================================================================
class SquareTest(unittest.TestCase):
    def test_forward(self):
        y = square(Variable(np.array(2.0)))
        self.assertEqual(y.data, np.array(4.0))

    def test_backward(self):
        x = Variable(np.array(3.0))
        square(x).backward()
        self.assertEqual(x.grad, np.array(6.0))

    def test_gradient_check(self):
        rng = np.random.default_rng(0)
        for _ in range(5):
            x = Variable(rng.random(1))
            square(x).backward()
            self.assertTrue(np.allclose(x.grad, numerical_diff(square, x)))


class ExpTest(unittest.TestCase):
    def test_forward(self):
        y = exp(Variable(np.array(0.0)))
        self.assertEqual(y.data, np.array(1.0))

    def test_gradient_check_of_composite(self):
        rng = np.random.default_rng(1)
        f = lambda v: square(exp(square(v)))
        x = Variable(rng.random(1))
        f(x).backward()
        self.assertTrue(np.allclose(x.grad, numerical_diff(f, x)))


if __name__ == "__main__":
    program = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    result = program.result
    print(f"ran {result.testsRun} tests, failures: {len(result.failures)}, "
          f"errors: {len(result.errors)}")
    sys.exit(0 if result.wasSuccessful() else 1)
