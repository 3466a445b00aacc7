"""Step 9: friendlier functions.

Three conveniences: Python functions `square(x)` and `exp(x)` instead of
`Square()(x)`; `backward()` seeds the output gradient with ones itself; and
Variable accepts only ndarrays (or None), while `as_array` turns the numpy
scalars that operations on 0-d arrays return back into arrays.
Run: python steps/step09.py
"""
import numpy as np


# =============================================================================
# Framework: Variable, Function, as_array
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
            self.grad = np.ones_like(self.data)  # dy/dy = 1, same shape as y
        funcs = [self.creator]
        while funcs:
            f = funcs.pop()
            x, y = f.input, f.output
            x.grad = f.backward(y.grad)
            if x.creator is not None:
                funcs.append(x.creator)


def as_array(x):
    """0-d arrays come back from numpy ops as numpy scalars; make them arrays again."""
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


# =============================================================================
# Functions: square, exp
# =============================================================================
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


# =============================================================================
# Demo: one line forward, one call backward, and the type check
# =============================================================================
x = Variable(np.array(0.5))
y = square(exp(square(x)))
y.backward()
print("x.grad =", x.grad)

print("type of (0-d array)**2:", type(np.array(1.0) ** 2).__name__, "-> as_array fixes it")
try:
    Variable(1.0)
except TypeError as e:
    print("TypeError:", e)
