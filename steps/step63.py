"""Step 63: replay -- the static graph as generated Python code, and why it is faster.

A recorded graph is lowered into a program (read the captured state, run each
node, store each new .grad, free, return: `graph.program` prints it) and that
program is turned into the source of a plain Python function, one line per
step, compiled once with `exec`: `graph.compile("python")` returns a plan whose
`.source` is that code (`_s_W1` is the Variable W1). Simple ops are spelled inline
(`a = x @ W`, `c = a + b`); the others call their Function's `forward` on
arrays. `del` frees each array after its last reader, as eager code does
when a Variable goes away. What a replay leaves out is everything that makes
an eager call slow in Python: making Variables and Function objects, linking
them into a dynamic graph, sorting and walking it for backward. For small
arrays that overhead is most of the time, so replaying the same
loss-and-gradient function is a few times faster. (The default backend on the
CPU writes the same code with a fused group as one call of a compiled kernel
wherever that was measured faster: `graph.code` shows it, steps 66-67 explain it.)
Run: python steps/step63.py
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable

rng = np.random.default_rng(0)
W1 = Variable(rng.standard_normal((2, 10)).astype(np.float32) * 0.5, name="W1")
b1 = Variable(np.zeros(10, np.float32), name="b1")
W2 = Variable(rng.standard_normal((10, 3)).astype(np.float32) * 0.5, name="W2")
b2 = Variable(np.zeros(3, np.float32), name="b2")


def loss_and_grads(x, t):
    h = F.sigmoid(F.linear(x, W1, b1))
    loss = F.softmax_cross_entropy(F.linear(h, W2, b2), t)
    for p in (W1, b1, W2, b2):
        p.cleargrad()
    loss.backward()
    return loss


traced = dezero.trace(loss_and_grads)
x = rng.standard_normal((30, 2)).astype(np.float32)
t = rng.integers(0, 3, 30)
traced(x, t)   # records
replay = traced.graph.compile("python")   # a plan: replay(x, t) runs this code
print(replay.source)


def per_call(fn, calls=300):
    fn(x, t)
    start = time.perf_counter()
    for _ in range(calls):
        fn(x, t)
    return (time.perf_counter() - start) / calls


eager_s = per_call(loss_and_grads)
eager_grad = W1.grad.data.copy()
replay_s = per_call(replay)
print(f"same gradient: {np.allclose(W1.grad.data, eager_grad, atol=1e-6)}")
print(f"eager:                {eager_s * 1e6:7.1f} us per call")
print(f"replay (python code): {replay_s * 1e6:7.1f} us per call")
print(f"replay is {eager_s / replay_s:.1f}x as fast")
