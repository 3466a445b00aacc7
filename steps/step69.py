"""Step 69: saving a static graph and running it without the code that made it.

A static graph is data: `graph.save("train_step.json")` writes the nodes as
JSON and the arrays (constants, and the captured state's current values) to
`train_step.npz` beside it -- no pickle, no Python code. `dezero.static.load`
reads it back after checking every field, and the loaded graph owns its state:
calling it replays the step and updates its own copy of the weights. Here a
spiral training step is traced and saved, then a fresh Python process that
imports nothing but numpy and dezero -- no MLP class, no optimizer, none of
this file -- loads it and keeps training.
Run: python steps/step69.py
"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.datasets import get_spiral
from dezero.models import MLP

np.random.seed(0)
x, t = get_spiral(train=True)
model = MLP((10, 3))
optimizer = optimizers.SGD(lr=1.0).setup(model)


@dezero.trace
def train_step(xb, tb):
    loss = F.softmax_cross_entropy(model(xb), tb)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    return loss


for i in range(0, 300, 30):
    loss = train_step(x[i:i + 30], t[i:i + 30])
print(f"trained here for 10 steps: loss {float(loss.data):.4f}")
train_step.graph.save("train_step.json")
description = json.loads(Path("train_step.json").read_text())
with np.load("train_step.npz") as arrays:
    names = sorted(arrays.files)
print(f"saved train_step.json ({len(description['nodes'])} nodes) and train_step.npz "
      f"({', '.join(names)})")
np.savez("spiral.npz", x=x, t=t)

# A new process: only dezero and the two files.
ELSEWHERE = """
import numpy as np
import dezero.static

step = dezero.static.load("train_step.json")
print("loaded:", step.name, "inputs", step.input_names, "state", sorted(step.state))
data = np.load("spiral.npz")
x, t = data["x"], data["t"]
for epoch in range(20):
    for i in range(0, 300, 30):
        loss = step(x[i:i + 30], t[i:i + 30])
print(f"elsewhere, 200 more steps: loss {float(loss.data):.4f}")
"""
env = dict(os.environ, PYTHONPATH=str(ROOT))
result = subprocess.run([sys.executable, "-c", ELSEWHERE], env=env, capture_output=True,
                        text=True, check=True)
print(result.stdout, end="")
