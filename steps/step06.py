"""Step 6: backpropagation by hand.

Adds `Variable.grad` and `Function.backward(gy)`. Each Function now keeps
its input from the forward pass, because its local derivative is evaluated
there. The backward calls are still made by hand, in reverse order.
Run: python steps/step06.py
"""
import numpy as np


# =============================================================================
# Framework: Variable, Function, Square, Exp
# =============================================================================
class Variable:
    def __init__(self, data):
        self.data = data
        self.grad = None  # filled by backpropagation


class Function:
    def __call__(self, input):
        x = input.data
        y = self.forward(x)
        self.input = input  # backward evaluates the derivative at this input
        return Variable(y)

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


# =============================================================================
# Demo: forward through A, B, C, then backward through C, B, A by hand
# =============================================================================
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)

y.grad = np.array(1.0)  # dy/dy
b.grad = C.backward(y.grad)
a.grad = B.backward(b.grad)
x.grad = A.backward(a.grad)
print("x.grad =", x.grad)
