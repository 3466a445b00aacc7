"""Step 79: define-and-run made real -- placeholders, dezero.compile, Builder and Script.

The book's essay on define-and-run (Chainer's ancestors, TensorFlow 1) wrote the
computation first, on symbols without numbers, compiled it, and fed it data:

    a = placeholder('a'); b = placeholder('b'); d = a * b + 1
    f = compile(d); f(a=2, b=3)  # 7

DeZero defined by running; steps 61-70 traced a run into a static graph. Here the
same recorder builds that graph from placeholders: a placeholder is a Variable with a
shape and a dtype but no numbers, and every Function on it computes only the shape
and dtype of its result (abstract evaluation). A size may be a name ("B"): the
graph then runs for any batch. A (200000, 200000) matrix costs nothing to define.

Then a Builder records a whole training step (forward, loss, backward, SGD's update)
from named inputs into one Script, which is fed batch after batch and trains.
Run: python steps/step79.py   (DEZERO_STEPS_QUICK=1: fewer training runs)
"""
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import models, optimizers

QUICK = os.environ.get("DEZERO_STEPS_QUICK") == "1"   # the tests' setting
runs = 50 if QUICK else 300

# ---- the essay's example, as written ---------------------------------------------
a = dezero.placeholder('a', ())
b = dezero.placeholder('b', ())
d = a * b + 1
f = dezero.compile(d)
print(f)
print("f(a=2, b=3) =", float(f(a=np.array(2.0), b=np.array(3.0)).data))
try:
    float(d)
except TypeError as e:
    print("float(d):", str(e).splitlines()[0])

# ---- symbolic sizes: one graph for every batch -------------------------------------
x = dezero.placeholder("x", ("B", 3))
w = dezero.placeholder("w", (3, 2))
g = dezero.compile({"y": F.softmax(F.matmul(x, w))})
print(g)
W = np.ones((3, 2), np.float32)
for n in (2, 5):
    y = g(x=np.ones((n, 3), np.float32), w=W)["y"]
    print(f"B = {n}: y has shape {y.shape}")

start = time.perf_counter()
z = dezero.placeholder("z", (200000, 200000))
big = dezero.compile(F.sum(F.matmul(z, z), axis=0))
print(f"a graph of a (200000, 200000) matmul defined in "
      f"{(time.perf_counter() - start) * 1e3:.1f} ms: {big.nodes[-2].outputs[0].type}")

# ---- a training step built from named inputs ----------------------------------------
rng = np.random.default_rng(0)
X = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
T = (np.sin(3 * X[:, :1]) * X[:, 1:]).astype(np.float32)
np.random.seed(0)
model = models.MLP((16, 16, 1))
optimizer = optimizers.SGD(0.5).setup(model)
model(X[:1])  # its parameters exist before the step is recorded

with dezero.Builder("train_step") as builder:
    x = builder.input("x", ("B", 2))
    t = builder.input("t", ("B", 1))
    loss = F.mean_squared_error(model(x), t)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    builder.output("loss", loss)
script = builder.build().compile()   # explicit warm-up; else the first run compiles
print(f"the step's graph: {len(script.graph.nodes)} nodes, "
      f"{sum(n.kind == 'write' for n in script.graph.nodes)} state writes")

losses = []
for i in range(runs):
    batch = rng.integers(0, len(X), 16)
    script.set_input("x", X[batch])
    script.set_input("t", T[batch])
    losses.append(float(script.run()["loss"].data))
print(f"loss: first {losses[0]:.4f}, last {np.mean(losses[-10:]):.4f} (mean of 10)")

script.clear_inputs()
try:
    script.run()
except TypeError as e:
    print("run() without inputs:", e)
try:
    script.set_input("x", np.ones((16, 3), np.float32))
except TypeError as e:
    print("a wrong shape:", e)

with dezero.Builder("affine") as builder:
    x = builder.input("x", (2, 3))
    builder.output("y", x * 2 + 1)
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "affine.json")
    builder.build().save(path)
    loaded = dezero.Script.load(path)
loaded.set_input("x", np.arange(6, dtype=np.float32).reshape(2, 3))
print("the saved Script, loaded back:", loaded.run()["y"].data.tolist())
