"""Step 61: recording a run -- a tracer built from the core's hooks.

From here on the steps go past the book: the same define-by-run code is
recorded once, frozen into a static graph and compiled. The first piece is a
*tracer*: an object the core informs of what it does. `dezero.core.TracerHooks`
declares the events (a Function ran, a Variable was made, `.data` was assigned,
a value was read into Python, backward is about to run a Function) and
`dezero.core.set_tracer` installs one for the current thread. This tracer only
names the values it sees and prints one line per Function call -- the ops that
`backward()` runs included, since they are Function calls too.
Run: python steps/step61.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable
from dezero.core import TracerHooks, set_tracer


class PrintingTracer(TracerHooks):
    """Names the values it meets and prints one line per Function call it is told of."""

    def __init__(self):
        self.names = {}   # id(Variable) -> name: x, W, then t0, t1, ... and k0, k1, ...
        self.keep = []    # the Variables named, kept alive so that their ids stay unique
        self.made = 0     # values made by recorded calls
        self.consts = 0   # values made outside any recorded call (numbers, literals)
        self.calls = 0

    def name_of(self, v, made=False):
        if id(v) not in self.names:
            if v.name:
                name = v.name
            elif made:
                name, self.made = f"t{self.made}", self.made + 1
            else:  # no recorded call made it: a literal such as backward's seed 1
                name, self.consts = f"k{self.consts}", self.consts + 1
                print(f"  {name}: {v.dtype}{list(v.shape)} = const {v.data}")
            self.names[id(v)] = name
            self.keep.append(v)
        return self.names[id(v)]

    def record(self, function, inputs, outputs):
        self.calls += 1
        ins = ", ".join(self.name_of(x) for x in inputs)
        outs = ", ".join(f"{self.name_of(y, made=True)}: {y.dtype}{list(y.shape)}"
                         for y in outputs)
        attrs = f" {function.attrs}" if function.attrs else ""
        print(f"  {outs} = {function.op_name}({ins}){attrs}")

    def backward_step(self, function):
        print(f"  -- backward of {function.op_name}")


def predict(x, W):
    return F.sum(F.tanh(F.matmul(x, W)))


x = Variable(np.arange(6, dtype=np.float32).reshape(2, 3) / 6, name="x")
W = Variable(np.full((3, 2), 0.5, np.float32), name="W")

tracer = PrintingTracer()
previous = set_tracer(tracer)   # from here on the core reports to the tracer
try:
    print("forward:")
    y = predict(x, W)
    print("backward:")
    y.backward()
finally:
    set_tracer(previous)        # and stops here
print(f"the tracer saw {tracer.calls} Function calls; y = {float(y.data):.6f}")
print(f"W.grad computed as usual:\n{W.grad.data}")

# The tracer changed nothing: the same run without it gives the same numbers.
W2 = Variable(W.data.copy())
y2 = predict(x, W2)
y2.backward()
print(f"same result without a tracer: {np.allclose(W2.grad.data, W.grad.data)}")
