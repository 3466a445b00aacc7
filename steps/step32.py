"""Step 32: higher-order derivatives, implementation -- create_graph.

dezero/core.py records its own backward with three pieces: gradients are
Variables, every backward method uses Functions, and `Variable.backward`
runs them with `Config.enable_backprop` set to `create_graph`. Differentiating
x.grad again (after clearing x.grad, which would otherwise accumulate) gives
the second derivative. For y = x^4 - 2x^2 at x = 2: y' = 4x^3 - 4x = 24 and
y'' = 12x^2 - 4 = 44.
Run: python steps/step32.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dezero import Variable


def f(x):
    return x ** 4 - 2 * x ** 2


x = Variable(np.array(2.0))
y = f(x)
y.backward()
print("create_graph=False: x.grad =", x.grad, " creator:", x.grad.creator)

x.cleargrad()
y = f(x)
y.backward(create_graph=True)
gx = x.grad
print("create_graph=True:  x.grad =", gx, " creator:", type(gx.creator).__name__)

x.cleargrad()  # without this the second backward adds to the first gradient
gx.backward()
print("second derivative:  x.grad =", x.grad)
