"""Step 62: the static graph as text -- define-and-run beside define-by-run.

`dezero.trace(fn)` installs a full tracer for the first call of `fn` and turns
what it saw into a StaticGraph: a flat list of typed nodes printed one per
line, like a jaxpr. The nodes are of a few kinds: inputs (the array
arguments), captured state (Variables made before the call and read inside,
here `scale` and `total`, read afresh at every replay), constants (Python
numbers such as the 1.0 below, baked in), ops, state writes (`total <- ...`,
from the assignment to `total.data`) and the output. Define-by-run builds a
new dynamic graph at every call; define-and-run records once and then replays
the same graph on new inputs -- with the same results and the same state.
(The `# kernel` comment groups nodes for fusion: step 66.)
Run: python steps/step62.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable


def make_state():
    scale = Variable(np.array(2.0, np.float32), name="scale")
    total = Variable(np.zeros(3, np.float32), name="total")
    return scale, total


def make_accumulate(scale, total):
    def accumulate(x):
        y = F.tanh(x * scale) + 1.0
        total.data = (total + y).data   # a state update: a write in the graph
        return F.sum(y)
    return accumulate


eager_scale, eager_total = make_state()
eager = make_accumulate(eager_scale, eager_total)          # define-by-run
traced_scale, traced_total = make_state()
traced = dezero.trace(make_accumulate(traced_scale, traced_total))  # define-and-run

rng = np.random.default_rng(0)
same = True
for call in range(4):
    x = rng.standard_normal(3).astype(np.float32)
    if call == 2:   # state is read by reference: a new value is seen by the replay
        eager_scale.data = traced_scale.data = np.array(0.5, np.float32)
    y_eager, y_traced = eager(x), traced(x)
    same = same and np.allclose(y_eager.data, y_traced.data)
    print(f"call {call}: eager {float(y_eager.data):.6f}  traced {float(y_traced.data):.6f}"
          f"  graph {'recorded' if call == 0 else 'replayed'}")
    if call == 0:
        chain, f = [], y_eager.creator
        while f is not None:   # the dynamic graph behind this one result
            chain.append(f.op_name)
            f = f.inputs[0].creator
        print(f"  the eager call built a dynamic graph: {' <- '.join(chain)}")

print(f"same result at every call: {same}")
print(f"same total: {np.allclose(eager_total.data, traced_total.data)} "
      f"{traced_total.data}")
graph = traced.graph
print("\nthe static graph, recorded once:")
print(graph)
counts = {k: len(graph.of_kind(k)) for k in ("input", "state", "const", "op", "write")}
print("nodes by kind: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
