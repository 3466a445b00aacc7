"""Step 33: Newton's method with the second derivative from backprop.

Step 29 typed in f''(x). Now backward(create_graph=True) gives f'(x) as a
graph, and a second backward through it gives f''(x), so Newton's update
x <- x - f'(x) / f''(x) needs nothing but f itself. Same path as step 29:
from x = 2 it reaches 1.0 at the 7th iteration.
Run: python steps/step33.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dezero import Variable


def f(x):
    return x ** 4 - 2 * x ** 2


x = Variable(np.array(2.0))
for i in range(10):
    print(f"iteration {i}: x = {float(x.data)!r}")
    y = f(x)
    x.cleargrad()
    y.backward(create_graph=True)

    gx = x.grad
    x.cleargrad()
    gx.backward()
    gx2 = x.grad

    x.data -= gx.data / gx2.data
