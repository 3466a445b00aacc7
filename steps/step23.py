"""Step 23: packaging -- the framework becomes the `dezero` package.

From here on the steps import the library instead of defining the framework
in the file. Everything steps 1-22 built lives in dezero/core.py (Variable,
Function, Config, backward), the functions in dezero/functions.py, and
`import dezero` installs the operators on Variable. This step checks that
the import works and that the package computes what step 22 computed.
Run: python steps/step23.py
"""
import sys
from pathlib import Path

# Run from a checkout without installing: put the repository root first on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
from dezero import Variable

print("dezero", dezero.__version__, "imported from", Path(dezero.__file__).parent)

x = Variable(np.array(1.0))
y = (x + 3) ** 2
y.backward()
print("y =", y)
print("x.grad =", x.grad)  # 2 (x + 3) = 8
