"""Step 37: working with tensors.

So far every Variable held a scalar. Elementwise functions (sin, +, *) work
unchanged on arrays of any shape: they apply per element, and the gradient
of each element is computed independently, so `x.grad` always has the shape
of `x`. Backward of a non-scalar output starts from an array of ones, which
is the same as differentiating the sum of its elements.
Run: python steps/step37.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable

x = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
c = Variable(np.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]]))
y = F.sin(x)
print("sin(x) =", y)

y = x * c + c
print("x * c + c =", y)
y.backward(retain_grad=True)
print("y.grad =", y.grad)  # the ones backward starts from
print("x.grad =", x.grad, " shape", x.grad.shape)  # = c
print("c.grad =", c.grad)  # = x + 1
