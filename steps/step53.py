"""Step 53: saving and loading the weights.

Training takes time; its result should outlive the process. A Layer
flattens its nested parameters into a dict keyed by path ("l0/W", "l1/b")
and `model.save_weights(path)` writes them with numpy's `savez_compressed`;
`model.load_weights(path)` puts them back into a model of the same shape.
This step trains (on a GPU when there is one), saves, loads into a fresh
model and checks that both predict the same. Data as in step 51.
Run: python steps/step53.py
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from standins import load_mnist

import dezero
import dezero.functions as F
from dezero import DataLoader, optimizers
from dezero.models import MLP

train_set = load_mnist(train=True)
train_set.data, train_set.label = train_set.data[:3000], train_set.label[:3000]

np.random.seed(0)
train_loader = DataLoader(train_set, batch_size=100)
model = MLP((100, 10))
optimizer = optimizers.SGD().setup(model)

if os.path.exists("my_mlp.npz"):
    model.load_weights("my_mlp.npz")  # continue from an earlier run
    print("loaded my_mlp.npz from an earlier run")

if dezero.cuda.gpu_enable:
    train_loader.to_gpu()
    model.to_gpu()
else:
    print("GPU: not used, cupy is not installed or finds no CUDA device")

for epoch in range(2):
    sum_loss = 0.0
    for x, t in train_loader:
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        sum_loss += float(loss.data) * len(t)
    print(f"epoch {epoch + 1}: loss {sum_loss / len(train_set):.4f}")

model.save_weights("my_mlp.npz")  # saved as numpy arrays, wherever the model lives
model.to_cpu()  # to compare with a fresh model on the CPU
with np.load("my_mlp.npz") as saved:
    print("saved my_mlp.npz:", {name: saved[name].shape for name in sorted(saved.files)})

fresh = MLP((100, 10))
fresh.load_weights("my_mlp.npz")
x = np.stack([train_set[i][0] for i in range(10)])
with dezero.no_grad():
    same = np.array_equal(model(x).data, fresh(x).data)
print("fresh model with loaded weights predicts the same:", same)
