"""Step 50: DataLoader, and measuring accuracy on unseen data.

`DataLoader(dataset, batch_size, shuffle)` does step 49's batching: iterate
over it for one epoch of (x, t) mini-batches, reshuffled every epoch.
`F.accuracy` counts the share of correct argmax predictions. Training is now
evaluated on a separate test set each epoch, under `no_grad()` since no
gradient is needed there; the curves are plotted.
Run: python steps/step50.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero
import dezero.functions as F
from dezero import DataLoader, optimizers
from dezero.models import MLP

# accuracy: the argmax of each row against the label.
y = np.array([[0.2, 0.8, 0.0], [0.1, 0.9, 0.0], [0.8, 0.1, 0.1]])
t = np.array([1, 2, 0])
print("accuracy of the example:", float(F.accuracy(y, t).data))

max_epoch = 300
batch_size = 30
np.random.seed(0)
train_set = dezero.datasets.Spiral(train=True)
test_set = dezero.datasets.Spiral(train=False)
train_loader = DataLoader(train_set, batch_size)
test_loader = DataLoader(test_set, batch_size, shuffle=False)

model = MLP((10, 3))
optimizer = optimizers.SGD(lr=1.0).setup(model)


def run_epoch(loader, train):
    """Mean loss and accuracy over one pass of `loader`, training if asked."""
    sum_loss = sum_acc = 0.0
    for x, t in loader:
        y = model(x)
        loss = F.softmax_cross_entropy(y, t)
        if train:
            model.cleargrads()
            loss.backward()
            optimizer.update()
        sum_loss += float(loss.data) * len(t)
        sum_acc += float(F.accuracy(y, t).data) * len(t)
    n = len(loader.dataset)
    return sum_loss / n, sum_acc / n


history = {"train": [], "test": []}
for epoch in range(max_epoch):
    history["train"].append(run_epoch(train_loader, train=True))
    with dezero.no_grad():
        history["test"].append(run_epoch(test_loader, train=False))
    if (epoch + 1) % 100 == 0:
        (train_loss, train_acc), (test_loss, test_acc) = history["train"][-1], history["test"][-1]
        print(f"epoch {epoch + 1}: train loss {train_loss:.4f}, accuracy {train_acc:.4f} | "
              f"test loss {test_loss:.4f}, accuracy {test_acc:.4f}")

print(f"final train accuracy: {history['train'][-1][1]:.4f}")
print(f"final test accuracy: {history['test'][-1][1]:.4f}")

plt = pyplot()
if plt is not None:
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for name, values in history.items():
        ax_loss.plot([v[0] for v in values], label=name)
        ax_acc.plot([v[1] for v in values], label=name)
    ax_loss.set(xlabel="epoch", ylabel="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy")
    ax_loss.legend()
    fig.savefig("spiral_training_curves.png")
    print("plot saved to spiral_training_curves.png")
