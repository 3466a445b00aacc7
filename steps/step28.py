"""Step 28: minimising the Rosenbrock function by gradient descent.

The gradient points uphill, so stepping against it, x <- x - lr * grad,
walks downhill. The Rosenbrock function 100 (x1 - x0^2)^2 + (1 - x0)^2 has
its minimum at (1, 1) at the bottom of a long curved valley, where plain
gradient descent is slow: from (0, 2) it needs thousands of small steps.
Run: python steps/step28.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dezero import Variable


def rosenbrock(x0, x1):
    return 100 * (x1 - x0 ** 2) ** 2 + (1 - x0) ** 2


x0 = Variable(np.array(0.0))
x1 = Variable(np.array(2.0))
lr = 0.001
iters = 10000

for i in range(iters):
    if i % 2000 == 0:
        print(f"iter {i:5d}: x0 = {float(x0.data):.6f}, x1 = {float(x1.data):.6f}")
    y = rosenbrock(x0, x1)
    x0.cleargrad()
    x1.cleargrad()
    y.backward()
    x0.data -= lr * x0.grad.data
    x1.data -= lr * x1.grad.data

print(f"after {iters} iterations: x0 = {float(x0.data):.6f}, x1 = {float(x1.data):.6f}")
