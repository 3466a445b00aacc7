"""Step 34: higher derivatives of sin, in a loop.

Each call `gx.backward(create_graph=True)` differentiates the previous
derivative, so a loop produces the n-th derivative: sin, cos, -sin, -cos.
The backward of Sin and Cos are written with Functions (cos and -sin), which
is what makes the loop work. The curves are plotted over [-7, 7].
Run: python steps/step34.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero.functions as F
from dezero import Variable


def derivatives(x, n):
    """[sin(x), sin'(x), ..., sin^(n)(x)] as arrays."""
    y = F.sin(x)
    values = [y.data]
    for _ in range(n):
        x.cleargrad()
        y.backward(create_graph=True)
        y = x.grad
        values.append(y.data)
    return values


names = ["y=sin(x)", "y'", "y''", "y'''"]
at_one = derivatives(Variable(np.array(1.0)), 3)
expected = [np.sin(1.0), np.cos(1.0), -np.sin(1.0), -np.cos(1.0)]
for name, value, exact in zip(names, at_one, expected):
    print(f"{name:9s} at x=1: {float(value): .6f}  (exact {exact: .6f})")

x = Variable(np.linspace(-7, 7, 200))
curves = derivatives(x, 3)
plt = pyplot()
if plt is not None:
    for name, curve in zip(names, curves):
        plt.plot(x.data, curve, label=name)
    plt.legend(loc="lower right")
    plt.savefig("sin_derivatives.png")
    print("plot saved to sin_derivatives.png")
