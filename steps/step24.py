"""Step 24: differentiating the classic optimisation test functions.

With operators on Variable (step 22) a formula in code reads like the formula
on paper, and `backward()` differentiates it whatever its shape. Three test
functions of optimisation: the sphere x^2 + y^2, Matyas, and the deliberately
tangled Goldstein-Price, whose gradient at (1, 1) is (-5376, 8064).
Run: python steps/step24.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dezero import Variable


def sphere(x, y):
    return x ** 2 + y ** 2


def matyas(x, y):
    return 0.26 * (x ** 2 + y ** 2) - 0.48 * x * y


def goldstein(x, y):
    a = 1 + (x + y + 1) ** 2 * (19 - 14 * x + 3 * x ** 2 - 14 * y + 6 * x * y + 3 * y ** 2)
    b = 30 + (2 * x - 3 * y) ** 2 * (18 - 32 * x + 12 * x ** 2 + 48 * y - 36 * x * y + 27 * y ** 2)
    return a * b


for f in (sphere, matyas, goldstein):
    x = Variable(np.array(1.0))
    y = Variable(np.array(1.0))
    z = f(x, y)
    z.backward()
    print(f"{f.__name__:9s} at (1, 1): z = {float(z.data):g}, "
          f"gradient = ({float(x.grad.data):g}, {float(y.grad.data):g})")
