"""Step 64: passes -- dead code, common subexpressions, constant folding.

A static graph is data, so it can be rewritten before it runs. A pass is a
small function from graph to a new graph (the old one stays as it was). Three
classic ones, shown here one at a time on a raw recording (made with the
tracer of dezero.static directly, before `dezero.trace` optimises it):
`dce` drops nodes whose values reach neither the output nor a state write,
`cse` computes the same op on the same inputs once, `fold` computes ops
whose inputs are all constants at trace time. `dezero.trace` runs them (and
an algebraic simplification, renaming and fusion) on every graph it records.
Run: python steps/step64.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
from dezero import Variable
from dezero.core import set_tracer
from dezero.static import cse, dce, fold
from dezero.static.tracer import Tracer


def record(fn, **arrays):
    """The raw StaticGraph of one call of fn on Variables made from `arrays`."""
    tracer = Tracer(fn.__name__)
    args = [tracer.add_input(name, Variable(a, name=name)) for name, a in arrays.items()]
    previous = set_tracer(tracer)
    try:
        y = fn(*args)
    finally:
        set_tracer(previous)
    return tracer.finish(y)


def f(x):
    F.exp(x)                                # computed, never used: dead code
    square = F.sin(x) * F.sin(x)            # sin(x) twice: a common subexpression
    scale = Variable(np.array(2.0, np.float32)) * 3.0   # numbers only: foldable
    return square * scale


def size(graph):
    return f"{len(graph.of_kind('op'))} ops, {len(graph.of_kind('const'))} consts"


x = np.linspace(0, 1, 4, dtype=np.float32)
graph = record(f, x=x)
print(f"recorded ({size(graph)}):\n{graph}")
for name, apply in (("dce", dce), ("cse", cse), ("fold", fold), ("dce again", dce)):
    new = apply(graph)
    print(f"after {name} ({size(graph)} -> {size(new)}):\n{new}")
    graph = new

# Each pass keeps the meaning: the optimised graph computes what f computes.
eager = f(Variable(x)).data
replayed = graph(x).data
print(f"same result as eager: {np.allclose(replayed, eager)}  {replayed}")
