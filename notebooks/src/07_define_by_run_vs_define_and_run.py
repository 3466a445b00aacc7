# %% [markdown]
# # 07 · Define-by-run vs define-and-run
#
# Until now every call built a fresh **dynamic graph** while it computed. That is
# flexible, but every call pays for running Python line by line and for creating
# the graph's objects.
#
# **Trace mode** keeps the convenience and removes most of that cost. Wrap a
# function in `dezero.trace`: its first call runs normally while every Function
# call is *recorded*; the recording becomes a **static graph** (define-and-run),
# and later calls with the same kind of arguments *replay* that graph instead of
# running your Python again.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.datasets import get_spiral
from dezero.models import MLP
from dezero.utils import plot_dot_graph

rng = np.random.default_rng(0)


def layer(x, W, b):
    y = F.tanh(F.matmul(x, W) + b)
    return F.sum(y * y)


x = Variable(rng.standard_normal((4, 3)).astype(np.float32), name="x")
W = Variable(rng.standard_normal((3, 5)).astype(np.float32), name="W")
b = Variable(np.zeros(5, np.float32), name="b")

eager = layer(x, W, b)
traced_layer = dezero.trace(layer)
traced = traced_layer(x, W, b)          # first call: runs eagerly and records
again = traced_layer(x, W, b)           # second call: replays the static graph
print("eager ", eager.data, "\ntraced", traced.data, "\nreplay", again.data)

# %% [markdown]
# Same numbers three times. The difference is in what exists afterwards.
#
# ## The static graph, printed
#
# A static graph is a flat list of typed nodes, in the order they must run. Every
# value has a name, a dtype and a shape (`f32[4,5]`); attributes of an op are in
# brackets.

# %%
print(traced_layer.graph)

# %% [markdown]
# ## Both graphs, drawn
#
# On the left the **dynamic graph** behind `eager` (Variables as ellipses,
# Functions as boxes), which exists because that call ran; on the right the
# **static graph** recorded from the traced call: inputs in green, ops in blue,
# every value typed, and what the function returns at the bottom.

# %%
eager.name = "y"
dynamic_svg = plot_dot_graph(eager, verbose=True, to_file="graphs/07_dynamic.svg")._repr_svg_()
static_svg = traced_layer.graph.plot(to_file="graphs/07_static.svg")._repr_svg_()


def side_by_side(*svgs):
    # Drop the XML prologue of each SVG file so that it can sit inside HTML.
    cells = "".join(f"<div>{s[s.index('<svg'):]}</div>" for s in svgs)
    return HTML(f'<div style="display:flex; gap:3em; align-items:flex-start">{cells}</div>')


side_by_side(dynamic_svg, static_svg)

# %% [markdown]
# They describe the same computation. The dynamic graph is a by-product of one
# run, made of live Python objects; the static graph is data, independent of any
# run, that can be inspected, optimised, saved and replayed.
#
# Replaying needs no tracing machinery at all: the graph is turned into plain
# Python code, one line per node:

# %%
print(traced_layer.graph.code)

# %% [markdown]
# ## When does it record again?
#
# A replay is only valid for arguments like those it was recorded with. The cache
# key — the **signature** — holds the shapes, dtypes and devices of the array
# arguments, the values of other arguments and the `Config` flags. A call that
# does not match records a new graph, and with debug output on it says why:

# %%
with dezero.static.debug(1):
    traced_layer(Variable(np.ones((2, 3), np.float32)), W, b)   # 2 rows instead of 4
    traced_layer(x, W, b)                                       # known: replays silently
print(traced_layer)

# %% [markdown]
# ## What a trace cannot see
#
# A trace records **ops**, not Python. A Python `if` on a traced *value* would be
# decided once, during recording, and silently frozen into the graph. dezero
# refuses instead, naming the line and the way out:

# %%
def clipped(x):
    y = F.sum(x * x)
    if float(y) > 10:               # a decision on a value
        y = y / 10
    return y


try:
    dezero.trace(clipped)(x)
except dezero.TraceError as e:
    print("TraceError:", e)

# %% [markdown]
# The same holds for `bool(y)`, `int(y)` and `y.item()`. Branching on **shapes** is
# fine (they are part of the signature), and so is a decision expressed with ops
# (`F.clip`, `F.max`, masks).
#
# ## A whole training step
#
# The real use: trace the training step of notebook 05. The trace records the
# forward pass, the backward pass that `loss.backward()` runs, and the optimizer's
# update. Parameters and the learning rate are **captured state** — read afresh
# at every replay — and the update becomes **state writes** (`W <- ...`), applied
# after each replay. Gradients nobody reads (such as the gradient of the input
# batch) are removed from the graph.

# %%
x_all, t_all = get_spiral(train=True)


def make_training(seed=0):
    state = np.random.get_state()
    np.random.seed(seed)            # the same initial weights for both runs
    model = MLP((10, 3))
    model(x_all[:1])
    np.random.set_state(state)
    optimizer = optimizers.SGD(lr=1.0).setup(model)

    def train_step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    return model, train_step


model, train_step = make_training()
traced_step = dezero.trace(train_step)
traced_step(x_all[:30], t_all[:30])
print(traced_step.graph)

# %%
traced_step.graph.plot(to_file="graphs/07_train_step.svg")

# %% [markdown]
# ## Timings
#
# Train the spiral network for 100 epochs both ways, from the same initial
# weights and on the same batches, and time it. The eager loop builds and walks a
# dynamic graph at every step; the traced loop replays one recorded graph.

# %%
def train(step, epochs=100, batch_size=30):
    order_rng = np.random.default_rng(1)
    start = time.perf_counter()
    for _ in range(epochs):
        order = order_rng.permutation(len(x_all))
        for i in range(0, len(x_all), batch_size):
            batch = order[i:i + batch_size]
            loss = step(x_all[batch], t_all[batch])
    return time.perf_counter() - start, float(loss.data)


timings = {}
for name in ("eager", "traced"):
    model, step = make_training()
    if name == "traced":
        step = dezero.trace(step)
    seconds, last_loss = train(step)
    with dezero.no_grad():
        acc = float(F.accuracy(model(x_all), t_all).data)
    timings[name] = seconds
    print(f"{name:6s}  {seconds:5.2f} s  ({seconds / 1000 * 1e3:.3f} ms per step)   "
          f"last loss {last_loss:.6f}   accuracy {acc:.3f}")
print(f"traced is {timings['eager'] / timings['traced']:.1f}x as fast")

# %%
fig, ax = plt.subplots(figsize=(5, 1.8))
ax.barh(list(timings), list(timings.values()), color=["tab:blue", "tab:orange"])
ax.set_xlabel("seconds for 1000 training steps")
plt.show()

# %% [markdown]
# Same losses, same accuracy, a fraction of the time: for a small network like
# this one, most of an eager step is Python overhead, and that is what the replay
# removes.
#
# Trace mode can also check itself: `dezero.trace(step, check=True)` replays the
# freshly recorded graph once against the eager result (with the state put back
# in between) and raises if they differ.

# %%
model, step = make_training()
checked = dezero.trace(step, check=True)
print("checked step, loss", float(checked(x_all[:30], t_all[:30]).data))

# %% [markdown]
# ## Summary
#
# * **Define-by-run**: the graph is built by running Python, every call. Flexible,
#   easy to debug, but every call pays for Python.
# * **Define-and-run**: a static graph, recorded once by `dezero.trace`, printed as
#   typed text, drawn, turned into replay code, and replayed.
# * The signature decides when to record again; decisions on traced values raise
#   `TraceError` instead of being silently frozen.
