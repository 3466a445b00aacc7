"""Step 42: linear regression.

The first learning problem: fit y = W x + b to 100 noisy points made from
y = 2x + 5 plus uniform noise in [0, 1) (so the best intercept is 5.5). The
prediction is `F.matmul(x, W) + b`, the loss the mean squared error, and
gradient descent updates W and b from their gradients.
Run: python steps/step42.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero.functions as F
from dezero import Variable

np.random.seed(0)
x = np.random.rand(100, 1)
y = 5 + 2 * x + np.random.rand(100, 1)
x, y = Variable(x), Variable(y)

W = Variable(np.zeros((1, 1)))
b = Variable(np.zeros(1))


def predict(x):
    return F.matmul(x, W) + b


def mean_squared_error(x0, x1):
    diff = x0 - x1
    return F.sum(diff ** 2) / len(diff)


lr = 0.1
iters = 300
for i in range(iters):
    y_pred = predict(x)
    loss = mean_squared_error(y, y_pred)
    W.cleargrad()
    b.cleargrad()
    loss.backward()
    W.data -= lr * W.grad.data
    b.data -= lr * b.grad.data
    if i % 50 == 0 or i == iters - 1:
        print(f"iter {i:3d}: loss {float(loss.data):.6f}")

print(f"learned:       W = {W.data.item():.4f}, b = {b.data.item():.4f}")
# The exact least-squares fit of the same points, for comparison.
A = np.hstack([x.data, np.ones_like(x.data)])
(W_best, b_best), *_ = np.linalg.lstsq(A, y.data.ravel(), rcond=None)
print(f"least squares: W = {W_best:.4f}, b = {b_best:.4f}")

plt = pyplot()
if plt is not None:
    plt.scatter(x.data, y.data, s=10)
    grid = np.array([[0.0], [1.0]])
    plt.plot(grid, predict(Variable(grid)).data, color="r")
    plt.xlabel("x")
    plt.ylabel("y")
    plt.savefig("linear_regression.png")
    print("plot saved to linear_regression.png")
