"""Step 31: higher-order derivatives, theory -- backward as a graph.

If a Function's backward is written with Functions (Sin's backward is
`gy * cos(x)`, a Cos and a Mul), then running backward with graph building
on records a new graph: the one that computes the gradient. Its output
`x.grad` then has a creator, and backprop through *that* graph gives the
second derivative. `backward(create_graph=True)` turns the recording on;
it is off by default because first derivatives are what training needs.
Read: the book's chapter on the theory of higher-order derivatives.
Run: python steps/step31.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import save_graph

import dezero.functions as F
from dezero import Variable

x = Variable(np.array(1.0), name="x")
y = F.sin(x)
y.backward(create_graph=True)

gx = x.grad
gx.name = "gx"
# Walk the creators from gx: the functions that computed the gradient.
names, funcs = [], [gx.creator]
while funcs:
    f = funcs.pop()
    names.append(type(f).__name__)
    funcs.extend(v.creator for v in f.inputs if v.creator is not None)
print(f"gx = {gx.data} (cos 1 = {np.cos(1.0)})")
print("functions recorded by backward:", ", ".join(names))
save_graph(gx, "sin_backward_graph.png")
