"""Step 35: the graphs of higher derivatives of tanh.

tanh' = 1 - tanh^2 is written with Functions, so derivatives of any order
follow by looping backward(create_graph=True) as in step 34. Drawing the
graph of the n-th derivative shows how fast these graphs grow: every order
differentiates the whole previous graph.
Run: python steps/step35.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import save_graph

import dezero.functions as F
from dezero import Variable
from dezero.utils import get_dot_graph

t = np.tanh(1.0)
exact = [1 - t ** 2, -2 * t * (1 - t ** 2), -2 * (1 - t ** 2) * (1 - 3 * t ** 2)]

x = Variable(np.array(1.0), name="x")
y = F.tanh(x)
for order in range(1, 4):
    x.cleargrad()
    y.backward(create_graph=True)
    y = x.grad
    y.name = f"gx{order}"
    nodes = get_dot_graph(y, verbose=False).count("label=")
    print(f"order {order}: {float(y.data): .6f} (exact {exact[order - 1]: .6f}), "
          f"{nodes} nodes in its graph")
    save_graph(y, f"tanh_order{order}.png")
