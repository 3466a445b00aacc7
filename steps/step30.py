"""Step 30: higher-order derivatives, preparation -- what backward computes with (theory).

To differentiate a derivative, the derivative must itself be a graph. So look
at what the framework keeps: a Function holds its `inputs` (strongly) and
`outputs` (weakly) and a `generation`; a Variable holds `data`, `grad` and
its `creator`. In steps 1-22 `grad` was a bare ndarray and `backward`
computed with arrays, leaving no trace. In dezero `grad` is a Variable and
every backward is written with Functions, so the gradient computation can be
recorded like any other (steps 31-33).
Read: the book's chapters on higher-order derivatives, and dezero/core.py.
Run: python steps/step30.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable

x = Variable(np.array(1.0), name="x")
y = F.sin(x)

f = y.creator
print("y.creator:", type(f).__name__, " generation:", f.generation)
print("f.inputs[0] is x:", f.inputs[0] is x)
print("f.outputs[0] is a weak reference:", type(f.outputs[0]).__name__,
      " -> y:", f.outputs[0]() is y)

y.backward()
print("x.grad:", repr(x.grad), " type:", type(x.grad).__name__)
# Without create_graph the gradient was computed with the graph switched off:
print("x.grad.creator:", x.grad.creator)
