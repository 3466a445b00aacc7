# %% [markdown]
# # 09 · One training step, three views
#
# Notebook 07 showed that a traced function replays a static graph; notebook 08
# built a tracer by hand. Here we follow **one training step** of the spiral
# classifier all the way down and look at it three ways:
#
# 1. the **dynamic graph** that define-by-run builds at every call,
# 2. the **static graph** that `dezero.trace` records once (forward, backward and
#    the optimizer's update),
# 3. the **fused kernels** that the fusion pass makes of its elementwise chains,
#    with their generated C++.
#
# Then we time the step run eagerly, replayed node by node, and replayed with the
# fused kernels.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.datasets import get_spiral
from dezero.models import MLP
from dezero.static.codegen import kernel_spec
from dezero.utils import plot_dot_graph

x_all, t_all = get_spiral(train=True)     # 300 points in 3 classes

np.random.seed(0)
model = MLP((10, 3))                      # sigmoid hidden layer, as in the book
model(x_all[:1])                          # the layers make their weights at the first call
optimizer = optimizers.SGD(lr=1.0).setup(model)
initial = [p.data.copy() for p in model.params()]


def train_step(x, t):
    loss = F.softmax_cross_entropy(model(x), t)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    return loss


def reset_weights():
    for p, data in zip(model.params(), initial):
        p.data = data.copy()

# %% [markdown]
# ## View 1: the dynamic graph
#
# Define-by-run: calling the model on a batch computes the loss *and* links a
# graph of Variables (ellipses) and Functions (boxes). `backward()` walks it. The
# graph is a by-product of this one call; the next call builds a new one.

# %%
x, t = x_all, t_all                       # the whole set as one batch
loss = F.softmax_cross_entropy(model(x), t)
loss.name = "loss"
plot_dot_graph(loss, verbose=True, to_file="graphs/09_dynamic.svg")

# %% [markdown]
# ## View 2: the static graph
#
# Traced, the same step runs once eagerly while every Function call is recorded:
# the forward pass, the ops `backward()` runs, and the SGD update. The weights and
# the learning rate are **captured state** (orange), the update is a set of
# **state writes** (`W <- ...`, dashed). Printed before fusion, one line per node:

# %%
traced_step = dezero.trace(train_step)
reset_weights()
traced_step(x, t)                         # records, and takes one step
graph = traced_step.graph
unfused = graph.with_nodes(graph.nodes)   # the same nodes without the kernel groups
print(unfused)

# %%
unfused.plot(to_file="graphs/09_static.svg")

# %% [markdown]
# ## View 3: the fused kernels
#
# The fusion pass groups connected elementwise nodes whose results share one
# shape into **kernels**; inputs may broadcast (the learning rate is a scalar).
# Matmuls, `linear`, softmax and `sum_to` are boundaries. The printed graph
# indents each kernel under a header naming what it returns, and the drawing
# frames each as a cluster:

# %%
print(graph)
print(f"\n{len(graph.of_kind('op'))} ops, {len(graph.groups)} kernels")

# %%
graph.plot(to_file="graphs/09_fused.svg")

# %% [markdown]
# Each kernel becomes C++ for **one element**, one statement per node, built from
# the ops' `cpp` expressions (numbers written as `float` literals). The cpu backend
# wraps each body in a loop and compiles all of them into one shared library;
# on a GPU the same body is handed to `cupy.ElementwiseKernel`.

# %%
for group in graph.groups:
    print(kernel_spec(group).body)

# %% [markdown]
# The loop around the first one, as the C++ compiler receives it (fast path for
# contiguous inputs, a strided path for broadcasting, OpenMP for large arrays):

# %%
plan = graph.compile("cpu")               # the default backend on the CPU
print(plan.kernel_source[plan.kernel_source.index("// kernel k0:"):][:1500], "...")

# %% [markdown]
# ## Timing the three ways
#
# Train from the same initial weights for 300 steps each: **eager** (the Python
# function, building a dynamic graph every step), **replayed unfused** (the
# static graph's Python replay code, one numpy call per node) and **replayed
# fused** (the same code with each kernel one compiled loop). We do it for
# batches of 30 and of 300 points.

# %%
def timed(run, x, t, steps=300):
    reset_weights()
    run(x, t)                             # warm up: record or compile outside the clock
    reset_weights()
    start = time.perf_counter()
    for _ in range(steps):
        loss = run(x, t)
    return (time.perf_counter() - start) / steps, float(loss.data)


timings = {}
for batch in (30, 300):
    xb, tb = x_all[:batch], t_all[:batch]
    step_graph = traced_step.lower(xb, tb)   # the graph for this batch shape
    runs = {"eager": train_step,
            "replayed unfused": step_graph.compile("python"),
            "replayed fused": step_graph.compile("cpu")}
    for name, run in runs.items():
        seconds, last = timed(run, xb, tb)
        timings[batch, name] = seconds
        print(f"batch {batch:3d}  {name:17s} {seconds * 1e6:7.1f} us per step   "
              f"last loss {last:.6f}")

# %%
fig, ax = plt.subplots(figsize=(6, 2.6))
names = ["eager", "replayed unfused", "replayed fused"]
for k, batch in enumerate((30, 300)):
    values = [timings[batch, name] * 1e6 for name in names]
    ax.barh([y + 0.4 * k for y in range(3)], values, height=0.4, label=f"batch {batch}")
ax.set_yticks([y + 0.2 for y in range(3)], names)
ax.invert_yaxis()
ax.set_xlabel("microseconds per training step")
ax.legend()
plt.show()

# %% [markdown]
# The losses are the same three ways: one computation, run differently.
#
# * **Eager → replayed** removes the Python overhead of define-by-run: making
#   Variables and Functions, linking the graph, walking it backwards. That is most
#   of the cost for arrays this small.
# * **Unfused → fused** removes memory traffic and per-op calls inside each kernel.
#   The spiral network is tiny: its largest elementwise arrays hold 300 × 10
#   numbers, so calling a compiled kernel costs about as much as the two or three
#   numpy calls it replaces, and the two replays run close to each other (which
#   one is ahead depends on the machine and its load). Fusion pays as elementwise
#   work grows: step 67 runs a ten-op chain on a million numbers several times
#   faster than numpy, and an Adam update (notebook 07's step with
#   `optimizers.Adam`) becomes a handful of kernels instead of dozens of calls.
#
# Where to read on: the docs' *Define-and-run* section maps the pipeline, and
# steps 61–70 build each stage in a few lines.
