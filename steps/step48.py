"""Step 48: classifying the spiral dataset with mini-batches.

Three interleaved spiral arms of 100 points each cannot be separated by
lines; an MLP with one hidden layer of 10 units can. Each epoch shuffles the
300 points and takes them 30 at a time (a mini-batch); after 300 epochs the
network classifies the training points almost perfectly. The decision
regions are plotted over the plane.
Run: python steps/step48.py
"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.models import MLP

max_epoch = 300
batch_size = 30
hidden_size = 10
lr = 1.0

np.random.seed(0)  # weight initialisation and shuffling draw from numpy's global RNG
x, t = dezero.datasets.get_spiral(train=True)
model = MLP((hidden_size, 3))
optimizer = optimizers.SGD(lr).setup(model)

data_size = len(x)
max_iter = math.ceil(data_size / batch_size)
for epoch in range(max_epoch):
    index = np.random.permutation(data_size)
    sum_loss = 0.0
    for i in range(max_iter):
        batch_index = index[i * batch_size:(i + 1) * batch_size]
        batch_x, batch_t = x[batch_index], t[batch_index]
        y = model(batch_x)
        loss = F.softmax_cross_entropy(y, batch_t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        sum_loss += float(loss.data) * len(batch_t)
    if (epoch + 1) % 50 == 0:
        print(f"epoch {epoch + 1}, loss {sum_loss / data_size:.4f}")

with dezero.no_grad():
    accuracy = float(F.accuracy(model(x), t).data)
print(f"train accuracy: {accuracy:.4f}")

plt = pyplot()
if plt is not None:
    h = 0.01
    xx, yy = np.meshgrid(np.arange(-1.1, 1.1, h), np.arange(-1.1, 1.1, h))
    grid = np.c_[xx.ravel(), yy.ravel()]
    with dezero.no_grad():
        predicted = np.argmax(model(grid).data, axis=1)
    plt.contourf(xx, yy, predicted.reshape(xx.shape), alpha=0.3)
    for c, marker in zip(range(3), "ox^"):
        plt.scatter(x[t == c, 0], x[t == c, 1], s=30, marker=marker)
    plt.savefig("spiral_decision_regions.png")
    print("plot saved to spiral_decision_regions.png")
