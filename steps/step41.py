"""Step 41: the matrix product.

For y = x W, the gradients are gx = gy W^T and gW = x^T gy: the shapes
(N, D) @ (D, H) -> (N, H) fix which factor is transposed and on which side.
`F.matmul` (and the `@` operator) implement it with matmul itself, so it is
differentiable again.
Run: python steps/step41.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable

rng = np.random.default_rng(0)
x = Variable(rng.standard_normal((2, 3)))
W = Variable(rng.standard_normal((3, 4)))
y = F.matmul(x, W)
y.backward()
print("y shape:", y.shape, " x.grad shape:", x.grad.shape, " W.grad shape:", W.grad.shape)

# The formulas, checked against the arrays backward left behind (gy = ones).
gy = np.ones((2, 4))
print("gx = gy W^T:", np.allclose(x.grad.data, gy @ W.data.T))
print("gW = x^T gy:", np.allclose(W.grad.data, x.data.T @ gy))
print("x @ W equals F.matmul:", np.allclose((x @ W).data, y.data))
