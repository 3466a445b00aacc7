"""The reference interpreter: walks a graph's program (lowering.py) one step at a time.

Every other backend is tested against it. It runs a kernel step's nodes one by one,
checks each op's result against the type the graph promises and re-raises any
failure with the printed line of the step that failed.

    outputs = Interpreter(graph)(x, t)   # a plan (lowering.Plan), like every backend's
    flat = Interpreter(graph).execute([x, t], state_arrays)   # the returned arrays
"""
from __future__ import annotations

from dezero.core import Variable
from dezero.errors import GraphError
from dezero.op_record import as_result_array
from dezero.static.ir import Graph
from dezero.static.lowering import Plan, store
from dezero.static.sizes import evaluate, has_size

# =============================================================================
# Shared by the backends: reraise
# =============================================================================


def reraise(error: BaseException, line: str, graph_name: str):
    """Raise `error` again with the step's printed line appended (same type if possible)."""
    message = f"{error}\n  while replaying {graph_name}: {line}"
    try:
        new = type(error)(message)
    except Exception:  # an exception type whose constructor wants other arguments
        new = RuntimeError(message)
    raise new from error


# =============================================================================
# Interpreter: read, node, kernel, store, free, return
# =============================================================================


class Interpreter(Plan):
    """Runs a graph's program on numpy/cupy arrays, one method per step kind."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.functions = {id(n): n.record.function(n.attrs) for n in graph.nodes
                          if n.kind == "op"}
        self.sized = {id(n) for n in graph.nodes if n.kind == "op" and has_size(n.attrs)}
        self.methods = {"read": self.read, "node": self.node, "store": self.store,
                        "free": self.free, "return": self.returns}

    def run(self, leaves):
        self.refuse_while_recording()
        return self.program.outputs(self.execute(leaves), leaves)

    def execute(self, leaves, state=None) -> list:
        """The arrays the program returns, run on `leaves` (arrays or Variables) and
        `state` (the arrays to read, the captured state's now if None)."""
        self.sizes = self.sizes_of(leaves)
        self.leaves = dict(zip(self.graph.input_names, leaves))
        self.env = {n.outputs[0].name: n.payload for n in self.graph.of_kind("const")}
        self.env.update((name, x._data if isinstance(x, Variable) else x)
                        for name, x in self.leaves.items())
        self.feed, self.returned = iter(self.read_state() if state is None else state), []
        self.walk(self.program.steps)
        return self.returned

    def walk(self, steps):
        for step in steps:
            if step.kind == "kernel":  # the reference runs a group's nodes one by one
                self.walk(step.body)
                continue
            try:
                self.methods[step.kind](step)
            except Exception as e:  # noqa: BLE001 - re-raised with the step's line
                reraise(e, str(step), self.graph.name)

    def read(self, step):
        self.env[step.node.outputs[0].name] = next(self.feed)

    def node(self, step):
        node = step.node
        function = self.functions[id(node)]
        if self.sizes and id(node) in self.sized:  # attrs of symbolic sizes, this call's
            function = node.record.function(evaluate(node.attrs, self.sizes))
        ys = function.forward(*(self.env[v.name] for v in node.inputs))
        if not isinstance(ys, tuple):
            ys = (ys,)
        if len(ys) != len(node.outputs):
            raise GraphError(f"{node.op} returned {len(ys)} arrays, the graph expects "
                             f"{len(node.outputs)}")
        for value, y in zip(node.outputs, ys):
            y = as_result_array(y)
            if y.shape != evaluate(value.shape, self.sizes) or y.dtype != value.dtype:
                raise GraphError(f"{node.op} produced {y.dtype}{list(y.shape)} where the "
                                 f"graph says {value.type}" + (f" (with {self.sizes})"
                                                               if self.sizes else ""))
            self.env[value.name] = y

    def value(self, name: str, copies):
        return self.env[name].copy() if name in copies else self.env[name]

    def store(self, step):
        source = step.source
        store(step, None if source is None else self.value(source, step.copies), self.leaves)

    def free(self, step):
        for name in step.names:
            del self.env[name]

    def returns(self, step):
        self.returned = [self.value(name, step.copies) for name in step.names]


compile_graph = Interpreter
