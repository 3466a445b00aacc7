"""Step 57: im2col and conv2d.

Loops like step 56's are slow in Python. im2col copies every window the
filter visits into a row of a matrix; the convolution then becomes one
matrix product with the filters laid out as columns, which numpy does
fast. `F.im2col` is a Function (its backward is col2im), so `F.conv2d` built
on it is differentiable. `L.Conv2d` is the layer that owns the filters.
Run: python steps/step57.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
import dezero.layers as L
from dezero import Variable

rng = np.random.default_rng(0)
x1 = rng.random((1, 3, 7, 7))
col1 = F.im2col(x1, kernel_size=5, stride=1, pad=0, to_matrix=True)
print("im2col of (1, 3, 7, 7) with 5x5 windows:", col1.shape)  # 9 windows x (3 * 5 * 5)

x2 = rng.random((10, 3, 7, 7))
col2 = F.im2col(x2, kernel_size=(5, 5), stride=(1, 1), pad=(0, 0), to_matrix=True)
print("im2col of (10, 3, 7, 7) with 5x5 windows:", col2.shape)

N, C, H, W = 1, 5, 15, 15
OC, (KH, KW) = 8, (3, 3)
x = Variable(rng.standard_normal((N, C, H, W)))
weight = rng.standard_normal((OC, C, KH, KW))
y = F.conv2d(x, weight, b=None, stride=1, pad=1)
y.backward()
print("conv2d:", x.shape, "->", y.shape, " x.grad shape:", x.grad.shape)

# The same product as step 56's loops, at one output position.
i, j = 4, 7
padded = np.pad(x.data, ((0, 0), (0, 0), (1, 1), (1, 1)))
by_loop = np.sum(padded[0, :, i:i + KH, j:j + KW] * weight[2])
print("matches a direct sum at one position:", np.isclose(y.data[0, 2, i, j], by_loop))

conv = L.Conv2d(16, kernel_size=3, stride=1, pad=1)
print("L.Conv2d(16, 3): output", conv(x).shape, " weight", conv.W.shape)
