"""Step 51: training on MNIST.

The first real data set: 28x28 grey images of handwritten digits, read by
`dezero.datasets.MNIST` from files it downloads once into the cache
directory (`dezero.utils.cache_dir`, or $DEZERO_CACHE_DIR). A transform
flattens each image to 784 float32 values in [0, 1]. The network is an MLP
with ReLU hidden units, trained by Adam; ReLU (max(0, x)) keeps gradients
from fading as the sigmoid's do, and Adam adapts the step size of each
parameter. To stay quick this trains a small net on a subset for a few
epochs (the book: 1000 hidden units, all 60000 images). Offline, a
synthetic stand-in replaces MNIST (the run says so).
Run: python steps/step51.py
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from standins import load_mnist

import dezero
import dezero.functions as F
from dezero import DataLoader, optimizers
from dezero.models import MLP


def f(x):
    x = x.flatten()
    x = x.astype(np.float32)
    x /= 255.0
    return x


train_set = load_mnist(train=True, transform=f)
test_set = load_mnist(train=False, transform=f)
# A subset keeps the run short; the full 60000 images take minutes per epoch.
train_set.data, train_set.label = train_set.data[:6000], train_set.label[:6000]
test_set.data, test_set.label = test_set.data[:1000], test_set.label[:1000]
x, t = train_set[0]
print(f"{type(train_set).__name__}: {len(train_set)} train, {len(test_set)} test examples; "
      f"x {x.shape} {x.dtype}, label {t}")

max_epoch = 3
batch_size = 100
hidden_size = 100

np.random.seed(0)
train_loader = DataLoader(train_set, batch_size)
test_loader = DataLoader(test_set, batch_size, shuffle=False)
model = MLP((hidden_size, 10), activation=F.relu)
optimizer = optimizers.Adam().setup(model)

for epoch in range(max_epoch):
    start = time.time()
    sum_loss = sum_acc = 0.0
    for x, t in train_loader:
        y = model(x)
        loss = F.softmax_cross_entropy(y, t)
        acc = F.accuracy(y, t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        sum_loss += float(loss.data) * len(t)
        sum_acc += float(acc.data) * len(t)
    print(f"epoch {epoch + 1}: train loss {sum_loss / len(train_set):.4f}, "
          f"accuracy {sum_acc / len(train_set):.4f} ({time.time() - start:.1f} s)")

sum_acc = 0.0
with dezero.no_grad():
    for x, t in test_loader:
        sum_acc += float(F.accuracy(model(x), t).data) * len(t)
print(f"test accuracy: {sum_acc / len(test_set):.4f}")
