"""Lowering: an optimised graph as a program, the one list of steps every backend runs.

lowering.py sits after the passes (fusion last) and before the backends: lower(graph)
walks the node list once and writes down what a replay does, in order:

    read     bind a captured state's array (all reads come first)
    node     run one op node
    kernel   run a fused group: its compiled kernel (the group's spec, where the
             group's `compiled` says so and the backend has kernels), else its body,
             the group's node steps
    store    put a value into .data or .grad of captured state, .grad of an argument
             or an attribute, right after the value is made (in-place writes last)
    free     drop values that no later step reads, as eager code drops them
    return   the returned values (copies where someone else holds the array)

The interpreter walks the steps, the python backend prints them as source, and the
cpu and cupy backends print them too, with a kernel call for each compiled group.
Each backend's compiled graph is a Plan (below), which holds the program: it reads
the captured state and refuses to run inside a trace.

    print(graph.program)   # or lower(graph)
    plan = graph.compile(); outputs = plan(x, t)   # plan.run((x, t)) takes a sequence
"""
from __future__ import annotations

import math
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field

from dezero import cuda
from dezero.core import Config, TracedArray, Variable, _wrap_output, current_tracer
from dezero.errors import GraphError, TraceError
from dezero.static import horizontal
from dezero.static.ir import Graph, Group, Node, format_node, stored, type_str
from dezero.static.sizes import bind, broken, has_size
from dezero.static.slots import AttrSlot

# =============================================================================
# Steps and programs: Step, Program
# =============================================================================

STEP_KINDS = ("read", "node", "kernel", "store", "free", "return")


@dataclass(eq=False)
class Step:
    """One step of a program.

    kind    one of STEP_KINDS
    node    read: the state node; node: the op node; store: the write node
    group   kernel: the fused group (its spec, inputs, outputs, compiled decision)
    body    kernel: node and free steps that run the group's nodes one by one
    names   free: the values dropped; kernel: its inputs that die with it (its body
            frees them after their last reader); return: the values returned
    into    kernel: per output of the group, the input whose array a compiled
            kernel may write it into, or None for a new array (see _into)
    copies  store, return: the names stored or returned as copies (arrays that the
            caller, captured state or the graph's constants hold)
    target  store: "state", "input" (the .grad of an argument) or "attr"
    slot    store: the slot of the state (or the attribute) it writes
    """

    kind: str
    node: Node | None = None
    group: Group | None = None
    body: list = field(default_factory=list)
    names: tuple = ()
    into: tuple = ()
    copies: frozenset = frozenset()
    target: str = ""
    slot: object = None

    @property
    def source(self) -> str | None:
        """store: the name of the value stored (None: the store clears a .grad)."""
        value = stored(self.node)
        return None if value is None else value.name

    def __str__(self):
        if self.kind in ("read", "node"):
            return format_node(self.node)
        if self.kind == "kernel":
            g = self.group
            return (", ".join(f"{v.name}: {v.type}" for v in g.outputs) + f" = {g.name}("
                    + ", ".join(v.name for v in g.inputs) + f")  # {len(g.nodes)} ops, "
                    + (g.decision.split(":")[0] or "compiled"))  # how it runs, or will
        if self.kind == "store":
            return "store " + format_node(self.node) + (" (a copy)" if self.copies else "")
        names = ", ".join(f"{n} (a copy)" if n in self.copies else n for n in self.names)
        return f"{self.kind} {names}"


@dataclass(eq=False)
class Program:
    """The steps of one replay of `graph`, made once by lower(graph) for each plan."""

    graph: Graph
    steps: list

    def outputs(self, flat, leaves=()):
        """The structure the traced function returned, around the arrays returned
        (and the arguments it returned as they were: `leaves`, by position)."""
        return build_outputs(self.graph.out_tree, flat, leaves)

    def __str__(self):
        inputs = ", ".join(repr(v) for v in self.graph.input_values)
        lines = [f"program {self.graph.name}({inputs})"]
        for step in self.steps:
            lines.append(f"  {step}")
            lines += [f"    {inner}" for inner in step.body]
        return "\n".join(lines)


# =============================================================================
# Lowering: lower
# =============================================================================


def lower(graph: Graph) -> Program:
    """The program of `graph`: its steps in the order a replay runs them."""
    owned = [n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state", "const")]
    stores = _stores(graph, set(owned))
    # Stores of arguments, state or constants wait until every state is read: a state
    # stored before another reads it would hand that read the new array.
    steps = [Step("read", n) for n in graph.of_kind("state")]
    steps += [s for name in owned for s in stores.pop(name, ())]
    starts = {id(g.nodes[0]): g for g in graph.groups}
    inside = {id(n) for g in graph.groups for n in g.nodes}
    reads = Counter(id(v) for n in graph.nodes for v in n.inputs)
    producer = {id(v): n for n in graph.nodes for v in n.outputs}
    renews, at = _renewals(graph, stores), {id(n): i for i, n in enumerate(graph.of_kind("op"))}
    for node in graph.of_kind("op"):
        group = starts.get(id(node))
        if group is None and id(node) in inside:
            continue
        steps.append(Step("node", node) if group is None else
                     Step("kernel", group=group, body=[Step("node", n) for n in group.nodes],
                          into=_into(group, reads, producer, renews,
                                     at[id(group.nodes[-1])])))
        steps += [s for v in (group or node).outputs for s in stores.pop(v.name, ())]
    steps += stores.pop(None, [])  # in place: after every reader of the old array
    if stores:
        raise GraphError(f"graph {graph.name}: writes of values no step makes: "
                         f"{', '.join(map(str, stores))}")
    shared = set(owned) | {s.source for s in steps if s.kind == "store"}
    returned = [v.name for v in graph.output_values]
    steps.append(Step("return", names=tuple(returned),
                      copies=frozenset(n for n in returned if n in shared)))
    return Program(graph, _with_frees(graph, steps))


def _into(group: Group, reads: Counter, producer: dict, renews: dict, end: int) -> tuple:
    """For each output of a group, the input whose array its kernel may write it
    into, or None: an input of the group's shape and the output's dtype that only the
    group's nodes read, either made by an op whose array is its own
    (record.fresh_result: x @ W) or the array of a state that the output replaces
    where no op node after the group's last (at place `end`; a group's nodes are
    consecutive, ir.check) reads the old value (_renewals). The epilogue of a matmul
    (bias add, activation) then runs in place, as numpy's `h += b` does, and so does
    an activation's mask times its gradient; an optimizer's update writes over the
    old parameter and moments where nobody else holds them (the kernel backends check
    at every call, so that an array someone kept keeps its values, as in eager code).
    None for a horizontal or a reduction group (values of other shapes)."""
    if group.segments or group.axes is not None:
        return (None,) * len(group.outputs)
    inside = Counter(id(v) for n in group.nodes for v in n.inputs)
    free = [v for v in group.inputs if v.shape == tuple(group.shape) and
            reads[id(v)] == inside[id(v)] and producer[id(v)].kind == "op" and
            producer[id(v)].record.fresh_result]
    into = []
    for out in group.outputs:
        old, read_at = renews.get(out.name, (None, ()))
        mine = old in group.inputs and old.type == out.type and max(read_at) <= end
        into.append(old if mine else next((v for v in free if v.dtype == out.dtype), None))
        free = [v for v in free if v is not into[-1]]
    return tuple(into)


def _renewals(graph: Graph, stores: dict) -> dict:
    """Value stored as a state's new .data -> (the state's old value, the places of
    the op nodes that read it; past the last for one returned or copied into another
    state's array, which the in-place stores do after every op). Only for states
    larger than a horizontal kernel's segments: a smaller one's new array, a buffer
    of the kernel backend's pool, costs less than the checks of writing over it."""
    ops, late = graph.of_kind("op"), [stored(s.node) for s in stores.get(None, ())]
    read_at = defaultdict(list, {id(v): [len(ops)] for v in graph.output_values + late})
    for i, v in ((i, v) for i, node in enumerate(ops) for v in node.inputs):
        read_at[id(v)].append(i)
    return {s.source: (s.node.inputs[0], read_at[id(s.node.inputs[0])])
            for each in stores.values() for s in each if s.target == "state" and
            s.node.attrs["field"] == "data" and not s.node.attrs.get("in_place")
            and math.prod(s.node.inputs[0].shape) > horizontal.MAX_SEGMENT}


def _stores(graph: Graph, owned: set) -> dict:
    """name of the value a store waits for -> its store steps: the source (a clear
    waits for its target; an in-place write, for every reader: key None)."""
    slots = {n.outputs[0].name: n.payload for n in graph.of_kind("state")}
    stores: dict = {}
    for node in graph.of_kind("write"):
        kind = node.attrs["field"]
        if kind == "attr" and node.payload is None:
            continue  # a loaded graph has no object to set
        target = "attr" if kind == "attr" else "state" if node.inputs[0].name in slots else "input"
        step = Step("store", node, target=target, slot=node.payload if kind == "attr" else
                    slots.get(node.inputs[0].name))
        source = step.source
        step.copies = frozenset([source]) if source in owned else frozenset()
        key = None if node.attrs.get("in_place") else source or node.inputs[0].name
        stores.setdefault(key, []).append(step)
    return stores


def _with_frees(graph: Graph, steps: list) -> list:
    """`steps` with a free step after each value's last reader (after the stores that
    follow that reader), and in each kernel's body after its nodes' last readers.

    A value lives from the step that makes it to its last reader, as in eager code,
    instead of until the replay returns (large intermediates would pile up and their
    memory be mapped afresh at every call). A state array that gets a new .data dies
    after its last reader too, so that once the new value is stored the old one is
    freed. Returned values live on, as do stored values that no later node reads;
    arguments (the caller's), state that is not replaced and constants are never
    dropped.
    """
    replaced = {n.inputs[0].name for n in graph.of_kind("write") if n.attrs["field"] == "data"}
    last = {}  # name -> the read or node step that reads it last (or None: kept)
    for s in (inner for step in steps for inner in step.body or [step]):
        if s.kind == "read" and s.node.outputs[0].name in replaced:
            last[s.node.outputs[0].name] = s
        elif s.kind == "node":
            last.update((v.name, s) for v in s.node.inputs if v.name in last)
            last.update((v.name, s) for v in s.node.outputs)  # unread: dies at once
        elif s.kind == "store" and s.source in last:
            last[s.source] = None  # stored: dies only where a later node reads it last
        elif s.kind == "return":
            last.update((name, None) for name in s.names)
    dying = defaultdict(list)  # id(step) -> the values that die after it (kept: id(None))
    for name, s in last.items():
        dying[id(s)].append(name)
    out, dead = [], []
    for step in steps:
        if step.kind != "store" and dead:
            out.append(Step("free", names=tuple(dead)))
            dead = []
        out.append(step)
        if step.kind == "kernel":
            body, step.body = step.body, []
            for inner in body:
                step.body.append(inner)
                if id(inner) in dying:
                    step.body.append(Step("free", names=tuple(dying[id(inner)])))
            inputs = {v.name for v in step.group.inputs}
            step.names = tuple(n for inner in step.body if inner.kind == "free"
                               for n in inner.names if n in inputs)
        dead += dying.get(id(step), [])
    return out


# =============================================================================
# Plan: what every backend's compiled graph shares (read_state, refuse_while_recording)
# =============================================================================


class Plan:
    """A graph compiled by a backend from its program. `plan(*inputs)` or
    `plan.run(inputs)` replays it on arrays or Variables; a subclass supplies `run`,
    which reads the state, runs the steps, stores and returns."""

    def __init__(self, graph: Graph):
        self.graph, self.program = graph, lower(graph)
        self.symbolic = any(has_size(v.shape) for v in graph.input_values)
        self._patterns = [v.shape for v in graph.input_values]  # what sizes_of binds

    def __call__(self, *inputs, **named):
        if named:  # by name, as the graph takes them
            inputs = self.graph.arguments(*inputs, **named)
        names = self.graph.input_names
        if len(inputs) != len(names):  # a replay function would say less, or nothing
            raise TypeError(
                f"graph {self.graph.name} takes {len(names)} inputs ({', '.join(names)}), "
                f"got {len(inputs)}; arguments that were not arrays when it was traced "
                f"(numbers, np.int64 scalars) are fixed in the graph, not inputs")
        for value, x in zip(self.graph.input_values, inputs):
            data = x._data if isinstance(x, Variable) else x
            if not isinstance(data, TracedArray):  # inside a trace: run() says why it refuses
                check_input(self.graph.name, value, data)
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

    def sizes_of(self, leaves) -> dict:
        """The symbolic sizes of this call, read from the inputs' shapes ({} where the
        graph has none); a call that breaks a relation the graph relies on raises."""
        if not self.symbolic:
            return {}
        shapes = [getattr(getattr(x, "_data", x), "shape", ()) for x in leaves]
        bindings, why = bind(self._patterns, shapes,
                             [f"input {name}" for name in self.graph.input_names])
        relation = None if why else broken(self.graph.relations, bindings)
        if why or relation:
            why = why or f"sizes {bindings} break {relation}, which the recording relied on"
            takes = ", ".join(f"{v.name}: {v.type}" for v in self.graph.input_values)
            where = ", ".join(map(str, self.graph.relations))
            raise TypeError(f"graph {self.graph.name}: {why}; it takes {takes}"
                            f"{' where ' + where if where else ''}\n  fix: give it sizes "
                            f"that keep these, or call the traced function (not its "
                            f"graph), which records again for new sizes")
        return bindings

    def refuse_while_recording(self):
        if current_tracer() is not None:
            raise TraceError(f"graph {self.graph.name} was called while a trace was "
                             f"recording; a replay records nothing\n  fix: call the "
                             f"traced Python function, whose calls a trace records")

    def run(self, leaves):
        raise NotImplementedError(f"{type(self).__name__} must define run(leaves)")

    def replay(self, leaves):
        """run(leaves) for a caller that has checked the call's sizes against the
        graph's (a traced function, before it picks the graph): a backend may skip
        checking them again."""
        return self.run(leaves)


def check_input(name, value, data):
    """Refuse, naming the input, an argument that is no array of the input's dtype,
    rank and fixed sizes (symbolic ones: Plan.sizes_of)."""
    if not isinstance(data, cuda.array_types) or data.dtype != value.dtype or \
            len(data.shape) != len(value.shape) or any(
                type(n) is int and n != m for n, m in zip(value.shape, data.shape)):
        got = type_str(data.shape, data.dtype) if isinstance(
            data, cuda.array_types) else type(data).__name__
        raise TypeError(f"graph {name}: input {value.name} must be {value.type}, got "
                        f"{got}; give an array of that dtype and shape (a traced function, "
                        f"not its graph, records again for others)")


# =============================================================================
# Running steps: store, holder
# =============================================================================


def holder(slot):
    """The object a state's slot reads through: the Variable, or the attribute's holder."""
    return slot.holder if isinstance(slot, AttrSlot) else slot.var


def store(step: Step, value, leaves: dict) -> None:
    """Apply a store step: `value` (an array, or None to clear a .grad) into its
    target; leaves maps argument names to what the caller passed (a .grad reaches
    only a Variable argument). The python backend prints the same as code."""
    node, kind = step.node, step.node.attrs["field"]
    if step.target == "attr":
        setattr(step.slot.holder, step.slot.name, _wrap_output(value))
        return
    target = leaves[node.inputs[0].name] if step.target == "input" else holder(step.slot)
    if not isinstance(target, Variable):
        return
    if node.attrs.get("in_place"):
        target._data[...] = value  # as the traced code did: sharers of the array see it
    elif kind == "data":
        target.data = value
    else:
        target.grad = None if value is None else _wrap_output(value)


# =============================================================================
# Outputs of a replay: ReplayedOutput, replayed_output, build_outputs
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


def build_outputs(tree, flat, leaves=()):
    """The structure the traced function returned (see saving.py for out_tree),
    rebuilt around the flat output arrays and the arguments `leaves`."""
    kind, inner = tree[0], lambda t: build_outputs(t, flat, leaves)
    if kind == "var":
        return replayed_output(flat[tree[1]])
    if kind == "array":
        return flat[tree[1]]
    if kind == "input":
        return leaves[tree[1]]
    if kind == "dict":
        return rebuilt(kind, tree[2:], {key: inner(t) for key, t in tree[1]})
    if kind in ("tuple", "list"):
        return rebuilt(kind, tree[2:], [inner(t) for t in tree[1]])
    return tree[1]  # "static": a Python value returned as is


def returned_arguments(tree) -> list:
    """The positions of the arguments an output tree returns as they were passed."""
    if tree[0] in ("tuple", "list", "dict"):
        return [i for t in tree[1] for i in returned_arguments(t[1] if tree[0] == "dict" else t)]
    return [tree[1]] if tree[0] == "input" else []


def container(obj):
    """(kind, extra) of a container whose items trace: a tuple, list or dict (its
    name, []), a namedtuple or OrderedDict (kind, [its type]), a defaultdict ("dict",
    [defaultdict, its factory]); None for anything else, other subclasses of these
    too: their constructors say nothing of how to rebuild them."""
    cls = type(obj)
    if cls in (tuple, list, dict):
        return cls.__name__, []
    if cls in (OrderedDict, defaultdict):
        return "dict", [cls] + ([obj.default_factory] if cls is defaultdict else [])
    return ("tuple", [cls]) if issubclass(cls, tuple) and hasattr(cls, "_fields") else None


def rebuilt(kind, extra, items):
    """The container container() described as (kind, extra) around items, a list
    (a dict for kind "dict")."""
    if kind == "tuple":
        return extra[0](*items) if extra else tuple(items)
    return extra[0](*extra[1:], items) if extra else items
