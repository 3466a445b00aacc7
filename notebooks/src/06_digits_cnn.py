# %% [markdown]
# # 06 · A real image task, offline: digits with a small CNN
#
# scikit-learn ships a small set of handwritten digits: 1 797 grey images of 8×8
# pixels, labelled 0–9. It needs no download, so this notebook runs anywhere.
# We train a small **convolutional network** (CNN) on it with dezero.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Model, optimizers
from dezero.dataloaders import DataLoader
from dezero.datasets import Dataset

np.random.seed(0)   # weights and shuffling draw from np.random: same run every time

digits = load_digits()
print("images", digits.images.shape, "values", digits.images.min(), "to", digits.images.max())

fig, axes = plt.subplots(1, 10, figsize=(10, 1.3))
for digit, ax in enumerate(axes):
    ax.imshow(digits.images[digits.target == digit][0], cmap="gray_r")
    ax.set_title(str(digit))
    ax.axis("off")
plt.show()

# %% [markdown]
# ## A dezero Dataset
#
# A `Dataset` fills `data` and `label` in `prepare()` and hands out one example at a
# time; a `DataLoader` shuffles and stacks them into mini-batches. Images get the
# shape a convolution expects, `(channels, height, width)` = `(1, 8, 8)`, with
# pixel values scaled to [0, 1]. A fixed random split keeps 1 500 images for
# training and 297 for testing.

# %%
split = np.random.default_rng(0).permutation(len(digits.images))


class Digits(Dataset):
    def prepare(self):
        rows = split[:1500] if self.train else split[1500:]
        self.data = (digits.images[rows] / 16.0).astype(np.float32)[:, None, :, :]
        self.label = digits.target[rows]


train_set, test_set = Digits(train=True), Digits(train=False)
x, t = train_set[0]
print("one example:", x.shape, x.dtype, "label", t)
print("train", len(train_set), "test", len(test_set))

# %% [markdown]
# ## The network
#
# A convolution slides small learned 3×3 filters over the image, so the same
# pattern detector is used at every position; max-pooling keeps the strongest
# answer in each 2×2 window and halves the size. Two such stages, then one linear
# layer to the ten class scores:

# %%
class DigitsCNN(Model):
    def __init__(self):
        super().__init__()
        self.conv1 = L.Conv2d(16, kernel_size=3, pad=1)
        self.conv2 = L.Conv2d(32, kernel_size=3, pad=1)
        self.fc = L.Linear(10)

    def forward(self, x):
        x = F.pooling(F.relu(self.conv1(x)), 2, 2)
        x = F.pooling(F.relu(self.conv2(x)), 2, 2)
        return self.fc(F.flatten(x))


model = DigitsCNN()

# The same computation step by step, to watch the shapes of a batch of 50:
x = dezero.Variable(train_set.data[:50])
print(f"{'input':22s}{x.shape}")
x = F.pooling(F.relu(model.conv1(x)), 2, 2)
print(f"{'conv1, relu, pool':22s}{x.shape}")
x = F.pooling(F.relu(model.conv2(x)), 2, 2)
print(f"{'conv2, relu, pool':22s}{x.shape}")
x = model.fc(F.flatten(x))
print(f"{'flatten, linear':22s}{x.shape}")
for name, layer in [("conv1", model.conv1), ("conv2", model.conv2), ("fc", model.fc)]:
    print(f"{name}: W {layer.W.shape}  b {layer.b.shape}")
print("parameters in all:", sum(p.size for p in model.params()))

# %% [markdown]
# ## Training
#
# The loop is the one from notebook 05; only the model and the optimizer (Adam,
# which adapts the step size of each parameter) changed. After each epoch we
# measure accuracy on the test images.

# %%
optimizer = optimizers.Adam(0.01).setup(model)
loader = DataLoader(train_set, batch_size=50)
history = []
start = time.perf_counter()
for epoch in range(8):
    total = 0.0
    for x, t in loader:
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        total += float(loss.data) * len(t)
    with dezero.no_grad():
        acc = float(F.accuracy(model(test_set.data), test_set.label).data)
    history.append((total / len(train_set), acc))
    print(f"epoch {epoch + 1}   loss {history[-1][0]:.4f}   test accuracy {acc:.3f}")
print(f"{time.perf_counter() - start:.1f} s")

# %%
loss_curve, acc_curve = zip(*history)
epochs = np.arange(1, len(history) + 1)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 2.8))
ax1.plot(epochs, loss_curve, "o-")
ax1.set(xlabel="epoch", ylabel="training loss")
ax2.plot(epochs, acc_curve, "o-", color="tab:green")
ax2.set(xlabel="epoch", ylabel="test accuracy")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What does it get wrong?
#
# The mistakes are often instructive: many of them are digits a person would
# hesitate on too.

# %%
with dezero.no_grad():
    predicted = model(test_set.data).data.argmax(axis=1)
wrong = np.flatnonzero(predicted != test_set.label)
print(f"{len(wrong)} of {len(test_set)} test images misclassified "
      f"(accuracy {1 - len(wrong) / len(test_set):.3f})")

shown = wrong[:8]
fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(1.3 * max(len(shown), 1), 1.8),
                         squeeze=False)
for ax, i in zip(axes[0], shown):
    ax.imshow(test_set.data[i, 0], cmap="gray_r")
    ax.set_title(f"true {test_set.label[i]}\nsaid {predicted[i]}", fontsize=9)
for ax in axes[0]:
    ax.axis("off")
plt.show()

# %% [markdown]
# ## What did the first layer learn?
#
# Each of the 16 filters of `conv1` is a 3×3 pattern of weights (red positive,
# blue negative). They started as random noise. Three by three pixels leave little
# room, but several now split into a positive and a negative side along one
# direction: tiny detectors of a stroke's edge at some angle.

# %%
W = model.conv1.W.data            # (out_channels, in_channels, 3, 3)
fig, axes = plt.subplots(2, 8, figsize=(8, 2.2))
for ax, w in zip(axes.ravel(), W[:, 0]):
    ax.imshow(w, cmap="RdBu_r", vmin=-np.abs(W).max(), vmax=np.abs(W).max())
    ax.axis("off")
plt.show()

# %% [markdown]
# ## Summary
#
# * Any array data becomes a dezero `Dataset` by filling `data` and `label`.
# * `Conv2d` and `pooling` work on `(N, C, H, W)` batches; the same
#   forward / backward / update loop trains them.
# * About six thousand parameters reach roughly 98–99% test accuracy in seconds.
