"""Step 39: the sum function.

The sum collapses elements, so its backward spreads the gradient back:
every input element receives the output's gradient, copied (broadcast) to
the input's shape. `axis` sums along chosen axes and `keepdims` keeps them
as length-1 axes; the backward handles both.
Run: python steps/step39.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable

x = Variable(np.array([1, 2, 3, 4, 5, 6]))
y = F.sum(x)
y.backward()
print("sum =", y, " x.grad =", x.grad)

x = Variable(np.array([[1, 2, 3], [4, 5, 6]]))
y = F.sum(x, axis=0)
y.backward()
print("sum(axis=0) =", y, " x.grad shape:", x.grad.shape)

x = Variable(np.random.default_rng(0).standard_normal((2, 3, 4, 5)))
y = x.sum(keepdims=True)
print("sum(keepdims=True) shape:", y.shape)
