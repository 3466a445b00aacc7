"""Step 13: backpropagation with several inputs.

`backward(*gys)` now returns one gradient per input, and
`Variable.backward` hands each gradient to the matching input. Functions
reach their inputs through `self.inputs`. Try z = x^2 + y^2: dz/dx = 2x,
dz/dy = 2y.
Run: python steps/step13.py
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
            self.grad = np.ones_like(self.data)
        funcs = [self.creator]
        while funcs:
            f = funcs.pop()
            gys = [output.grad for output in f.outputs]
            gxs = f.backward(*gys)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs):
                x.grad = gx
                if x.creator is not None:
                    funcs.append(x.creator)


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


class Function:
    def __call__(self, *inputs):
        xs = [x.data for x in inputs]
        ys = self.forward(*xs)
        if not isinstance(ys, tuple):
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]
        for output in outputs:
            output.set_creator(self)
        self.inputs = inputs
        self.outputs = outputs
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(*xs) returning array(s)")

    def backward(self, *gys):
        raise NotImplementedError(
            f"{type(self).__name__} must define backward(*gys) returning one gradient per input")


# =============================================================================
# Functions: add, square, exp
# =============================================================================
class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy  # d(x0 + x1)/dx0 = d(x0 + x1)/dx1 = 1


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        return 2 * self.inputs[0].data * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        return np.exp(self.inputs[0].data) * gy


def add(x0, x1):
    return Add()(x0, x1)


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


# =============================================================================
# Demo: z = x^2 + y^2 at (2, 3)
# =============================================================================
x = Variable(np.array(2.0))
y = Variable(np.array(3.0))
z = add(square(x), square(y))
z.backward()
print("z =", z.data)
print("x.grad =", x.grad)
print("y.grad =", y.grad)
