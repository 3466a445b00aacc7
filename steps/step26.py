"""Step 26: drawing computational graphs with plot_dot_graph.

`dezero.utils.get_dot_graph(y)` walks the graph behind y from its creator
back to the inputs (as backward does) and writes the DOT text of step 25;
`plot_dot_graph(y, verbose, to_file)` renders it. Naming Variables labels
them in the picture; verbose=True adds shapes and dtypes.
Run: python steps/step26.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import save_graph

from dezero import Variable
from dezero.utils import get_dot_graph


def goldstein(x, y):
    a = 1 + (x + y + 1) ** 2 * (19 - 14 * x + 3 * x ** 2 - 14 * y + 6 * x * y + 3 * y ** 2)
    b = 30 + (2 * x - 3 * y) ** 2 * (18 - 32 * x + 12 * x ** 2 + 48 * y - 36 * x * y + 27 * y ** 2)
    return a * b


x = Variable(np.array(1.0), name="x")
y = Variable(np.array(1.0), name="y")
z = goldstein(x, y)
z.name = "z"

text = get_dot_graph(z, verbose=False)
print("DOT text:", len(text.splitlines()), "lines, starting")
print("\n".join(text.splitlines()[:4]))
print("functions in the graph:", text.count("shape=box"))
save_graph(z, "goldstein.png", verbose=False)
