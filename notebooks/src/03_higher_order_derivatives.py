# %% [markdown]
# # 03 · Higher-order derivatives
#
# Every `backward` in dezero is written with dezero Functions. So when backward
# runs with recording on, it builds **a graph of the derivative** — and that graph
# can be differentiated again. Ask for it with `backward(create_graph=True)`.

# %%
import matplotlib.pyplot as plt
import numpy as np

import dezero.functions as F
from dezero import Variable
from dezero.utils import plot_dot_graph


def f(x):
    return x ** 4 - 2 * x ** 2


x = Variable(np.array(2.0), name="x")
y = f(x)
y.backward(create_graph=True)
gx = x.grad                 # f'(x) = 4x^3 - 4x, itself a Variable with a graph
print("f'(2)  =", gx.data, "  (4*8 - 4*2 = 24)")

x.cleargrad()               # otherwise the next gradient is added to this one
gx.backward()
print("f''(2) =", x.grad.data, "  (12*4 - 4 = 44)")

# %% [markdown]
# ## Newton's method
#
# Gradient descent steps against the gradient with a fixed learning rate.
# Newton's method also uses the curvature: near a minimum, f looks like a parabola
# whose vertex is at $x - f'(x)/f''(x)$, so it jumps there.
#
# With both derivatives at hand it is a short loop. We look for a minimum of
# $f(x) = x^4 - 2x^2$ (there is one at $x = 1$).

# %%
def newton(x0, steps):
    x = Variable(np.array(x0))
    path = [x0]
    for _ in range(steps):
        y = f(x)
        x.cleargrad()
        y.backward(create_graph=True)
        gx = x.grad
        x.cleargrad()
        gx.backward()
        gx2 = x.grad
        x.data = (x - gx / gx2).data   # assign a new array; never edit .data in place
        path.append(float(x.data))
    return path


def gradient_descent(x0, steps, lr=0.01):
    x = Variable(np.array(x0))
    path = [x0]
    for _ in range(steps):
        x.cleargrad()
        f(x).backward()
        x.data = (x - lr * x.grad).data
        path.append(float(x.data))
    return path


newton_path = newton(2.0, 8)
gd_path = gradient_descent(2.0, 150)
for i, value in enumerate(newton_path[:7]):
    print(f"Newton step {i}: x = {value:.12f}")

# %% [markdown]
# How far from the minimum is each method after every step? (A log scale: each
# grid line down is ten times closer.)

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.semilogy(np.abs(np.array(gd_path) - 1) + 1e-16, ".-", label="gradient descent, lr = 0.01")
ax.semilogy(np.abs(np.array(newton_path) - 1) + 1e-16, "s-", label="Newton")
ax.set_xlabel("step")
ax.set_ylabel("|x − 1|")
ax.set_ylim(1e-13, 3)
ax.legend()
plt.show()

# %% [markdown]
# Newton's error roughly squares at every step (1e-1, 1e-3, 1e-6, 1e-12): it lands
# on $x = 1$ to twelve digits in six steps, while gradient descent gains a fixed
# factor per step and is still short after 150. (Newton needs the second
# derivative, which is cheap for one number but costly for millions of parameters;
# that is why networks are trained with gradient methods.)
#
# ## Derivatives of tanh, again and again
#
# Nothing stops us at two. Starting from $y = \tanh(x)$ on a whole array of points
# (each element is independent, so one backward gives the derivative at every
# point), we take the derivative of the derivative, several times.

# %%
x = Variable(np.linspace(-5, 5, 201), name="x")
y = F.tanh(x)
y.name = "y"
curves = [y.data]
graphs = []
gx = y
for order in range(1, 5):
    x.cleargrad()
    gx.backward(create_graph=True)
    gx = x.grad
    gx.name = f"gx{order}"
    curves.append(gx.data)
    graphs.append(gx)

fig, ax = plt.subplots(figsize=(7, 3.5))
for order, c in enumerate(curves):
    ax.plot(x.data, c, label="tanh" if order == 0 else f"derivative {order}")
ax.set_xlabel("x")
ax.legend()
plt.show()

# %% [markdown]
# The graph of each derivative is built by running the previous derivative's
# backward, so it grows quickly. Here is the first derivative,
# $1 - \tanh^2(x)$, exactly as backward built it:

# %%
plot_dot_graph(graphs[0], verbose=False, to_file="graphs/03_tanh_1.svg")

# %% [markdown]
# and the second, which already contains the whole first one:

# %%
plot_dot_graph(graphs[1], verbose=False, to_file="graphs/03_tanh_2.svg")

# %% [markdown]
# Counting the Functions in each graph shows the growth:

# %%
def count_functions(v):
    seen, todo = set(), [v.creator]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        todo.extend(inp.creator for inp in f.inputs)
    return len(seen)


for order, g in enumerate(graphs, start=1):
    print(f"derivative {order}: {count_functions(g):4d} functions")

# %% [markdown]
# ## Summary
#
# * `backward(create_graph=True)` records the backward pass, so `x.grad` has a
#   graph of its own and can be differentiated again.
# * Clear `x.grad` between derivatives, since gradients accumulate.
# * Newton's method uses the second derivative to converge in a few steps.
