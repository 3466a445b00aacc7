"""Step 2: a Function turns one Variable into another.

Adds the `Function` base class: calling it unwraps the input Variable, runs
`forward` on the raw array and wraps the result in a new Variable. `Square`
is the first concrete function.
Run: python steps/step02.py
"""
import numpy as np


# =============================================================================
# Framework: Variable, Function, Square
# =============================================================================
class Variable:
    def __init__(self, data):
        self.data = data


class Function:
    """Boxes in, boxes out; subclasses only see arrays in `forward`."""

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


# =============================================================================
# Demo: square a Variable
# =============================================================================
x = Variable(np.array(10))
f = Square()
y = f(x)
print(type(y).__name__, "y.data =", y.data)
