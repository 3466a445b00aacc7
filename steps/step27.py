"""Step 27: sin by its Taylor series, and what its graph looks like.

`F.sin` is one Function whose backward is cos. The same value can be built
from nothing but arithmetic: sin x = sum_i (-1)^i x^(2i+1) / (2i+1)!, summed
until a term drops below a threshold. Backprop differentiates the loop as
well, and the drawn graph shows how large the recorded computation gets
(and that a smaller threshold means more terms, hence a bigger graph).
Run: python steps/step27.py
"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import save_graph

import dezero.functions as F
from dezero import Variable


def my_sin(x, threshold=1e-4):
    """sin(x) by its Taylor series; also returns how many terms were summed."""
    y = 0
    for i in range(100000):
        c = (-1) ** i / math.factorial(2 * i + 1)
        t = c * x ** (2 * i + 1)
        y = y + t
        if abs(t.data) < threshold:
            break
    return y, i + 1


x = Variable(np.array(np.pi / 4), name="x")
y = F.sin(x)
y.backward()
print("F.sin(pi/4)  =", y.data, " grad =", x.grad.data)

# A tinier threshold would be more exact still but draws slowly: dot's layout
# time grows quickly with the number of nodes.
for threshold in (1e-4, 1e-20):
    x = Variable(np.array(np.pi / 4), name="x")
    y, terms = my_sin(x, threshold)
    y.name = "y"
    y.backward()
    print(f"my_sin(pi/4) = {y.data} grad = {x.grad.data} "
          f"(threshold {threshold:g}, {terms} terms)")
    save_graph(y, f"my_sin_threshold_{threshold:g}.png")
