"""The reference interpreter of the static IR: one method per node kind.

Every other backend (the generated replay code now, fused kernels later) is tested
against it. It checks each op's result against the type the graph promises and
re-raises any failure with the printed line of the node that failed.

    outputs = Interpreter(graph)(x, t)   # a plan (plan.py), like every backend's
    flat = Interpreter(graph).execute(*input_arrays, *state_arrays)
"""
from __future__ import annotations

from dezero.errors import GraphError
from dezero.op_record import as_result_array
from dezero.static.backends.plan import Plan
from dezero.static.ir import (
    Graph,
    Node,
    format_node,
)

# =============================================================================
# Shared by the backends: reraise
# =============================================================================


def reraise(error: BaseException, node: Node, graph_name: str):
    """Raise `error` again with the node's printed line appended (same type if possible)."""
    message = f"{error}\n  while replaying {graph_name}: {format_node(node)}"
    try:
        new = type(error)(message)
    except Exception:  # an exception type whose constructor wants other arguments
        new = RuntimeError(message)
    raise new from error


# =============================================================================
# Interpreter: input, state, const, op, write, output
# =============================================================================


class Interpreter(Plan):
    """Runs a graph node by node on numpy/cupy arrays.

    `execute(*arrays)` takes the input arrays then the state arrays (graph order)
    and returns the outputs followed by the sources of the state writes; the plan
    around it (plan.py) reads and writes the state.
    """

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.functions = {id(n): n.record.function(n.attrs) for n in graph.nodes
                          if n.kind == "op"}

    def execute(self, *arrays):
        self.env, self.feed, self.written, self.returned = {}, iter(arrays), [], ()
        for node in self.graph.nodes:
            try:
                getattr(self, node.kind)(node)
            except Exception as e:  # noqa: BLE001 - re-raised with the node's line
                reraise(e, node, self.graph.name)
        return tuple(self.returned) + tuple(self.written)

    def input(self, node):
        self.env[node.outputs[0].name] = next(self.feed)

    def state(self, node):
        self.env[node.outputs[0].name] = next(self.feed)

    def const(self, node):
        # A copy per run: what it returns or stores never shares the graph's array.
        self.env[node.outputs[0].name] = node.payload.copy()

    def op(self, node):
        ys = self.functions[id(node)].forward(*(self.env[v.name] for v in node.inputs))
        if not isinstance(ys, tuple):
            ys = (ys,)
        if len(ys) != len(node.outputs):
            raise GraphError(f"{node.op} returned {len(ys)} arrays, the graph expects "
                             f"{len(node.outputs)}")
        for value, y in zip(node.outputs, ys):
            y = as_result_array(y)
            if y.shape != value.shape or y.dtype != value.dtype:
                raise GraphError(f"{node.op} produced {y.dtype}{list(y.shape)} where the "
                                 f"graph says {value.type}")
            self.env[value.name] = y

    def write(self, node):
        if node.attrs["field"] == "attr":  # an attribute write names only its source
            self.written.append(self.env[node.inputs[0].name])
        elif len(node.inputs) > 1:  # a grad write without a source clears the grad
            self.written.append(self.env[node.inputs[1].name])

    def output(self, node):
        self.returned = [self.env[v.name] for v in node.inputs]


compile_graph = Interpreter
