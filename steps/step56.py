"""Step 56: how a CNN computes (theory).

A convolution slides a filter over the input and, at each position, sums the
elementwise product of the filter and the window under it. With channels,
the input is (C, H, W), a filter (C, KH, KW), and each of OC filters makes
one output channel, plus a bias per channel; a batch adds a leading N. A
pooling layer takes the max (or mean) of each window, with no parameters.
Read: the book's chapter on CNN mechanics; CS231n's notes on convolutional
networks (cs231n.github.io/convolutional-networks). This script computes a
small convolution and a max pooling with plain loops; step 57 does the same
with im2col and one matrix product.
Run: python steps/step56.py
"""
import numpy as np

x = np.array([[1, 2, 3, 0],
              [0, 1, 2, 3],
              [3, 0, 1, 2],
              [2, 3, 0, 1]], dtype=float)
w = np.array([[2, 0, 1],
              [0, 1, 2],
              [1, 0, 2]], dtype=float)
b = 3.0

K = w.shape[0]
OH = OW = x.shape[0] - K + 1  # stride 1, no padding
y = np.empty((OH, OW))
for i in range(OH):
    for j in range(OW):
        y[i, j] = np.sum(x[i:i + K, j:j + K] * w) + b
print("input 4x4, filter 3x3, bias 3 -> output\n", y)

# Channels: 3 input channels, 2 filters -> 2 output channels of 2x2.
rng = np.random.default_rng(0)
xc = rng.standard_normal((3, 4, 4))
wc = rng.standard_normal((2, 3, 3, 3))
yc = np.array([[[np.sum(xc[:, i:i + 3, j:j + 3] * wc[o]) for j in range(2)] for i in range(2)]
               for o in range(2)])
print("(C, H, W) =", xc.shape, " filters (OC, C, KH, KW) =", wc.shape, " output", yc.shape)

# Max pooling 2x2 with stride 2.
pooled = x.reshape(2, 2, 2, 2).max(axis=(1, 3))
print("2x2 max pooling of the input:\n", pooled)
