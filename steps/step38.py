"""Step 38: functions that change shape -- reshape and transpose.

Reshape and transpose move elements around without computing anything, so
their backward just moves the gradient back: reshape it to the input's
shape, or transpose it with the inverse axes order. Variable also gets the
numpy-style methods `x.reshape(...)`, `x.transpose(...)` and `x.T`.
Run: python steps/step38.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable

x = Variable(np.array([[1, 2, 3], [4, 5, 6]]))
y = F.reshape(x, (6,))
y.backward(retain_grad=True)
print("reshape to (6,):", y, " x.grad shape:", x.grad.shape)

x.cleargrad()
y = F.transpose(x)
y.backward()
print("transpose shape:", y.shape, " x.grad shape:", x.grad.shape)

print("x.reshape((3, 2)) shape:", x.reshape((3, 2)).shape, " x.reshape(3, 2) shape:",
      x.reshape(3, 2).shape)
print("x.T shape:", x.T.shape)

# With an axes order, the gradient goes back through the inverse order:
# y[i, j, k] = x[k, i, j], so x.grad[k, i, j] = w[i, j, k].
x = Variable(np.arange(24.0).reshape(2, 3, 4))
y = x.transpose(1, 2, 0)
w = np.arange(24.0).reshape(3, 4, 2)
(y * w).sum().backward()
print("transpose(1, 2, 0):", x.shape, "->", y.shape, " x.grad shape:", x.grad.shape)
print("x.grad == w.transpose(2, 0, 1):", np.array_equal(x.grad.data, w.transpose(2, 0, 1)))
