"""Step 65: a whole training step traced, the learning rate changed without a retrace.

The forward pass, `loss.backward()` and `optimizer.update()` are all Function
calls, so one trace records the whole step of the spiral classifier (step
48): the parameters are captured state, the update becomes state writes, and
each replay really trains. Optimizer hyperparameters are read afresh at every
replay, so lowering `optimizer.lr` halfway needs no new recording: the debug
output (`dezero.static.debug(1)`, here sent to stdout) shows one trace for the
whole run. Trained eagerly from the same weights on the same batches, the
model ends with the same loss.
Run: python steps/step65.py
"""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.datasets import get_spiral
from dezero.models import MLP

x, t = get_spiral(train=True)
epochs, batch_size = 30, 30


def train(traced):
    np.random.seed(0)   # the same initial weights for both runs
    model = MLP((10, 3))
    optimizer = optimizers.SGD(lr=1.0).setup(model)

    def train_step(xb, tb):
        loss = F.softmax_cross_entropy(model(xb), tb)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    step = dezero.trace(train_step) if traced else train_step
    order_rng = np.random.default_rng(1)
    for epoch in range(epochs):
        if epoch == epochs // 2:
            optimizer.lr = 0.2   # a schedule: the replay reads the new value
        order = order_rng.permutation(len(x))
        total = 0.0
        for i in range(0, len(x), batch_size):
            batch = order[i:i + batch_size]
            total += float(step(x[batch], t[batch]).data) * len(batch)
    return total / len(x), step


eager_loss, _ = train(traced=False)
with contextlib.redirect_stderr(sys.stdout), dezero.static.debug(1):
    traced_loss, step = train(traced=True)
print(f"{epochs * len(x) // batch_size} steps; lr 1.0, then 0.2 from epoch {epochs // 2}")
print(f"eager  final epoch loss: {eager_loss:.6f}")
print(f"traced final epoch loss: {traced_loss:.6f}")
print(f"the same loss: {np.isclose(eager_loss, traced_loss, rtol=1e-5)}")
print(f"graphs recorded: {step.entries}")
print(str(step.graph).splitlines()[0])
graph = step.graph
print(f"the step: {len(graph.of_kind('op'))} ops, {len(graph.of_kind('state'))} captured "
      f"state, {len(graph.of_kind('write'))} state writes")
print("the writes: " + ", ".join(line.strip() for line in str(graph).splitlines()
                                 if "<-" in line))
