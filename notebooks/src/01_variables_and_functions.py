# %% [markdown]
# # 01 · Variables and Functions
#
# dezero has two kinds of objects:
#
# * a **`Variable`** is a box around a numpy array (`.data`), with room for its
#   gradient (`.grad`) and a pointer to the function that made it (`.creator`);
# * a **`Function`** takes Variables, computes on their arrays, and returns new
#   Variables.
#
# The interesting part is what happens *while* a Function computes: it writes down
# who its inputs and outputs are. Calling functions therefore builds a graph as a
# side effect of running ordinary Python. This is called **define-by-run**: there is
# no separate "build the model" phase — the graph *is* the record of what ran.

# %%
import numpy as np

import dezero.functions as F
from dezero import Function, Variable
from dezero.utils import get_dot_graph, plot_dot_graph

x = Variable(np.array(2.0), name="x")
x

# %% [markdown]
# A Variable made by you has no creator. One made by a Function remembers it:

# %%
y = F.sin(x) * x + 1.0
print("y =", y)
print("made by     :", y.creator)
print("whose inputs:", [v.data for v in y.creator.inputs])
print("x.creator   :", x.creator)

# %% [markdown]
# Following `.creator` and `.inputs` backwards from `y` reaches every step of the
# computation. `plot_dot_graph` walks those links and draws them with Graphviz:
# ellipses are Variables, boxes are Functions. In a notebook the returned object
# displays itself inline. (Drawing needs Graphviz's `dot`;
# `pip install "dezero[viz]"` brings a pure-Python one.)

# %%
y.name = "y"
plot_dot_graph(y, verbose=False, to_file="graphs/01_sin.svg")

# %% [markdown]
# The drawing is made from plain DOT text, which you can read or save without any
# renderer:

# %%
print(get_dot_graph(y, verbose=False))

# %% [markdown]
# ## The graph follows the Python that ran
#
# Because the graph is recorded while the code runs, ordinary Python control flow
# decides its shape. Here a loop runs as many times as the *value* of `n` says, and
# an `if` looks at the data. Two calls give two different graphs.

# %%
def poly(x, n):
    """x + x**2/2 + ... + x**n/n, and -y when x is negative."""
    y = x
    for k in range(2, n + 1):
        y = y + x ** k / k
    if x.data < 0:          # a decision on a value: fine in define-by-run
        y = -y
    y.name = "y"
    return y


a = Variable(np.array(0.5), name="x")
plot_dot_graph(poly(a, 2), verbose=False, to_file="graphs/01_poly2.svg")

# %%
b = Variable(np.array(-0.5), name="x")
plot_dot_graph(poly(b, 4), verbose=False, to_file="graphs/01_poly4.svg")

# %% [markdown]
# The second graph is longer (the loop ran three times) and ends in a `Neg` box
# (the `if` was taken). Nothing had to be declared in advance.

# %% [markdown]
# ## Writing your own Function
#
# A Function subclass has two methods:
#
# * `forward` works on **arrays** and returns the result;
# * `backward` works on **Variables**: given the gradient of the output (`gy`), it
#   returns the gradient of each input. Reading the inputs through `self.inputs`
#   (instead of keeping arrays on `self`) is what lets later notebooks
#   differentiate a backward again, and lets trace mode record it.
#
# Here is the cube, y = x³, with dy/dx = 3x²:

# %%
class Cube(Function):
    def forward(self, x):
        return x ** 3

    def backward(self, gy):
        x, = self.inputs
        return gy * 3 * x ** 2


x = Variable(np.array(2.0), name="x")
y = Cube()(x)
y.backward()
print("y  =", y.data, "   dy/dx =", x.grad.data, "  (3 * 2**2 = 12)")

# %% [markdown]
# Every Function class gets an op name, used when graphs are printed or traced.
# dezero's own ops have short names (`sin`, `mul`); your classes get a name
# prefixed by their module, so they can never clash with dezero's.

# %%
print(F.Sin.op_name, F.Mul.op_name, Cube.op_name)

# %% [markdown]
# ## Summary
#
# * Variables hold arrays; Functions compute on them **and** record the graph.
# * The graph is a by-product of running Python, so loops and `if`s just work.
# * `plot_dot_graph(y)` draws the graph that produced `y`.
#
# Next: how `backward()` walks this graph.
