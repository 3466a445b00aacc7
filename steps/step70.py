"""Step 70: when tracing goes wrong -- TraceError, and retraces with their reasons.

A trace records ops, not Python. A Python `if` on a traced value would be
decided once while recording and frozen into the graph, so `float(v)`,
`bool(v)`, `int(v)` and `v.item()` on a traced value raise TraceError naming
the line and the ways out: make the decision a static argument (part of the
signature: each value gets its own graph) or express it with ops (here a
mask). Branching on shapes is fine: they are part of the signature too. A
call whose signature is new -- another batch shape or dtype, another static
value -- or whose structure changed (a layer replaced) records again;
`dezero.static.debug(1)` says why, one line per recording.
Run: python steps/step70.py
"""
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Model

x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)


# 1. A decision on a value: refused at record time, with the line and the fix.
@dezero.trace
def clipped_loss(x):
    loss = F.sum(x * x)
    if float(loss.data) > 10:   # decided by this call's numbers
        loss = loss / 10
    return loss


try:
    clipped_loss(x)
except dezero.TraceError as e:
    print(f"TraceError: {e}")


# 2. The ways out: the decision as ops (a 0/1 mask), or as a static argument.
@dezero.trace
def masked_loss(x):
    loss = F.sum(x * x)
    above = F.sign(F.relu(loss - 10))    # 1 where loss > 10, else 0: computed per call
    return loss * (1 - 0.9 * above)


small = x / 4
print(f"as ops: {float(masked_loss(x).data):.4f} (sum {float(np.sum(x * x)):.4f} > 10), "
      f"replayed on a small x: {float(masked_loss(small).data):.4f} "
      f"(sum {float(np.sum(small * small)):.4f})")


@dezero.trace(static_argnames=("scale",))
def static_loss(x, scale):
    loss = F.sum(x * x)
    return loss / 10 if scale else loss   # scale is a Python bool: part of the signature


print(f"static argument: scale=True {float(static_loss(x, scale=True).data):.4f}, "
      f"scale=False {float(static_loss(x, scale=False).data):.4f}, "
      f"graphs: {static_loss.entries}")


# 3. Retraces, each with its reason (debug output sent to stdout here).
class Net(Model):
    def __init__(self):
        super().__init__()
        self.fc = L.Linear(2)

    def forward(self, x):
        return F.sum(self.fc(x))


np.random.seed(0)
net = Net()


@dezero.trace
def predict(x):
    return net(x)


with contextlib.redirect_stderr(sys.stdout), dezero.static.debug(1):
    predict(x)                 # first call: records
    predict(x)                 # same signature: replays, prints nothing
    predict(x[:2])             # another batch size
    predict(x[:2].astype(np.float64))   # another dtype
    net.fc = L.Linear(5)       # a replaced layer: the old graph would read stale weights
    predict(x)
print(f"graphs kept: {predict.entries}")
