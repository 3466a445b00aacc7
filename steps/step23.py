"""Step 23: packaging -- the framework becomes the `dezero` package.

From here on the steps import the library instead of defining the framework
in the file. dezero/core_simple.py is the framework of step 22 as a module
(gradients are plain arrays); dezero/core.py, which `from dezero import
Variable` uses, grows it into the full core (gradients are Variables, see
steps 30-32), with the functions in dezero/functions.py. `import dezero`
installs the operators on Variable. This step checks that both compute what
step 22 computed.
Run: python steps/step23.py
"""
import sys
from pathlib import Path

# Run from a checkout without installing: put the repository root first on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
from dezero import Variable, core_simple

print("dezero", dezero.__version__, "imported from", Path(dezero.__file__).parent)

core_simple.setup_variable()  # the small core installs its operators on request
x = core_simple.Variable(np.array(1.0))
y = (x + 3) ** 2
y.backward()
print(f"core_simple: y = {y}  x.grad = {x.grad} ({type(x.grad).__name__})")

x = Variable(np.array(1.0))
y = (x + 3) ** 2
y.backward()
print(f"core:        y = {y}  x.grad = {x.grad} ({type(x.grad).__name__})")  # 2 (x + 3)
