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
from dezero.kernels.codegen import kernel_spec
from dezero.utils import plot_dot_graph

x_all, t_all = get_spiral(train=True)     # 300 points in 3 classes


def make_training(seed=0):
    """A fresh model (the same initial weights at every call), Adam, and its step."""
    np.random.seed(seed)
    model = MLP((10, 3))                  # sigmoid hidden layer, as in the book
    model(x_all[:1])                      # the layers make their weights at the first call
    optimizer = optimizers.Adam(alpha=0.03).setup(model)

    def train_step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    return model, train_step


model, train_step = make_training()

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
# the forward pass, the ops `backward()` runs, and Adam's update. The weights,
# Adam's moments, its step count and its hyperparameters are **captured state**
# (orange); the update is a set of **state writes** (`W0 <- ...`, dashed). Printed
# before fusion, one line per node:

# %%
traced_step = dezero.trace(train_step)
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
# shape into **kernels**; inputs may broadcast (Adam's step size is a scalar).
# Matmuls and `linear` are boundaries. The loss is split into the steps
# of its forward (a max, `exp` and its sum, the pick of each row's label, the mean
# over the batch), which join the bias add before them and the loss's gradient
# after them in one kernel. Adam's whole update of
# one parameter (both moments and the new weight) is a chain of twelve ops, and
# the four parameters' chains, the same twelve ops on arrays of four shapes with
# no path between them, are merged into one **horizontal** kernel, a segment per
# parameter (more on it below). The printed graph indents each kernel under a
# header naming what it returns, and the drawing frames each as a cluster:

# %%
print(graph)
print(f"\n{len(graph.of_kind('op'))} ops, {len(graph.groups)} kernels")

# %%
graph.plot(to_file="graphs/09_fused.svg")

# %% [markdown]
# Each group becomes C++ for **one element**, one statement per node, built from
# the ops' `cpp` expressions (numbers written as `float` literals). On a GPU each
# body is handed to `cupy.ElementwiseKernel`. On the CPU the backend wraps each body
# in a loop and compiles them all in the background; once they are loaded, it times
# each kernel against its group's nodes run as numpy calls and keeps the faster way
# (a kernel call costs about two microseconds, a numpy call on a small array less
# than one, but a kernel saves passes over memory: only a measurement on this
# machine can tell). `print(graph)` then shows both times in each kernel's header,
# where it said "(to be measured)" before. A group with a reduction (the sigmoid's
# backward with the sum that is b's gradient) is one loop over rows; the loss's
# makes three passes over each row (the max; the sum of `exp` and each label's
# entry; the gradient), then adds up the rows' losses.

# %%
plan = graph.compile("cpu").wait()        # the default backend on the CPU; a library
                                          # not in the cache compiles in the background
compiled = getattr(plan, "library", None)
compiled = compiled.specs if compiled is not None else {}
for group in graph.groups:
    how = (group.decision or "compiled") if group.name in compiled else "numpy calls"
    spec = kernel_spec(group)
    if getattr(spec, "axes", None) is not None:  # a reduction: a loop over rows
        body = f"{spec.comment}, reducing axes {list(spec.axes)} of {list(spec.shape)}"
    else:
        body = spec.segments[0].body if spec.segments else spec.body  # horizontal: its first
    more = f"\n    (the first of {len(spec.segments)} segments)" if spec.segments else ""
    print(f"{body.rstrip()}{more}\n    -> {how}\n")

# %% [markdown]
# The loop around the largest compiled body, as the C++ compiler receives it (a
# fast path for contiguous inputs, a strided path for broadcasting, OpenMP for
# large arrays):

# %%
if compiled:
    largest = max(compiled.values(), key=lambda spec: np.prod(spec.shape))
    first = (largest.segments or (largest,))[0].name  # a horizontal kernel's first loop
    source = plan.kernel_source
    print(source[source.index(f"// kernel {first}:"):][:1800], "...")
else:
    print("no kernel compiled here:", dezero.kernels.cpu.missing_reason())

# %% [markdown]
# ## Horizontal fusion: one kernel for every parameter
#
# Vertical fusion joins chains; an optimizer's step is the same short chain once
# per parameter, on arrays so small that calling a kernel costs more than its
# arithmetic. Torch's fused optimizers and apex call the cure *multi-tensor
# apply*: one kernel over the list of arrays. The fusion pass's second rule does
# that for any kernels of one body that do not wait for each other. On the CPU the
# horizontal kernel is one C function that runs each segment's loop in turn; on a
# GPU, one launch over all segments' elements. Without the rule
# (`horizontal.MAX_SEGMENT = 0` lets no kernel merge) the same step has eight
# kernels, four of them the updates:

# %%
from dezero.static import horizontal

kept, horizontal.MAX_SEGMENT = horizontal.MAX_SEGMENT, 0
apart = dezero.trace(train_step).lower(x, t)          # traced again, without the rule
horizontal.MAX_SEGMENT = kept
print(f"{len(apart.groups)} kernels without the rule, {len(graph.groups)} with it\n")
for group in graph.groups:
    if group.segments:
        print(group.header())
        for segment in group.segments:
            print(f"  {segment.name}: {len(segment.nodes)} ops on {segment.shape}")

# %% [markdown]
# ## Timing the three ways
#
# Train from the same initial weights for 300 steps each: **eager** (the Python
# function, building a dynamic graph every step), **replayed unfused** (the
# static graph's Python replay code, one numpy call per node) and **replayed
# fused** (the same code with the groups that pay as compiled kernels). We do it
# for batches of 30 and of 300 points.

# %%
def timed(backend, x, t, steps=300):
    """Seconds per step and the last loss, training a fresh model."""
    _, step = make_training()
    if backend is None:
        step(x, t)                        # the first step, as the recording takes it
    else:
        traced = dezero.trace(step)
        traced(x, t)                      # records (and takes the first step)
        step = traced.graph.compile(backend).wait()   # a plan: step(x, t) replays
    step(x, t)                            # warm up outside the clock
    start = time.perf_counter()
    for _ in range(steps):
        loss = step(x, t)
    return (time.perf_counter() - start) / steps, float(loss.data)


ways = {"eager": None, "replayed unfused": "python", "replayed fused": "cpu"}
timings = {}
for batch in (30, 300):
    for name, backend in ways.items():
        seconds, last = timed(backend, x_all[:batch], t_all[:batch])
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
# The losses agree three ways (to float32 rounding): one computation, run
# differently.
#
# * **Eager → replayed** removes the Python overhead of define-by-run: making
#   Variables and Functions, linking the graph, walking it backwards. That is most
#   of the cost for arrays this small.
# * **Unfused → fused** replaces Adam's step size and its four twelve-op
#   updates by two kernel calls whose loops read each array once, instead of
#   about sixty numpy calls that each write a temporary array. The spiral network is tiny, so this is a smaller saving
#   than the first, and how much it shows depends on the machine and its load.
#   Fusion pays more as the arrays grow: step 67 runs a ten-op chain on a
#   million numbers several times faster than numpy.
#
# Where to read on: the docs' *Define-and-run* section maps the pipeline, and
# steps 61–70 build each stage in a few lines.
