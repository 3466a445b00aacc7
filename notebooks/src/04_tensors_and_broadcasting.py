# %% [markdown]
# # 04 · Tensors and broadcasting
#
# So far our Variables held single numbers. Networks work on arrays — batches of
# vectors, images — and dezero's Functions take arrays of any shape. One rule keeps
# everything straight:
#
# > **the gradient of a Variable has the same shape as the Variable.**
#
# This notebook follows shapes through forward and backward for the three kinds of
# ops that change them: elementwise ops with broadcasting, reductions, and matrix
# products.

# %%
import numpy as np

import dezero.functions as F
from dezero import Variable
from dezero.utils import plot_dot_graph

rng = np.random.default_rng(0)
x = Variable(rng.standard_normal((2, 3)).astype(np.float32), name="x")
y = F.sum(F.sin(x) * x)
y.backward()
print("x      ", x.shape, x.dtype)
print("y      ", y.shape, y.dtype, "(a 0-d array: one number)")
print("x.grad ", x.grad.shape, x.grad.dtype)
print("x * 2.0", (x * 2.0).dtype, "(a Python number does not promote float32)")

# %% [markdown]
# Elementwise ops like `sin` and `*` work on each element separately, so their
# backward is elementwise too. The sum collapses everything into one number; its
# backward spreads the gradient back out to the input's shape.
#
# Notice also that float32 stayed float32 all the way. Python numbers adapt to the
# array's dtype instead of promoting it to float64, so `x * 2.0` is float32 too.
#
# ## A tool to watch shapes
#
# A small helper walks the graph (like `backward` does, largest generation first)
# and prints, for each Function, the shapes going in and out — and after
# `backward`, the shapes of the gradients.

# %%
def show_shapes(y):
    funcs, seen = [y.creator], set()
    rows = []
    while funcs:
        funcs.sort(key=lambda f: f.generation)
        f = funcs.pop()
        if f in seen:
            continue
        seen.add(f)
        ins = ", ".join(str(v.shape) for v in f.inputs)
        outs = ", ".join(str(o().shape) for o in f.outputs)
        grads = ", ".join("-" if v.grad is None else str(v.grad.shape) for v in f.inputs)
        rows.append(f"{type(f).__name__:12s} {ins:24s} -> {outs:10s}  input grads: {grads}")
        funcs += [v.creator for v in f.inputs if v.creator is not None]
    print("\n".join(rows))

# %% [markdown]
# ## Broadcasting
#
# numpy lets you add a vector `b` of shape `(3,)` to a matrix of shape `(2, 3)`: the
# vector is reused for every row, as if copied. In dezero this copy is a Function of
# its own, `BroadcastTo`.
#
# What is its backward? Each element of `b` was used in two places (once per row),
# so its gradient is the **sum** of the gradients of those places. The backward of
# broadcasting is summing back down to the original shape (`sum_to`), and the
# backward of `sum_to` is broadcasting. They are each other's mirror image.

# %%
x = Variable(rng.standard_normal((2, 3)), name="x")
b = Variable(np.array([1.0, 2.0, 3.0]), name="b")
y = x + b                   # Add broadcasts b behind the scenes
z = F.sum(y * y)
z.backward(retain_grad=True)
print("b.grad:", b.grad.shape, b.grad.data)
print("sum of y.grad over rows:", y.grad.data.sum(axis=0))

# %% [markdown]
# `b.grad` is exactly the column sums of `y.grad`. Making the broadcast explicit
# shows both Functions and both shapes:

# %%
b.cleargrad()
x.cleargrad()
bb = F.broadcast_to(b, (2, 3))
bb.name = "broadcast b"
y = x + bb
y.name = "y"
z = F.sum(y * y)
z.name = "z"
z.backward(retain_grad=True)
show_shapes(z)

# %%
plot_dot_graph(z, verbose=True, to_file="graphs/04_broadcast.svg")

# %% [markdown]
# With `verbose=True` the drawing labels every Variable with its shape and dtype.
#
# ## Reductions
#
# `sum(x, axis=...)` removes an axis; its backward puts it back by broadcasting.
# `keepdims=True` keeps the reduced axis with length 1, which often makes the
# broadcast in the next line work without a reshape.

# %%
x = Variable(rng.standard_normal((4, 3)), name="x")
for axis, keepdims in [(None, False), (0, False), (1, False), (1, True)]:
    x.cleargrad()
    s = F.sum(x, axis=axis, keepdims=keepdims)
    s.backward()
    print(f"sum(axis={axis}, keepdims={keepdims!s:5s}) -> {str(s.shape):7s}   "
          f"x.grad {x.grad.shape}")

# %% [markdown]
# Softmax shows why `keepdims` matters: each row is divided by its own sum.

# %%
x = Variable(rng.standard_normal((4, 3)), name="x")
e = F.exp(x)
p = e / F.sum(e, axis=1, keepdims=True)      # (4, 3) / (4, 1) broadcasts per row
print("rows sum to", p.data.sum(axis=1))
F.sum(p[:, 0]).backward()
print("x.grad shape", x.grad.shape, "- each row's gradient sums to zero:",
      np.allclose(x.grad.data.sum(axis=1), 0))

# %% [markdown]
# ## Matrix products
#
# For `y = x @ W` with `x: (N, D)` and `W: (D, H)` we get `y: (N, H)`. The
# gradients are again matrix products, and the shapes tell you which ones — there is
# only one way to combine `gy: (N, H)` with the other operand into the right shape:
#
# $$gx = gy\,W^\top \quad (N,H)(H,D) \to (N,D) \qquad gW = x^\top gy \quad (D,N)(N,H) \to (D,H)$$

# %%
N, D, H = 5, 4, 3
x = Variable(rng.standard_normal((N, D)), name="x")
W = Variable(rng.standard_normal((D, H)), name="W")
b = Variable(np.zeros(H), name="b")
y = F.matmul(x, W) + b
y.name = "y"
loss = F.sum(y ** 2)
loss.name = "loss"
loss.backward(retain_grad=True)
show_shapes(loss)

gy = y.grad.data
print("gx == gy @ W.T :", np.allclose(x.grad.data, gy @ W.data.T))
print("gW == x.T @ gy :", np.allclose(W.grad.data, x.data.T @ gy))

# %% [markdown]
# ## Reshape and transpose
#
# These only move elements around, so their backward moves the gradient back:
# reshape to the old shape, transpose with the inverse permutation.

# %%
x = Variable(rng.standard_normal((2, 3, 4)), name="x")
y = F.transpose(F.reshape(x, (6, 4)), (1, 0))
y.name = "y"
F.sum(y * np.arange(24.0).reshape(4, 6)).backward()
print("y", y.shape, "  x.grad", x.grad.shape)
print(x.grad.data[0])

# %% [markdown]
# ## When shapes do not fit
#
# Errors name the op and the shapes involved, and say what to do:

# %%
try:
    F.matmul(Variable(np.ones((2, 3))), Variable(np.ones((4, 5))))
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# ## Summary
#
# * A gradient always has its Variable's shape.
# * Broadcasting and `sum_to` are each other's backward; so are `sum` and
#   `broadcast_to`.
# * For `x @ W`, `gx = gy @ W.T` and `gW = x.T @ gy` — the shapes pick the formula.
