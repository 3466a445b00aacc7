"""Step 4: numerical differentiation.

Adds `numerical_diff`, the central difference (f(x+h) - f(x-h)) / 2h. It
works for any function but costs two evaluations per input and loses
precision to rounding, which is why the next steps build backpropagation.
It stays useful as a check of the analytic gradients (see step 10).
Run: python steps/step04.py
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
# Numerical differentiation: numerical_diff
# =============================================================================
def numerical_diff(f, x, eps=1e-4):
    """Central difference: its error shrinks like eps**2 (forward: like eps)."""
    y_plus = f(Variable(x.data + eps))
    y_minus = f(Variable(x.data - eps))
    return (y_plus.data - y_minus.data) / (2 * eps)


# =============================================================================
# Demo: d/dx x^2 at 2, and the composite y = (e^(x^2))^2 at 0.5
# =============================================================================
f = Square()
x = Variable(np.array(2.0))
print("numerical d(x^2)/dx at 2.0:", numerical_diff(f, x))


def composite(x):
    A, B, C = Square(), Exp(), Square()
    return C(B(A(x)))


x = Variable(np.array(0.5))
dy = numerical_diff(composite, x)
exact = 4 * 0.5 * np.exp(2 * 0.5 ** 2)  # y = e^(2x^2), y' = 4x e^(2x^2)
print("numerical dy/dx at 0.5:", dy)
print("exact     dy/dx at 0.5:", exact)
print(f"absolute error: {abs(dy - exact):.1e}")
