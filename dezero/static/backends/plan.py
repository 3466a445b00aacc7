"""Plan: what every backend's compiled graph shares.

A backend compiles a Graph into a plan (backends/__init__.py chooses it by name)
from the graph's program (lowering.py): the interpreter walks its steps, the
replay code (pycode.py) prints them. A plan refuses to run inside a trace and says
which captured state is missing.

    plan = graph.compile(); outputs = plan(x, t)   # plan.run((x, t)) takes a sequence
"""
from __future__ import annotations

from dezero import core
from dezero.errors import GraphError, TraceError
from dezero.static.ir import Graph
from dezero.static.lowering import lower

# =============================================================================
# Plan: read_state, refuse_while_recording, run
# =============================================================================


class Plan:
    """A graph compiled by a backend from its program (lowering.py). `plan(*inputs)`
    or `plan.run(inputs)` replays it on arrays or Variables; a subclass supplies
    `run`, which reads the state, runs the steps, stores and returns."""

    def __init__(self, graph: Graph):
        self.graph, self.program = graph, lower(graph)

    def __call__(self, *inputs):
        return self.run(inputs)

    def wait(self, timeout: float | None = None):
        """Return self: a plan runs as compiled at once (see pending.Pending)."""
        return self

    def read_state(self):
        """The arrays of the captured state, in the program's order (with a clear
        error for a slot that is empty now)."""
        slots = [s.node.payload for s in self.program.steps if s.kind == "read"]
        arrays = [slot.read() for slot in slots]
        for slot, array in zip(slots, arrays):
            if array is None:
                raise GraphError(f"graph {self.graph.name} reads the {slot}, which is "
                                 f"None now; it was set when the graph was traced")
        return arrays

    def refuse_while_recording(self):
        if core.current_tracer() is not None:
            raise TraceError(f"graph {self.graph.name} was called while a trace was "
                             f"recording; a replay records nothing\n  fix: call the "
                             f"traced Python function, whose calls a trace records")

    def run(self, leaves):
        raise NotImplementedError(f"{type(self).__name__} must define run(leaves)")
