"""Step 40: broadcasting, and its backward sum_to.

numpy stretches a (3,) array and a (1,) array to a common shape before
adding them. The gradient must undo that: an element that was copied to
several places gets the sum of their gradients. `broadcast_to(x, shape)`
and `sum_to(x, shape)` are each other's backward, and the arithmetic
Functions use sum_to so that `x1.grad` has x1's shape.
Run: python steps/step40.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable

x = Variable(np.array([1, 2, 3]))
y = F.broadcast_to(x, (2, 3))
y.backward()
print("broadcast_to (2, 3):", y.shape, " x.grad =", x.grad)

x = Variable(np.array([[1, 2, 3], [4, 5, 6]]))
y = F.sum_to(x, (1, 3))
print("sum_to (1, 3):", y)
y = F.sum_to(x, (2, 1))
print("sum_to (2, 1):", y.data.ravel())

x0 = Variable(np.array([1, 2, 3]))
x1 = Variable(np.array([10]))
y = x0 + x1
y.backward()
print("x0 + x1 =", y)
print("x1.grad =", x1.grad, " shape", x1.grad.shape)
