"""Step 3: chaining functions into a composite function.

Adds `Exp`. Because every Function takes and returns a Variable, functions
can be plugged one after another: y = square(exp(square(x))) is just three
calls in a row. This chain is the "computational graph" later steps walk.
Run: python steps/step03.py
"""
import numpy as np


# =============================================================================
# Framework: Variable, Function, Square, Exp
# =============================================================================
class Variable:
    def __init__(self, data):
        self.data = data


class Function:
    def __call__(self, input):
        x = input.data
        y = self.forward(x)
        return Variable(y)

    def forward(self, x):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(x) returning an array")


class Square(Function):
    def forward(self, x):
        return x ** 2


class Exp(Function):
    def forward(self, x):
        return np.exp(x)


# =============================================================================
# Demo: x -> A -> a -> B -> b -> C -> y
# =============================================================================
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
print("y.data =", y.data)  # (e^(0.5^2))^2 = e^0.5
print("e^0.5  =", np.exp(0.5))
