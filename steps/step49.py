"""Step 49: the Dataset class, and preprocessing with transforms.

Step 48 held the whole data set in two arrays. A `Dataset` hides where the
data comes from (generated, read from files, too large for memory) behind
`dataset[i] -> (x, t)` and `len(dataset)`; a mini-batch is built by stacking
the examples of a list of indices. A `transform` given to the dataset
preprocesses each example as it is taken out.
Run: python steps/step49.py
"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.models import MLP

train_set = dezero.datasets.Spiral(train=True)
x, t = train_set[0]
print("len(train_set) =", len(train_set), " train_set[0] = x", x, " t", t)

# A transform runs on each example as it is read.
scaled = dezero.datasets.Spiral(train=True, transform=lambda x: x / 2.0)
print("with transform x / 2:", scaled[0][0])

max_epoch = 300
batch_size = 30
np.random.seed(0)
model = MLP((10, 3))
optimizer = optimizers.SGD(lr=1.0).setup(model)

data_size = len(train_set)
max_iter = math.ceil(data_size / batch_size)
for epoch in range(max_epoch):
    index = np.random.permutation(data_size)
    sum_loss = 0.0
    for i in range(max_iter):
        batch = [train_set[j] for j in index[i * batch_size:(i + 1) * batch_size]]
        batch_x = np.array([example[0] for example in batch])
        batch_t = np.array([example[1] for example in batch])
        y = model(batch_x)
        loss = F.softmax_cross_entropy(y, batch_t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        sum_loss += float(loss.data) * len(batch_t)
    if (epoch + 1) % 100 == 0:
        print(f"epoch {epoch + 1}, loss {sum_loss / data_size:.4f}")

x = np.array([example[0] for example in train_set])
t = np.array([example[1] for example in train_set])
with dezero.no_grad():
    accuracy = float(F.accuracy(model(x), t).data)
print(f"train accuracy: {accuracy:.4f}")
