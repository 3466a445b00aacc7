"""Step 54: dropout, and switching between training and test mode.

Dropout fights overfitting: in training each unit is zeroed with probability
dropout_ratio, so the network cannot rely on any single one. dezero uses
"inverted" dropout: the surviving units are scaled by 1 / (1 - ratio) while
training, so at test time `F.dropout` passes its input through unchanged.
`Config.train` says which mode applies; `with dezero.test_mode():` sets it
to False for a block.
Run: python steps/step54.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F

np.random.seed(0)  # the dropout mask is drawn from numpy's global RNG
x = np.ones(10)
y = F.dropout(x, dropout_ratio=0.5)
print("train mode:", y.data)
print("kept units scaled to", 1 / (1 - 0.5), "; zeroed:", int((y.data == 0).sum()), "of", x.size)

with dezero.test_mode():
    y = F.dropout(x, dropout_ratio=0.5)
    print("test mode: ", y.data, " Config.train =", dezero.Config.train)
print("after the block Config.train =", dezero.Config.train)

# On average dropout preserves the expected value, which is why test mode can skip it.
big = np.ones(100000)
print(f"mean over 100000 units in train mode: {float(F.dropout(big).data.mean()):.3f}")
