"""Step 29: Newton's method, with the second derivative written by hand.

Gradient descent uses only the slope. Newton's method fits a parabola with
the first and second derivatives and jumps to its bottom:
x <- x - f'(x) / f''(x). For f(x) = x^4 - 2x^2 from x = 2 it reaches the
minimum x = 1 in about 7 iterations, where gradient descent needs hundreds.
Here backprop gives f' and f'' = 12x^2 - 4 is typed in; step 33 will let
backprop compute f'' too.
Run: python steps/step29.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dezero import Variable


def f(x):
    return x ** 4 - 2 * x ** 2


def gx2(x):
    return 12 * x ** 2 - 4  # f''(x), worked out on paper


x = Variable(np.array(2.0))
for i in range(10):
    print(f"iteration {i}: x = {float(x.data)!r}")
    y = f(x)
    x.cleargrad()
    y.backward()
    x.data -= x.grad.data / gx2(x.data)
