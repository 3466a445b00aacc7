# %% [markdown]
# # 02 · Backpropagation
#
# `y.backward()` fills `.grad` of every Variable that `y` depends on. It walks the
# graph from the output back to the inputs, and at each Function applies the chain
# rule: the Function's `backward` turns the gradient of its output into the
# gradients of its inputs.
#
# This notebook looks at the one subtle part of that walk — **the order** in which
# Functions are visited — and at two switches: `retain_grad` and `no_grad`.

# %%
import heapq
import time

import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.utils import plot_dot_graph

x = Variable(np.array(3.0), name="x")
y = F.square(x) * 2 + x
y.backward()
print("dy/dx at 3 =", x.grad.data, "  (4x + 1 = 13)")

# %% [markdown]
# ## A graph where order matters
#
# Take a "diamond": `a` is used twice, and the two paths meet again in `y`.
#
# $$a = x^2,\qquad y = a^2 + a^2 = 2x^4,\qquad \frac{dy}{dx} = 8x^3$$

# %%
def diamond(x):
    a = F.square(x)
    a.name = "a"
    b, c = F.square(a), F.square(a)
    b.name, c.name = "b", "c"
    y = b + c
    y.name = "y"
    return y


x = Variable(np.array(2.0), name="x")
y = diamond(x)
plot_dot_graph(y, verbose=False, to_file="graphs/02_diamond.svg")

# %% [markdown]
# The gradient reaching `a` has **two** parts, one through `b` and one through
# `c`. The `Square` that made `a` may only run its backward after both parts have
# arrived and been added up. Run it too early and it passes on half the gradient.
#
# To see the mistake happen, here is a naive walk: take any Function from a list,
# run its backward, add its creators to the list. It visits each Function once, but
# in whatever order the list gives.

# %%
def naive_backward(y):
    y.grad = Variable(np.ones_like(y.data))
    todo, seen = [y.creator], {y.creator}
    while todo:
        f = todo.pop()                        # last in, first out: no notion of depth
        gys = [out().grad for out in f.outputs]
        gxs = f.backward(*gys)
        gxs = gxs if isinstance(gxs, tuple) else (gxs,)
        for inp, gx in zip(f.inputs, gxs):
            inp.grad = gx if inp.grad is None else inp.grad + gx
            if inp.creator is not None and inp.creator not in seen:
                seen.add(inp.creator)
                todo.append(inp.creator)


x = Variable(np.array(2.0))
naive_backward(diamond(x))
print("naive walk :", x.grad.data)
print("true dy/dx :", 8 * 2.0 ** 3)

# %% [markdown]
# The naive walk got exactly half: it visited the `Square` that made `a` after the
# `c` branch but before the `b` branch.
#
# ## Generations
#
# dezero avoids this by numbering the graph as it is built. A Variable you create
# has **generation** 0; a Function's generation is the largest generation among its
# inputs, and its outputs get one more. A Function therefore always has a larger
# generation than every Function that fed it.

# %%
x = Variable(np.array(2.0), name="x")
y = diamond(x)
f = y.creator
print(f"y   gen {y.generation}   made by {type(f).__name__}, gen {f.generation}")
for v in f.inputs:
    g = v.creator
    print(f"{v.name}   gen {v.generation}   made by {type(g).__name__}, gen {g.generation}")
a = f.inputs[0].creator.inputs[0]
print(f"a   gen {a.generation}   made by {type(a.creator).__name__}, gen {a.creator.generation}")
print(f"x   gen {x.generation}   made by nobody")

# %% [markdown]
# `backward()` keeps the Functions still to visit in a **heap** ordered by
# generation and always takes the one with the largest generation next. Everything
# that consumes `a` (generation 1) has a larger generation than `a`'s creator, so
# all of `a`'s gradient is in place before its creator runs. A heap makes each step
# O(log n), so even very wide or deep graphs cost O(n log n), and the walk is a
# loop, not a recursion, so depth is no limit.
#
# The same order, spelled out with Python's `heapq`:

# %%
order, heap, seen = [], [(-y.creator.generation, 0, y.creator)], {y.creator}
while heap:
    _, _, f = heapq.heappop(heap)
    order.append(f"{type(f).__name__}(gen {f.generation})")
    for inp in f.inputs:
        g = inp.creator
        if g is not None and g not in seen:
            seen.add(g)
            heapq.heappush(heap, (-g.generation, len(seen), g))
print(" -> ".join(order))

y.backward()
print("dezero's backward:", x.grad.data)

# %% [markdown]
# ## A deep graph
#
# Because the walk is a loop over a heap, a chain of 20 000 Functions is no
# problem (a recursive walk would hit Python's recursion limit):

# %%
x = Variable(np.array(1.0))
y = x
for _ in range(20_000):
    y = y * 1.0001
t0 = time.perf_counter()
y.backward()
print(f"dy/dx = {x.grad.data:.4f} (1.0001**20000 = {1.0001 ** 20000:.4f}), "
      f"backward took {time.perf_counter() - t0:.2f} s")

# %% [markdown]
# ## `retain_grad`: gradients of intermediate Variables
#
# Usually we only want the gradients of the inputs (the parameters we train), so
# `backward()` frees the gradient of each intermediate Variable as soon as it has
# been passed on. Pass `retain_grad=True` to keep them, e.g. to inspect them:

# %%
x = Variable(np.array(2.0))
y = diamond(x)
a = y.creator.inputs[0].creator.inputs[0]
y.backward()
print("default          : x.grad =", x.grad.data, " a.grad =", a.grad)

x.cleargrad()
y = diamond(x)
a = y.creator.inputs[0].creator.inputs[0]
y.backward(retain_grad=True)
print("retain_grad=True : x.grad =", x.grad.data, " a.grad =", a.grad.data, " (4a = 16)")

# %% [markdown]
# Note `x.cleargrad()`: gradients **accumulate** (`x.grad` is added to, not
# replaced), which is what makes the diamond come out right. Between two separate
# computations, clear them.
#
# ## `no_grad`: compute without recording
#
# Recording the graph costs memory (every input is kept alive for backward) and a
# little time. For pure evaluation — testing a model, updating parameters — switch
# recording off with `dezero.no_grad()`:

# %%
x = Variable(np.ones((100, 100)))

def work(x):
    for _ in range(200):
        x = F.tanh(x) * 0.5
    return x

y = work(x)
print("recording on : y.creator =", type(y.creator).__name__, " generation", y.generation)
with dezero.no_grad():
    y = work(x)
print("recording off: y.creator =", y.creator, " generation", y.generation)

# %% [markdown]
# With recording off, nothing keeps the intermediate arrays alive, so each one is
# freed as soon as the next line no longer needs it. `no_grad()` is a shorthand for
# `dezero.using_config("enable_backprop", False)`.
#
# ## Summary
#
# * Gradients flowing into a Variable must all be summed before its creator runs.
# * Generations number the graph; `backward()` visits Functions in decreasing
#   generation using a heap, with no recursion.
# * `retain_grad=True` keeps intermediate gradients; `no_grad()` stops recording.
