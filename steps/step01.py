"""Step 1: a Variable is a box that holds a numpy array.

This is where the framework starts. `Variable` only stores an ndarray in
`.data`; later steps hang a gradient and links to the computation on it.
Run: python steps/step01.py
"""
import numpy as np


# =============================================================================
# Framework: Variable
# =============================================================================
class Variable:
    def __init__(self, data):
        self.data = data


# =============================================================================
# Demo: put data in the box, replace it, look at array dimensions
# =============================================================================
x = Variable(np.array(1.0))
print("x.data =", x.data)

x.data = np.array(2.0)  # the box can be refilled with new data
print("x.data =", x.data)

# The box accepts arrays of any dimension: scalars, vectors, matrices ...
for arr in (np.array(3.0), np.array([1, 2, 3]), np.array([[1, 2, 3], [4, 5, 6]])):
    print(f"ndim={arr.ndim} shape={arr.shape}")
