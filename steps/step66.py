"""Step 66: fusion -- which nodes group into kernels, drawn as clusters.

Run one by one, every elementwise op reads its inputs from memory and writes
a new array back; for large arrays that memory traffic, not the arithmetic,
is the cost. The last pass, `fuse`, finds maximal connected groups of
elementwise nodes (each class with a `cpp` expression) whose results share
one shape -- inputs may broadcast, like a bias row or a scalar learning rate
-- and marks each as a kernel (`graph.groups`): one loop that reads the
group's inputs once and writes only what is used outside it. Matmuls,
reductions, transposes and the like are boundaries. Here a training step
with Adam: its update of one parameter, a dozen ops, becomes one kernel; then
the updates of W and of b, the same dozen ops on two shapes that do not wait
for each other, merge into one horizontal kernel with a segment per parameter
(an optimizer's multi-tensor apply). The drawing frames each kernel as a cluster.
Run: python steps/step66.py
"""
import contextlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.models import MLP
from dezero.utils import GraphvizNotFoundError

np.random.seed(0)
model = MLP((3,))   # one Linear layer: W (4x3) and b
optimizer = optimizers.Adam().setup(model)


def train_step(x, t):
    loss = F.mean_squared_error(F.tanh(model(x)), t)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    return loss


step = dezero.trace(train_step)
rng = np.random.default_rng(0)
x = rng.standard_normal((8, 4)).astype(np.float32)
t = rng.standard_normal((8, 3)).astype(np.float32)
decisions = io.StringIO()
with contextlib.redirect_stderr(decisions), dezero.static.debug(3):
    step(x, t)
graph = step.graph
print(graph)

elementwise = sum(1 for n in graph.of_kind("op") if n.record.elementwise)
print(f"{len(graph.of_kind('op'))} ops, {elementwise} of them elementwise, "
      f"in {len(graph.groups)} kernels:")
for group in graph.groups:
    for part in group.segments or [group]:  # a horizontal kernel: each segment
        print(f"  {part.name}: {len(part.nodes):2d} ops, shape {part.shape}, reads "
              f"{', '.join(v.label for v in part.inputs)} -> writes "
              f"{', '.join(v.label for v in part.outputs)}")
print("why some ops stay out (DEZERO_DEBUG=3):")
for line in decisions.getvalue().splitlines():
    if line.startswith("fuse") and ("boundary" in line or "starts" in line):
        print("  " + line.partition(": ")[2])

try:
    graph.plot(to_file="fused_step.png")
    print("graph saved to fused_step.png")
except GraphvizNotFoundError as e:
    print(f"skipped drawing fused_step.png: {e}")
