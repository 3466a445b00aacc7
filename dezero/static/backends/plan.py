"""Plan: what every backend does around running a graph's nodes.

A backend compiles a Graph into a plan (backends/__init__.py chooses it by
name). Every plan reads the captured state, runs the nodes on arrays, applies the
state writes and rebuilds what the traced function returned. `Plan` does these
steps in plain Python around `execute`; the replay code (pycode.py) generates its
own faster version of the same steps.

    plan = Plan(graph); outputs = plan(x, t)   # plan.run((x, t)) takes a sequence
"""
from __future__ import annotations

from dezero import core
from dezero.core import Config, Variable, _wrap_output
from dezero.errors import GraphError, TraceError
from dezero.static.ir import Graph

# =============================================================================
# Outputs of a replay: ReplayedOutput, replayed_output
# =============================================================================


class ReplayedOutput:
    """The creator of a Variable a replay returns: the replay built no dynamic graph,
    so a gradient cannot flow back through it, and saying so beats a silent None.
    Not a Function: it is no op of any graph, so it stays out of the op registry."""

    generation, inputs, outputs = 0, [], []

    def backward(self, *gys):
        raise TraceError(
            "backward() reached a value returned by a replayed traced function; a replay "
            "records no graph, so no gradient can flow into it (eager code would have "
            "filled the parameters' .grad)\n  fix: call backward() inside the traced "
            "function, or call it under dezero.no_grad() if no gradient is needed")


# One creator serves every replayed output: it has no inputs, keeps no outputs
# and its backward only raises, so nothing in it belongs to one replay.
_REPLAYED = ReplayedOutput()


def replayed_output(array):
    """A Variable for a replayed output; under enable_backprop it gets ReplayedOutput
    as its creator, so that backward() through it fails loudly."""
    y = _wrap_output(array)
    if Config.enable_backprop:
        y.creator, y.generation = _REPLAYED, 1
    return y


def owned_values(graph: Graph) -> set:
    """Names of the values whose arrays belong to someone else: inputs (the caller's),
    captured state and constants (one array for every replay). A replay stores a copy
    of these as state or as a gradient (after x * 1 = x, W.grad <- x), so that the
    caller refilling an input buffer, or an update of W, changes no other state."""
    return {n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state", "const")}


def shared_values(graph: Graph) -> set:
    """owned_values and the sources of state writes: a replay returns a copy of
    these, so that writing into a returned array changes nothing else and no later
    result, as with eager code's fresh results; every other output is fresh already."""
    return owned_values(graph) | {v.name for v in write_sources(graph)}


def write_sources(graph: Graph) -> list:
    """The values the graph's writes store, in the order a plan's execute returns
    them after the outputs (a write that clears a .grad stores none)."""
    return [n.inputs[0] if n.attrs["field"] == "attr" else n.inputs[1]
            for n in graph.of_kind("write") if n.attrs["field"] == "attr" or len(n.inputs) > 1]


def build_outputs(tree, flat):
    """The structure the traced function returned (see saving.py for out_tree),
    rebuilt around the flat output arrays."""
    kind = tree[0]
    if kind == "var":
        return replayed_output(flat[tree[1]])
    if kind == "array":
        return flat[tree[1]]
    if kind in ("tuple", "list"):
        items = [build_outputs(t, flat) for t in tree[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {key: build_outputs(t, flat) for key, t in tree[1]}
    return tree[1]  # "static": a Python value returned as is


# =============================================================================
# Plan: run = read state, execute, write state, build outputs
# =============================================================================


class Plan:
    """A graph compiled by a backend. `plan(*inputs)` or `plan.run(inputs)` replays it
    on arrays or Variables; a subclass supplies `execute(*arrays)`, which takes the
    input then the state arrays and returns the outputs then the write sources."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.reads = [n.payload for n in graph.nodes if n.kind == "state"]
        shared, owned, k = shared_values(graph), owned_values(graph), len(graph.output_values)
        self.copied = [i for i, v in enumerate(graph.output_values) if v.name in shared] + \
            [k + i for i, v in enumerate(write_sources(graph)) if v.name in owned]

    def __call__(self, *inputs):
        return self.run(inputs)

    def wait(self, timeout: float | None = None):
        """Return self: a plan runs as compiled at once (see pending.Pending)."""
        return self

    def read_state(self):
        """The arrays of the captured state, in graph order (with a clear error for a
        slot that is empty now)."""
        arrays = [slot.read() for slot in self.reads]
        for slot, array in zip(self.reads, arrays):
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
        self.refuse_while_recording()
        arrays = [x._data if isinstance(x, Variable) else x for x in leaves]
        flat = list(self.execute(*arrays, *self.read_state()))
        for i in self.copied:
            flat[i] = flat[i].copy()
        targets = {n.outputs[0].name: getattr(n.payload, "var", None)
                   for n in self.graph.of_kind("state")}
        targets.update(zip(self.graph.input_names, leaves))
        k = len(self.graph.output_values)
        for node in self.graph.of_kind("write"):
            has_source = len(node.inputs) > 1 or node.attrs["field"] == "attr"
            write(node, flat[k] if has_source else None, targets)
            k += has_source
        return build_outputs(self.graph.out_tree, flat)

    def execute(self, *arrays):
        raise NotImplementedError(f"{type(self).__name__} must define execute(*arrays)")


def write(node, value, targets: dict):
    """Apply one write node: `value` (an array, or None to clear a .grad) into the
    object `targets` maps its target's name to (a state Variable, or an argument:
    a .grad write to an input reaches only a Variable argument)."""
    field = node.attrs["field"]
    if field == "attr":
        if node.payload is not None:  # a loaded graph has no object to set
            node.payload.write(value)
        return
    target = targets[node.inputs[0].name]
    if isinstance(target, Variable) and node.attrs.get("in_place"):
        target._data[...] = value  # as the traced code did: sharers of the array see it
    elif isinstance(target, Variable):
        setattr(target, field, value if value is None or field == "data"
                else _wrap_output(value))
