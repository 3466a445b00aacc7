"""Step 36: uses of double backprop beyond higher derivatives.

A gradient computed with create_graph=True is an ordinary Variable, so it
can appear inside a new expression, and backprop goes through it. Here
y = x^2, its gradient gx = 2x, and z = gx^3 + y = 8x^3 + x^2, so
dz/dx = 24x^2 + 2x = 100 at x = 2. The same mechanism computes gradient
penalties (WGAN-GP) and Hessian-vector products.
Run: python steps/step36.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dezero import Variable

x = Variable(np.array(2.0))
y = x ** 2
y.backward(create_graph=True)
gx = x.grad
x.cleargrad()

z = gx ** 3 + y
z.backward()
print("gx =", gx)
print("z =", z)
print("dz/dx =", x.grad)

# A Hessian-vector product without forming the Hessian: d/dx (grad f . v).
x = Variable(np.array([1.0, 2.0]))
v = np.array([1.0, -1.0])
f = x[0] ** 2 * x[1] + x[1] ** 3  # Hessian [[2 x1, 2 x0], [2 x0, 6 x1]]
f.backward(create_graph=True)
gv = (x.grad * v).sum()
x.cleargrad()
gv.backward()
print("Hessian @ v =", x.grad, "(exact [2, -10])")
