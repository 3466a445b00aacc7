"""The static IR: Graph, Node, Value and Group, as data, with printing and check().

ir.py sits in the middle of the pipeline: the tracer (tracer.py) builds a graph,
passes (passes.py) map graphs to graphs, and backends (backends/) run them. A graph is
a flat, topologically ordered list of Nodes; each Node names its inputs by Value.
ir.py imports none of the modules that consume it: running, drawing and saving a
graph are graph.py's (StaticGraph, the Graph users hold).

    print(graph); graph.check()
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dezero import cuda
from dezero.errors import GraphError
from dezero.op_record import RECORDS, OpRecord, broadcast_shapes
from dezero.static.names import is_source_name, printable
from dezero.static.sizes import Size, names

# =============================================================================
# Values and nodes: Value, Node, type_str
# =============================================================================

# The kinds of node, in the order they appear in a graph.
KINDS = ("input", "state", "const", "op", "write", "output")

def type_str(shape, dtype) -> str:
    """'f32[32,784]' for float32 of shape (32, 784); 'bool[3]' for booleans; a
    symbolic size by its expression, 'f32[B*T,784]'."""
    dtype = np.dtype(dtype)
    short = "bool" if dtype.kind == "b" else f"{dtype.kind}{dtype.itemsize * 8}"
    return f"{short}[{','.join(str(n) for n in shape)}]"


class Value:
    """One array flowing through a graph: a name, a shape and a dtype.

    name   an identifier, the variable generated code binds ('m_layers_0_W')
    place  for state, where it lives as the user's code reaches it, dotted
           ('m.layers.0.W', 'opt.ms[layers.0.W]', names.dotted), else None;
           printing and drawings show it (label)
    """

    __slots__ = ("name", "shape", "dtype", "place")

    def __init__(self, name: str | None, shape: tuple, dtype, place: str | None = None):
        self.name, self.place = name, place
        self.shape = tuple(n if isinstance(n, Size) else int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    @property
    def label(self) -> str:
        """What print(graph) and drawings call the value: its place, else its name."""
        return self.place or self.name

    @property
    def type(self) -> str:
        return type_str(self.shape, self.dtype)

    def __repr__(self):
        return f"{self.label}: {self.type}"


class Node:
    """One step of a graph.

    kind     input | state | const | op | write | output
    op       the registered Function name (op_record.RECORDS key) of an op node, else None
    inputs   Values read by the node (for a write: [target, source])
    attrs    fixed Python values: the op's attrs; for state and write nodes
             {"field": "data" | "grad" | "attr"} (a data write may add "in_place":
             True, the run overwrote the state's array itself) plus, for "grad", "of" (the data
             state whose .grad it is) and, for "attr", "name" and "of" (the
             attribute and the class of the object holding it); none for
             input, const and output nodes
    outputs  Values the node defines
    payload  runtime data that is not part of the text: a const's array; the slot
             a state node reads (DataSlot, GradSlot or AttrSlot); the AttrSlot an
             "attr" write sets
    source   (filename, line) where the user's code made an op node, for error
             messages; None when unknown (passes and files do not keep it)
    """

    __slots__ = ("kind", "op", "inputs", "attrs", "outputs", "payload", "source")

    def __init__(self, kind, op=None, inputs=(), attrs=None, outputs=(), payload=None):
        if kind not in KINDS:
            raise GraphError(f"unknown node kind {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.op = op
        self.inputs = list(inputs)
        self.attrs = dict(attrs or {})
        self.outputs = list(outputs)
        self.payload = payload
        self.source = None

    @property
    def record(self) -> OpRecord:
        """The facts about an op node's op (cpp, random ...), from its Function class."""
        record = RECORDS.get(self.op)
        if record is None:
            raise GraphError(
                f"op {self.op!r} is not registered; import the module that defines it "
                f"before running this graph")
        return record

    def __repr__(self):
        return format_node(self)


@dataclass(eq=False)
class Group:
    """Op nodes that run as one kernel (made by passes.fuse): elementwise ones, and in
    a reduction group the reductions they feed and the elementwise ops after them.

    name     "k0", "k1" ... in graph order
    nodes    the op nodes, contiguous in the graph's node list
    inputs   the Values they read from outside the group, in order of first use;
             each broadcasts to `shape`
    outputs  the Values of the group that something outside reads (a later node,
             a write, the output node), in node order; each of shape `shape`
    compiled whether a kernel backend runs it as one compiled kernel, else as one
             numpy call per node: set by passes.decide, then on the CPU by the
             kernel's measured time (backends/measure.py)
    decision how that was decided, as print(graph) shows it ("to be measured",
             "compiled on 1 thread: 2.0 us a call, numpy calls 5.1 us" ...)
    spec     its kernel spec, made once by codegen.kernel_spec and kept here
    segments a horizontal group's parts (passes.fuse): Groups named k4_0, k4_1 ... of
             the same body on arrays of their own shapes, none reading another's
             results; its nodes are theirs one after the other, its inputs theirs
             (each once), its outputs theirs, its shape (total elements,). Empty for
             a vertical group (one chain, one shape)
    axes     None, or the axes of `shape` its reductions reduce; its values are then
             of `shape` or of a reduction's result shape (row values, one per
             position of the other axes, with or without those axes as 1)
    """

    name: str
    nodes: list
    inputs: list
    outputs: list
    shape: tuple
    compiled: bool = True
    spec: object = None
    segments: list = field(default_factory=list)
    axes: tuple | None = None
    decision: str = ""

    @property
    def sizes(self) -> tuple:
        """The names of the symbolic sizes its values' shapes hold, sorted: the sizes
        its kernel takes, as an array, beside its inputs and outputs."""
        return tuple(sorted(names([self.shape, *(v.shape for v in self.inputs + self.outputs)])))

    def header(self) -> str:
        """'kernel k0: 5 ops -> d, f', the comment printed above the group, with its
        decision in brackets where there is one; a horizontal one says
        'kernel k4: horizontal, 4 x 12 ops over [2,10], [10], [10,3], [3]'; one with
        reductions 'kernel k1: 5 ops, reduces axes (0,) of [8, 3] -> ...'."""
        what = f"{len(self.nodes)} ops -> " + ", ".join(v.label for v in self.outputs)
        if self.segments:  # each segment's line names its results
            what = f"horizontal, {len(self.segments)} x {len(self.segments[0].nodes)} ops " \
                   f"over " + ", ".join(f"[{','.join(map(str, s.shape))}]"
                                        for s in self.segments)
        if self.axes is not None:
            what = what.replace(" ops -> ", f" ops, reduces axes {self.axes} of "
                                            f"{list(self.shape)} -> ", 1)
        return f"kernel {self.name}: {what}" + (f" ({self.decision})" if self.decision else "")


# =============================================================================
# Printing and canonical attributes: format_attr, canonical_attr, format_node, format_graph
# =============================================================================


def format_attr(value) -> str:
    """An attribute as the printed graph shows it ('1:', '(0, 2)', 'float32'), on one
    line: whatever the value, the text holds no line break."""
    if isinstance(value, slice):
        parts = ["" if p is None else format_attr(p) for p in (value.start, value.stop,
                                                                value.step)]
        return ":".join(parts[:2] if value.step is None else parts)
    if isinstance(value, tuple):
        inner = ", ".join(format_attr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, np.ndarray):
        return f"array{type_str(value.shape, value.dtype)}"
    if isinstance(value, Size):
        return str(value)
    if isinstance(value, (np.dtype, type)):
        return np.dtype(value).name
    if value is Ellipsis:
        return "..."
    return printable(repr(value))


def canonical_attr(value):
    """A hashable form of an attribute that tells apart any two values an op could
    treat differently (True from 1, 0.0 from -0.0, arrays by dtype, shape and bytes);
    TypeError for a type the IR does not hold."""
    if value is None or value is Ellipsis or type(value) in (bool, int, str):
        return type(value).__name__, value
    if type(value) is float:
        return "float", repr(value)
    if type(value) is Size:
        return "size", str(value)
    if type(value) in (tuple, list):
        return type(value).__name__, tuple(canonical_attr(v) for v in value)
    if type(value) is slice:
        return "slice", tuple(canonical_attr(v) for v in (value.start, value.stop, value.step))
    if isinstance(value, np.dtype) or isinstance(value, type) and issubclass(value, np.generic):
        return "dtype", np.dtype(value).name
    if isinstance(value, (np.generic, *cuda.array_types)):
        array = cuda.as_numpy(value) if isinstance(value, cuda.array_types) else value
        return "array", array.dtype.str, array.shape, array.tobytes()
    if type(value) is dict:
        return "dict", tuple((canonical_attr(k), canonical_attr(v)) for k, v in value.items())
    raise TypeError(f"an attribute of type {type(value).__name__} has no canonical form")


def attrs_key(attrs: dict):
    """The canonical form of a node's attrs, for comparing nodes; None if an attr has
    none (such a node is never merged with another)."""
    try:
        return tuple((k, canonical_attr(v)) for k, v in sorted(attrs.items()))
    except TypeError:
        return None


def _format_const(array) -> str:
    array = cuda.as_numpy(array)
    if array.size <= 4:
        return np.array2string(array.reshape(-1) if array.ndim > 1 else array,
                               separator=", ").replace("\n", "")
    return f"<{array.size} values>"


def format_node(node: Node) -> str:
    """One line of the printed graph (without indentation)."""
    binders = ", ".join(f"{v.label}: {v.type}" for v in node.outputs)
    if node.kind == "op":
        args = ", ".join(v.label for v in node.inputs)
        text = f"{binders} = {node.op}({args})"
        if node.attrs:
            text += " [" + ", ".join(f"{k}={format_attr(v)}"
                                     for k, v in sorted(node.attrs.items())) + "]"
        return text
    if node.kind == "const":
        return f"{binders} = const {_format_const(node.payload)}"
    if node.kind == "write":
        source = stored(node)
        return f"{written(node)} <- {'None' if source is None else source.label}"
    if node.kind == "output":
        return "return " + ", ".join(v.label for v in node.inputs)
    if node.kind == "state":
        field = node.attrs.get("field")
        suffix = f"  # {node.attrs['of']}.grad" if field == "grad" else \
            f"  # {node.attrs['of']}.{node.attrs['name']}" if field == "attr" else ""
        return f"{binders} = state{suffix}"
    return f"{binders} = input"


def stored(write: Node) -> Value | None:
    """The value a write node stores; None where it clears a .grad."""
    attr = write.attrs["field"] == "attr"
    return write.inputs[-1] if attr or len(write.inputs) > 1 else None


def written(write: Node, in_place: bool = True) -> str:
    """What a write node sets: 'm.l0.W', 'm.l0.W.grad', 'LSTM.h', or with in_place
    'm.l0.W[...]' for a write into the array itself."""
    field = write.attrs["field"]
    if field == "attr":
        return f"{write.attrs['of']}.{write.attrs['name']}"
    return write.inputs[0].label + (".grad" if field == "grad" else "[...]" if in_place
                                    and write.attrs.get("in_place") else "")


def _origin(node: Node) -> str:
    field = node.attrs.get("field")
    if field == "grad" and not node.outputs[0].place:  # a place says it: m.l0.W.grad
        return f" ({node.attrs['of']}.grad)"
    if field == "attr":
        return f" ({node.attrs['of']}.{node.attrs['name']})"
    return ""


def format_graph(graph: Graph) -> str:
    """The jaxpr-like text: a header with inputs and captured state, one line per node;
    the nodes of a kernel (graph.groups) under a comment that names it."""
    inputs = ", ".join(repr(v) for v in graph.input_values)
    header = f"trace {graph.name}({inputs})"
    if graph.relations:  # what the sizes of a call must satisfy (B >= 2 ...)
        header += " where " + ", ".join(map(str, graph.relations))
    states = [n for n in graph.nodes if n.kind == "state"]
    if states:
        header += " captures " + ", ".join(
            f"{n.outputs[0].label}: {n.outputs[0].type}{_origin(n)}" for n in states)
    lines = [header]
    starts = {id(g.nodes[0]): g for g in graph.groups}
    parts = {id(s.nodes[0]): s for g in graph.groups for s in g.segments}
    inside = {id(n) for g in graph.groups for n in g.nodes}
    for node in graph.nodes:
        if node.kind in ("input", "state"):
            continue
        if id(node) in starts:
            lines.append("  # " + starts[id(node)].header())
        if id(node) in parts:  # a segment of a horizontal kernel
            part = parts[id(node)]
            lines.append(f"    # {part.name}: {type_str(part.shape, node.outputs[0].dtype)}"
                         f" -> " + ", ".join(v.label for v in part.outputs))
        # A kernel's nodes are indented under its header, so that its end shows.
        lines.append(("    " if id(node) in inside else "  ") + format_node(node))
    return "\n".join(lines)


def row_shapes(shape: tuple, axes: tuple) -> set:
    """The shapes of a reduction of `shape` over `axes`: with and without them as 1."""
    return {tuple(1 if d in axes else n for d, n in enumerate(shape)),
            tuple(n for d, n in enumerate(shape) if d not in axes)}


# =============================================================================
# Graph: the container, its views and check
# =============================================================================


class Graph:
    """A recorded computation: nodes in topological order, plus how to rebuild outputs.

    `out_tree` describes the structure the traced function returned (see
    saving.py). Data only: graph.py's StaticGraph, a subclass, runs, draws and
    saves it.
    """

    def __init__(self, name: str, nodes: list[Node], out_tree):
        self.name = name
        self.nodes = list(nodes)
        self.out_tree = out_tree
        # A loaded graph owns the Variables its state nodes read; a traced one
        # reads the caller's (parameters, optimizer slots) by reference.
        self.owns_state = False
        # "cpu" or "gpu": which array module the replay code calls.
        self.device = "cpu"
        # The kernels laid over the node list (passes.fuse); empty before fusion.
        self.groups: list[Group] = []
        # sizes.Relations between the symbolic sizes of the inputs that every call
        # must keep (B >= 2, B*T == 640): the recording relied on them.
        self.relations: list = []
        # name -> a size it had in the run recorded (the kernels are timed at these).
        self.hints: dict = {}

    # ---- views ------------------------------------------------------------
    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind == kind]

    @property
    def input_values(self) -> list[Value]:
        return [n.outputs[0] for n in self.nodes if n.kind == "input"]

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.input_values]

    @property
    def output_values(self) -> list[Value]:
        return list(self.nodes[-1].inputs) if self.nodes and \
            self.nodes[-1].kind == "output" else []

    @property
    def state(self) -> dict:
        """label ('model.l0.W') -> the Variable each data-state node reads (and writes)."""
        return {n.outputs[0].label: n.payload.var for n in self.nodes
                if n.kind == "state" and n.attrs.get("field") == "data"}

    def with_nodes(self, nodes: list[Node]) -> Graph:
        """A new graph of the same class, name and outputs structure (used by passes);
        it has no groups (fuse sets them)."""
        graph = type(self)(self.name, nodes, self.out_tree)
        graph.owns_state, graph.device = self.owns_state, self.device
        graph.relations, graph.hints = self.relations, self.hints
        return graph

    def __str__(self):
        return format_graph(self)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}: {self.counts()}>"

    def counts(self) -> str:
        """'12 ops, 2 inputs, 4 state, 4 writes'."""
        count = {k: len(self.of_kind(k)) for k in ("input", "state", "op", "write")}
        return f"{count['op']} ops, {count['input']} inputs, {count['state']} state, " \
               f"{count['write']} writes"

    # ---- validation ---------------------------------------------------------
    def check(self) -> Graph:
        """Validate the IR and return the graph; raise GraphError naming the bad node.

        Rules: node kinds in order (input, state, const first; op; write; one output
        last); every input defined earlier; names unique and safe (is_source_name);
        consts hold an array of their type; elementwise ops broadcast their inputs to
        their output type; writes aimed at captured state (or, for .grad, at an input)
        with a source of the target's type, at most one write per target.
        """
        values, writes = {}, set()  # name -> the Value defined under it; writes made
        producers = {id(v): n for n in self.nodes for v in n.outputs}
        phase = 0
        order = {"input": 0, "state": 0, "const": 0, "op": 1, "write": 2, "output": 3}

        def fail(node, message):
            raise GraphError(f"graph {self.name}: {message}\n  at node: {format_node(node)}")

        for node in self.nodes:
            if order[node.kind] < phase:
                fail(node, f"a {node.kind} node may not follow later kinds "
                           f"(order: inputs/state/consts, ops, writes, output)")
            phase = order[node.kind]
            for v in node.inputs:
                if values.get(v.name) is not v:
                    fail(node, f"input {v.name} is used before it is defined")
            for v in node.outputs:
                if not is_source_name(v.name) or v.name in values:
                    fail(node, f"value name {v.name!r} is not fresh or not a safe name "
                               f"(an identifier, no keyword or builtin, no leading '_')")
                values[v.name] = v
            if node.kind == "const":
                array = node.payload
                if not isinstance(array, cuda.array_types) or array.shape != \
                        node.outputs[0].shape or array.dtype != node.outputs[0].dtype:
                    fail(node, "const payload does not match its type")
            elif node.kind == "op":
                if not node.outputs:
                    fail(node, "an op node needs at least one output")
                if node.record.elementwise and len(node.outputs) == 1 and any(
                        v.shape != node.outputs[0].shape for v in node.inputs):
                    try:
                        shape = broadcast_shapes(*(v.shape for v in node.inputs))
                    except ValueError:
                        fail(node, "elementwise inputs do not broadcast together")
                    if shape != node.outputs[0].shape:
                        fail(node, f"elementwise output shape {node.outputs[0].shape} is not "
                                   f"the broadcast input shape {shape}")
            elif node.kind == "write":
                self._check_write(node, fail, writes, producers)
            elif node.kind == "output" and node is not self.nodes[-1]:
                fail(node, "the output node must be last")
        if not self.nodes or self.nodes[-1].kind != "output":
            raise GraphError(f"graph {self.name}: the last node must be the output node")
        self._check_groups()
        return self

    def _check_groups(self):
        at = {id(n): i for i, n in enumerate(self.nodes)}
        for group in self.groups:
            spots = [at.get(id(n)) for n in group.nodes]
            parts = group.segments or [group]
            shapes = {group.shape} | (set() if group.axes is None else  # () of a total
                                      row_shapes(group.shape, group.axes) | {()})
            if None in spots or spots != list(range(spots[0], spots[0] + len(spots))) or \
                    [n for s in parts for n in s.nodes] != group.nodes or \
                    any(v.shape != s.shape and v.shape not in shapes
                        for s in parts for n in s.nodes for v in n.outputs):
                raise GraphError(f"graph {self.name}: kernel {group.name} is not a run of "
                                 f"consecutive nodes of the graph with results of shape "
                                 f"{' or '.join(str(s.shape) for s in parts)}")

    def _check_write(self, node, fail, writes, producers):
        field = node.attrs.get("field")
        if field == "attr":
            key = (node.attrs.get("of"), node.attrs.get("name"))
            if len(node.inputs) != 1 or None in key or key in writes:
                fail(node, "an attribute write needs one source, 'of' and 'name', once")
            writes.add(key)
            return
        target = node.inputs[0] if node.inputs else None
        producer = producers.get(id(target)) if target is not None else None
        if field not in ("data", "grad") or producer is None:
            fail(node, "a write needs field 'data', 'grad' or 'attr' and a target")
        if field == "data" and (producer.kind != "state" or
                                producer.attrs.get("field", "data") != "data"):
            fail(node, "a .data write must target captured state")
        if field == "grad" and producer.kind not in ("state", "input"):
            fail(node, "a .grad write must target captured state or an input")
        if (target.name, field) in writes:
            fail(node, f"{target.name}.{field} is written twice")
        writes.add((target.name, field))
        if len(node.inputs) > 1:
            source = node.inputs[1]
            if source.shape != target.shape or (field == "data" and
                                                source.dtype != target.dtype):
                fail(node, f"write of {source.type} into {target.type}")
