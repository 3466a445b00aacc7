"""Step 77: a symbolic dimension -- one graph for every batch size, and its guards.

Steps 61-70 froze a run into a graph of exact shapes: a batch of 30 and a batch of 7
were two graphs. With dezero.trace(f, dynamic=True) a size of an input is a name
instead (B), and the graph prints f32[B,2]. Python that reads a size (x.shape[0])
records the expression: in `F.sum(x, axis=0) / x.shape[0]` the divisor is a node
of the graph, size_number [value=B], computed at each call (len(x) must be a Python
int: it fixes the size, and the trace says so in its retraces). A Python branch on
a size is decided by this call's size, as in any run, and the decision is kept as a
relation of the graph (B > 4): a guard that every call is checked against, and a
call that breaks one records a graph of its own. A size of 1 never becomes a name:
it broadcasts where another size would not, so a batch of one records a graph of
fixed sizes (as torch.compile specialises 0 and 1).

The kernels of such a graph take the sizes too: the C++ of a reduction over B rows
reads its extents from the array of sizes a call passes (_S[0], _S[1]).
Run: python steps/step77.py
"""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import models
from dezero.kernels import cpu

np.random.seed(0)
model = models.MLP((10, 3))
rng = np.random.default_rng(0)


def batch(n):
    return rng.standard_normal((n, 2)).astype(np.float32)


# 1. One graph for every batch size.
predict = dezero.trace(lambda x: F.softmax(model(x)), dynamic=True)
for n in (30, 7, 100):
    probabilities = predict(batch(n))
    print(f"batch of {n}: probabilities {probabilities.shape}, graphs kept: {predict.entries}")
print(predict.graph)


# 2. A size read in Python is an expression of the graph.
def column_means(x):
    return F.sum(x, axis=0) / x.shape[0]   # B while tracing, not 30


means = dezero.trace(column_means, dynamic=True)
x = batch(30)
means(x)
print([line.strip() for line in str(means.graph).splitlines() if "size_number" in line][0])
y = batch(9)
print("replayed on 9 rows, equal to numpy:",
      np.allclose(means(y).data, y.mean(axis=0), rtol=1e-6))


# 3. A branch on a size: decided per call, kept as a guard.
def scaled(x):
    if x.shape[0] > 4:      # a decision on B: the relation B > 4 joins the graph
        return x * 2.0
    return x * 3.0


scaled = dezero.trace(scaled, dynamic=True)
with contextlib.redirect_stderr(sys.stdout), dezero.static.debug(1):
    scaled(batch(8))
    scaled(batch(6))        # B > 4 holds: replays
    scaled(batch(3))        # breaks B > 4: records again, and says why
for entry in scaled._symbolic:
    print("a graph where", ", ".join(map(str, entry.graph.relations)))

# 4. A batch of one stays a number: 1 broadcasts.
with contextlib.redirect_stderr(sys.stdout), dezero.static.debug(1):
    predict(batch(1))
print(f"graphs of predict: {predict.entries}")

# 5. The kernels take the sizes: a reduction over B rows, its row count from _S.
if cpu.missing_reason() is None:
    plan = means.graph.compile("cpu").wait()
    line = next(line for line in plan.kernel_source.splitlines() if "_K = " in line)
    print("C++ of the kernel:", line.strip())
    z = batch(13)
    print("the kernel on 13 rows equals numpy:",
          np.allclose(plan(z).data, z.mean(axis=0), rtol=1e-5, atol=1e-6))
else:
    print("no C++ compiler here:", cpu.missing_reason())
