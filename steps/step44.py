"""Step 44: Parameter and Layer -- letting the layer hold the weights.

Step 43 kept four loose Variables. A `Parameter` is a Variable marked as
learnable, and a `Layer` collects the Parameters assigned to its attributes,
so `layer.params()` yields them and `layer.cleargrads()` clears them all.
`L.Linear(out_size)` creates its weight at the first call, when it sees the
input size. The training loop shrinks to one loop over `params()`.
Run: python steps/step44.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero.functions as F
import dezero.layers as L
from dezero import Parameter, Variable

# Parameter behaves like Variable, but a Layer can tell them apart.
p = Parameter(np.array(1.0))
v = Variable(np.array(1.0))
print("p * v is a", type(p * v).__name__, "; p is a Parameter:", isinstance(p, Parameter))

np.random.seed(0)
x = np.random.rand(100, 1)
y = np.sin(2 * np.pi * x) + np.random.rand(100, 1)

l1 = L.Linear(10)  # input size found at the first call
l2 = L.Linear(1)


def predict(x):
    y = l1(x)
    y = F.sigmoid(y)
    return l2(y)


lr = 0.2
iters = 10000
for i in range(iters):
    y_pred = predict(x)
    loss = F.mean_squared_error(y, y_pred)
    l1.cleargrads()
    l2.cleargrads()
    loss.backward()
    for layer in (l1, l2):
        for p in layer.params():
            p.data -= lr * p.grad.data
    if i % 1000 == 0:
        print(f"iter {i:5d}: loss {float(loss.data):.6f}")
print(f"final loss: {float(loss.data):.6f}")
print("l1 parameters:", sorted((p.name, p.shape) for p in l1.params()))

plt = pyplot()
if plt is not None:
    plt.scatter(x, y, s=10)
    grid = np.linspace(0, 1, 100)[:, np.newaxis]
    plt.plot(grid, predict(grid).data, color="r")
    plt.savefig("layers_fit.png")
    print("plot saved to layers_fit.png")
