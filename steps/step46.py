"""Step 46: optimizers -- the update rule as an object.

`p.data -= lr * p.grad.data` is only the simplest rule. An optimizer object
takes it out of the training loop: `optimizer.setup(model)` names what to
update and `optimizer.update()` updates every parameter that has a gradient.
Changing the rule is then a one-line change; here plain SGD against
MomentumSGD, whose velocity carries it faster through the flat start.
Run: python steps/step46.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import optimizers
from dezero.models import MLP

np.random.seed(0)
x = np.random.rand(100, 1)
y = np.sin(2 * np.pi * x) + np.random.rand(100, 1)

iters = 5000
for name, make in (("SGD", lambda: optimizers.SGD(lr=0.2)),
                   ("MomentumSGD", lambda: optimizers.MomentumSGD(lr=0.2, momentum=0.9))):
    np.random.seed(1)  # the same initial weights for both optimizers
    model = MLP((10, 1))
    optimizer = make().setup(model)
    for i in range(iters):
        y_pred = model(x)
        loss = F.mean_squared_error(y, y_pred)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        if i % 1000 == 0:
            print(f"{name:11s} iter {i:4d}: loss {float(loss.data):.6f}")
    print(f"{name:11s} final loss after {iters} iterations: {float(loss.data):.6f}")
