# %% [markdown]
# # 11 · Shapes and symbols: one graph for every size
#
# A static graph is specialised on shapes: in notebooks 07-10 every batch size and
# every sequence length recorded a graph of its own. Here sizes become **symbols**:
#
# 1. a trace that sees a size vary records it as a name, `B`, and replays one graph
#    for every batch (automatic dynamic);
# 2. Python that reads a size records an expression, and a decision on one becomes
#    a **guard** of the graph;
# 3. the fused kernels take the sizes as arguments;
# 4. the same graphs can be defined before any data exists, from **placeholders**:
#    define-and-run as the DeZero book's essay describes it.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import dezero
import dezero.functions as F
from dezero import models, optimizers
from dezero.datasets import get_spiral

x_all, t_all = get_spiral(train=True)


def make_step(seed=0):
    """A fresh MLP (the same weights at every call), SGD, and its training step."""
    np.random.seed(seed)
    model = models.MLP((10, 3))
    optimizer = optimizers.SGD(1.0).setup(model)

    def train_step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return train_step

# %% [markdown]
# ## 1. A graph per shape, or one graph of B
#
# Ten batch sizes. With `dynamic=False` each size records a graph, until
# `max_entries` (8) is used up and the rest run eagerly. By default, the second
# call differs from the first only in its batch size, so its recording makes that
# size symbolic: one more graph, and it serves every later size.

# %%
sizes = [30, 17, 5, 64, 3, 29, 8, 50, 11, 2]
for dynamic in (False, None):
    step = dezero.trace(make_step(), dynamic=dynamic)
    with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")   # the max_entries warning
        for n in sizes:
            step(x_all[:n], t_all[:n])
    print(f"dynamic={dynamic}: {step.entries} graphs")
print(*step.retraces, sep="\n")

# %%
print(step.graph)

# %% [markdown]
# Every shape holds `B` where the batch size was; the header says what every call
# must satisfy, `where B >= 2`: a size of 1 broadcasts where another would not, so a
# batch of one gets a graph of fixed sizes of its own (as in torch.compile).
#
# ## 2. Expressions and guards
#
# While a trace records, `x.shape[0]` is a symbolic int: arithmetic on it records
# expressions, and a decision on it is taken with this call's value and kept as a
# relation the replay checks.

# %%
def normalise_rows(x):
    n, d = x.shape
    flat = F.reshape(x, (n * d,))                 # B*T elements
    centred = flat - F.sum(flat) / (n * d)        # the mean, 1 / (B*T) a node
    if n > 4:                                     # a guard: B > 4
        centred = centred * 2.0
    return F.reshape(centred, (n, d))


normalise = dezero.trace(normalise_rows, dynamic=True)
for n in (6, 9, 3, 5):
    normalise(np.random.default_rng(n).standard_normal((n, 7)))
print(f"{normalise.entries} graphs:")
for entry in normalise._symbolic:
    print(" ", str(entry.graph).splitlines()[0])
print([line.strip() for line in str(normalise._symbolic[0].graph).splitlines()
       if "reshape" in line or "size_number" in line])

# %% [markdown]
# ## 3. Kernels that take their sizes
#
# Fusion makes the same kernels of the symbolic graph as of a static one. The C++
# of a kernel whose shapes hold `B` reads it from `_S`, the array of the sizes'
# values that each call passes; the replay code reads `_n_B` from the input's shape.

# %%
plan = step.graph.compile("cpu").wait()
print("\n".join(line for line in plan.source.splitlines() if "_n_B" in line))
print()
print("\n".join(line for line in plan.kernel_source.splitlines() if "_S[" in line))

# %% [markdown]
# How much does a graph of B cost against a graph made for the very size? Each
# replay reads the sizes and passes them on; the kernels and the BLAS calls are
# the same.

# %%
def best_ms(fn, *args, repeat=300):
    fn(*args)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn(*args)
        times.append((time.perf_counter() - start) / repeat)
    return min(times) * 1e3


symbolic = dezero.trace(make_step(), dynamic=True)
symbolic(x_all[:30], t_all[:30])
symbolic.graph.compile().wait()
rows = []
for n in (8, 32, 100, 300):
    static = dezero.trace(make_step(), dynamic=False)
    static(x_all[:n], t_all[:n])
    static.graph.compile().wait()
    rows.append((n, best_ms(static, x_all[:n], t_all[:n]),
                 best_ms(symbolic, x_all[:n], t_all[:n])))
    print(f"batch {n:>3}: static {rows[-1][1]:.3f} ms, symbolic {rows[-1][2]:.3f} ms")

fig, ax = plt.subplots(figsize=(6, 2.6))
ax.bar([str(n) for n, _, _ in rows], [s / f for _, f, s in rows])
ax.axhline(1.0, color="gray", lw=0.8)
ax.set_xlabel("batch size")
ax.set_ylabel("symbolic / static")
plt.show()

# %% [markdown]
# ## 4. Define-and-run from placeholders
#
# The book's essay describes frameworks that define the computation first, on
# symbols, and feed data later. A placeholder is a Variable with a shape and a
# dtype and no numbers; Functions on it compute shapes and dtypes only, and
# `dezero.compile` makes the graph. The essay's example, as written:

# %%
a = dezero.placeholder("a", ())
b = dezero.placeholder("b", ())
d = a * b + 1
f = dezero.compile(d)
print(f)
print(f(a=np.array(2.0), b=np.array(3.0)))

# %% [markdown]
# A `Builder` records a whole training step from named inputs into a `Script`,
# which runs batch after batch. Its graph is the one a trace of the same step
# makes; here a batch of one runs it too (placeholder sizes are 1 or more).

# %%
np.random.seed(0)
model = models.MLP((10, 3))
optimizer = optimizers.SGD(1.0).setup(model)
model(x_all[:1])

with dezero.Builder("train_step") as builder:
    x = builder.input("x", ("B", 2))
    t = builder.input("t", ("B",), dtype=np.int64)
    loss = F.softmax_cross_entropy(model(x), t)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    builder.output("loss", loss)
script = builder.build().compile()
print(str(script.graph).splitlines()[0][:70], "...")

losses, rng = [], np.random.default_rng(0)
for epoch in range(300):
    index = rng.permutation(300)
    for i in range(0, 300, 30):
        script.set_input("x", x_all[index[i:i + 30]])
        script.set_input("t", t_all[index[i:i + 30]])
        losses.append(float(script.run()["loss"].data))
script.set_input("x", x_all[:1])
script.set_input("t", t_all[:1])
print("a batch of one:", script.run()["loss"])

fig, ax = plt.subplots(figsize=(6, 2.6))
ax.plot(np.convolve(losses, np.ones(10) / 10, mode="valid"))
ax.set_xlabel("run")
ax.set_ylabel("loss")
plt.show()
