"""Step 45: layers inside layers -- Model and MLP.

A Layer may hold other Layers as attributes, and `params()` walks into them,
so a whole network is one object. `Model` is a Layer with a `plot()` that
draws the graph of one forward pass. `MLP((10, 1))` builds a multi-layer
perceptron from a tuple of output sizes, with sigmoid between the layers.
Run: python steps/step45.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
import dezero.layers as L
from dezero import Model
from dezero.models import MLP
from dezero.utils import GraphvizNotFoundError


class TwoLayerNet(Model):
    def __init__(self, hidden_size, out_size):
        super().__init__()
        self.l1 = L.Linear(hidden_size)
        self.l2 = L.Linear(out_size)

    def forward(self, x):
        y = F.sigmoid(self.l1(x))
        return self.l2(y)


x = np.random.default_rng(0).standard_normal((5, 10))
model = TwoLayerNet(100, 10)
print("TwoLayerNet output shape:", model(x).shape,
      " parameters:", len(list(model.params())))
try:
    model.plot(x, to_file="two_layer_net.png")
    print("graph saved to two_layer_net.png")
except GraphvizNotFoundError as e:
    print(f"skipped drawing two_layer_net.png: {e}")

# The same regression as step 44, with the network in one object.
np.random.seed(0)
x = np.random.rand(100, 1)
y = np.sin(2 * np.pi * x) + np.random.rand(100, 1)

model = MLP((10, 1))
lr = 0.2
iters = 10000
for i in range(iters):
    y_pred = model(x)
    loss = F.mean_squared_error(y, y_pred)
    model.cleargrads()
    loss.backward()
    for p in model.params():
        p.data -= lr * p.grad.data
    if i % 1000 == 0:
        print(f"iter {i:5d}: loss {float(loss.data):.6f}")
print(f"final loss: {float(loss.data):.6f}")
