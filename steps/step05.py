"""Step 5: the theory of backpropagation (no new code in the framework).

The chain rule says the derivative of y = C(B(A(x))) is the product of the
local derivatives C'(b) * B'(a) * A'(x). Backpropagation multiplies them
from the output end (starting with dy/dy = 1), so each step multiplies a
gradient by one local derivative -- cheap when there is one output and many
inputs, as with a loss. Read: the chain rule in any calculus text, and the
chapter on backpropagation theory of "Deep Learning from Scratch 3".
This script does the multiplication by hand for the chain of step 3.
Run: python steps/step05.py
"""
import numpy as np

x = 0.5
# Forward pass: keep each intermediate value, backprop needs them.
a = x ** 2          # A = square
b = np.exp(a)       # B = exp
y = b ** 2          # C = square

# Local derivatives at the stored values.
dA = 2 * x          # dA/dx
dB = np.exp(a)      # dB/da
dC = 2 * b          # dC/db

# Backward order: start from dy/dy = 1 and walk towards x.
gy = 1.0
gb = gy * dC        # dy/db
ga = gb * dB        # dy/da
gx = ga * dA        # dy/dx
print("dy/db =", gb)
print("dy/da =", ga)
print("dy/dx (backward) =", gx)

# Forward-mode order gives the same number, but needs one pass per input.
print("dy/dx (forward)  =", dA * dB * dC * gy)

# The central difference of step 4 agrees to about 1e-7.
eps = 1e-4
f = lambda t: np.exp(t ** 2) ** 2
print("dy/dx (numerical)=", (f(x + eps) - f(x - eps)) / (2 * eps))
