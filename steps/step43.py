"""Step 43: a neural network.

A straight line cannot fit y = sin(2 pi x). Two linear transformations with
a nonlinear activation (the sigmoid) between them can: y = W2 s(W1 x + b1) + b2
with 10 hidden units. The parameters start small and random (zero weights
would keep all hidden units identical) and are trained by gradient descent on
the mean squared error, using `F.linear`, `F.sigmoid` and
`F.mean_squared_error` from the library.
Run: python steps/step43.py
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
y = np.sin(2 * np.pi * x) + np.random.rand(100, 1)

I, H, O = 1, 10, 1
W1 = Variable(0.01 * np.random.randn(I, H))
b1 = Variable(np.zeros(H))
W2 = Variable(0.01 * np.random.randn(H, O))
b2 = Variable(np.zeros(O))
params = [W1, b1, W2, b2]


def predict(x):
    y = F.linear(x, W1, b1)
    y = F.sigmoid(y)
    return F.linear(y, W2, b2)


lr = 0.2
iters = 10000
for i in range(iters):
    y_pred = predict(x)
    loss = F.mean_squared_error(y, y_pred)
    for p in params:
        p.cleargrad()
    loss.backward()
    for p in params:
        p.data -= lr * p.grad.data
    if i % 1000 == 0:
        print(f"iter {i:5d}: loss {float(loss.data):.6f}")
print(f"final loss: {float(loss.data):.6f}")

plt = pyplot()
if plt is not None:
    plt.scatter(x, y, s=10)
    grid = np.linspace(0, 1, 100)[:, np.newaxis]
    plt.plot(grid, predict(grid).data, color="r")
    plt.savefig("neural_network.png")
    print("plot saved to neural_network.png")
