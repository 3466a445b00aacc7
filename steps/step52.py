"""Step 52: running on a GPU with cupy.

cupy mirrors numpy's API on NVIDIA GPUs, so the same Functions run on either:
each picks its array module with `dezero.cuda.get_array_module(x)`.
`model.to_gpu()` moves the parameters and `DataLoader.to_gpu()` makes
batches arrive as cupy arrays; nothing else in the training loop changes.
Without cupy or a CUDA device (`dezero.cuda.gpu_enable` is False) this step
says so and runs the same loop on the CPU. Data as in step 51.
Run: python steps/step52.py
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

train_set = load_mnist(train=True)  # the default transform: 784 float32 values in [0, 1]
train_set.data, train_set.label = train_set.data[:6000], train_set.label[:6000]

np.random.seed(0)
train_loader = DataLoader(train_set, batch_size=100)
model = MLP((100, 10))
optimizer = optimizers.SGD().setup(model)

if dezero.cuda.gpu_enable:
    train_loader.to_gpu()
    model.to_gpu()
    device = "GPU"
else:
    print("GPU: skipped, cupy is not installed or finds no CUDA device; "
          "running the same loop on the CPU")
    device = "CPU"

for epoch in range(2):
    start = time.time()
    sum_loss = 0.0
    for x, t in train_loader:
        y = model(x)
        loss = F.softmax_cross_entropy(y, t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        sum_loss += float(loss.data) * len(t)
    print(f"epoch {epoch + 1} on the {device}: loss {sum_loss / len(train_set):.4f}, "
          f"{time.time() - start:.2f} s")
print("parameters live in:", type(next(iter(model.params())).data).__module__.split(".")[0])
