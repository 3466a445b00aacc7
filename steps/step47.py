"""Step 47: softmax and cross entropy, for classification.

For classes the network outputs one score per class. Softmax turns scores
into probabilities (exp, then divide by the row sum), and the cross-entropy
loss is -log of the probability given to the correct class; combined as
`F.softmax_cross_entropy` they are computed stably in one Function. Picking
the correct class's entry uses indexing, `get_item`, which is differentiable
too: its backward puts the gradient back at the picked positions.
Run: python steps/step47.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable
from dezero.models import MLP

# get_item: slicing a Variable, and its gradient.
x = Variable(np.array([[1, 2, 3], [4, 5, 6]]))
y = F.get_item(x, 1)
y.backward()
print("x[1] =", y, " x.grad =", x.grad.data.tolist())
indices = np.array([0, 0, 1])
print("x[[0, 0, 1]] shape:", x[indices].shape, " x[:, 2] =", x[:, 2])

# Scores from a small network, then probabilities and the loss.
np.random.seed(0)
model = MLP((10, 3))
x = np.array([[0.2, -0.4], [0.3, 0.5], [1.3, -3.2], [2.1, 0.3]])
t = np.array([2, 0, 1, 0])
y = model(x)
p = F.softmax(y)
print("scores shape:", y.shape)
print("probabilities sum to 1 per row:", np.allclose(p.data.sum(axis=1), 1.0))

loss = F.softmax_cross_entropy(y, t)
loss.backward()
manual = -np.log(p.data[np.arange(len(t)), t]).mean()
print(f"softmax_cross_entropy = {float(loss.data):.6f}, by hand = {manual:.6f}")
