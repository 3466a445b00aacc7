# %% [markdown]
# # 05 · Training a network
#
# Everything so far comes together: a small neural network learns to tell apart
# three interleaved spirals. We will see the data, the model, the training loop,
# the loss going down, and finally the regions of the plane the network assigns to
# each class.

# %%
import matplotlib.pyplot as plt
import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.dataloaders import DataLoader
from dezero.datasets import Spiral
from dezero.models import MLP
from dezero.utils import plot_dot_graph

# The weights start random (drawn with np.random); seeding makes this notebook
# give the same pictures every time.
np.random.seed(0)

train_set = Spiral(train=True)
test_set = Spiral(train=False)
print("train:", train_set.data.shape, train_set.data.dtype, " labels:", train_set.label.shape)

colors = np.array(["tab:blue", "tab:orange", "tab:green"])
fig, ax = plt.subplots(figsize=(4, 4))
ax.scatter(*train_set.data.T, c=colors[train_set.label], s=12)
ax.set_aspect("equal")
ax.set_title("Spiral: 300 points, 3 classes")
plt.show()

# %% [markdown]
# No straight line separates these classes, so a linear model cannot do it. A
# network with one hidden layer can: `MLP((10, 3))` is
#
# `x (N, 2) → Linear → (N, 10) → sigmoid → Linear → (N, 3) scores`
#
# and `softmax_cross_entropy` turns the three scores per point into probabilities
# and measures how much probability went to the wrong classes.
#
# The layers create their weights lazily, on the first call, once they know the
# input size. Here is the whole graph of one loss — forward only, before any
# backward — with the shapes on every Variable:

# %%
model = MLP((10, 3))
x, t = train_set.data[:30], train_set.label[:30]
loss = F.softmax_cross_entropy(model(x), t)
loss.name = "loss"
for i, layer in enumerate(model.layers):
    layer.W.name, layer.b.name = f"W{i}", f"b{i}"
for p in model.params():
    print(f"{p.name}  {p.shape}")
plot_dot_graph(loss, verbose=True, to_file="graphs/05_loss.svg")

# %% [markdown]
# ## The training loop
#
# One **step** takes a mini-batch of 30 points, computes the loss, clears the old
# gradients, runs backward, and lets the optimizer move every parameter a little
# against its gradient (plain SGD: `W ← W − lr · ∂loss/∂W`). One **epoch** is one
# pass over the 300 points in a shuffled order.

# %%
max_epoch, batch_size, lr = 300, 30, 1.0
model = MLP((10, 3))
optimizer = optimizers.SGD(lr).setup(model)
loader = DataLoader(train_set, batch_size)

losses = []
for epoch in range(max_epoch):
    total = 0.0
    for x, t in loader:
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        total += float(loss.data) * len(t)
    losses.append(total / len(train_set))
    if epoch % 50 == 0 or epoch == max_epoch - 1:
        print(f"epoch {epoch + 1:3d}   loss {losses[-1]:.4f}")

# %%
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(np.arange(1, max_epoch + 1), losses)
ax.set_xlabel("epoch")
ax.set_ylabel("mean loss")
ax.set_title("Training loss")
plt.show()

# %% [markdown]
# The loss falls fast at first, stalls on a plateau — the easy part is learned,
# the curls are not yet — and then falls again as the hidden units find them.
#
# ## How well does it classify?
#
# Accuracy is the fraction of points whose highest score is the right class. We
# measure it under `no_grad()`, since nothing will be differentiated, and also on a
# second spiral set the network never saw.

# %%
with dezero.no_grad():
    train_acc = F.accuracy(model(train_set.data), train_set.label)
    test_acc = F.accuracy(model(test_set.data), test_set.label)
print(f"train accuracy {float(train_acc.data):.3f}   test accuracy {float(test_acc.data):.3f}")

# %% [markdown]
# ## The decision boundary
#
# To see what the network learned, ask it about every point of a fine grid over the
# plane and colour each point by the class it predicts:

# %%
h = 0.01
xx, yy = np.meshgrid(np.arange(-1.1, 1.1, h), np.arange(-1.1, 1.1, h))
grid = np.c_[xx.ravel(), yy.ravel()].astype(np.float32)
with dezero.no_grad():
    scores = model(grid)
predicted = scores.data.argmax(axis=1).reshape(xx.shape)

fig, ax = plt.subplots(figsize=(4.5, 4.5))
ax.contourf(xx, yy, predicted, levels=[-0.5, 0.5, 1.5, 2.5],
            colors=["#c6dbef", "#fdd0a2", "#c7e9c0"])
ax.scatter(*train_set.data.T, c=colors[train_set.label], s=12)
ax.set_aspect("equal")
ax.set_title(f"Decision regions after {max_epoch} epochs")
plt.show()

# %% [markdown]
# The boundaries curl with the spirals: ten sigmoid units are enough to bend the
# plane this way.
#
# ## Summary
#
# * A model is a Layer that owns Parameters; `model.params()` yields them, in the
#   order they were created.
# * A training step is: forward, `cleargrads()`, `backward()`, `optimizer.update()`.
# * Evaluate under `no_grad()`.
#
# Next: the same loop on real images, with a convolutional network.
