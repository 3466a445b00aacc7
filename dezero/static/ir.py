"""The static IR: StaticGraph, Node and Value, with printing, checking and drawing.

ir.py sits in the middle of the pipeline: the tracer (tracer.py) builds a StaticGraph,
passes (passes.py) map graphs to graphs, and backends (backends/) run them. A graph is
a flat, topologically ordered list of Nodes; each Node names its inputs by Value.

    print(graph); graph.check(); graph.plot("graph.svg"); graph(x)
"""
from __future__ import annotations

import builtins
import keyword
import math
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from dezero import cuda
from dezero.core import OPS, TracedArray, Variable
from dezero.errors import GraphError

# =============================================================================
# Values and nodes: Value, Node, type_str, letter_name
# =============================================================================

# The kinds of node, in the order they appear in a graph.
KINDS = ("input", "state", "const", "op", "write", "output")

_SHORT_DTYPE = {"f": "f", "i": "i", "u": "u", "c": "c"}


def type_str(shape, dtype) -> str:
    """'f32[32,784]' for float32 of shape (32, 784); 'bool[3]' for booleans."""
    dtype = np.dtype(dtype)
    short = "bool" if dtype.kind == "b" else f"{_SHORT_DTYPE.get(dtype.kind, dtype.kind)}" \
        f"{dtype.itemsize * 8}"
    return f"{short}[{','.join(str(n) for n in shape)}]"


class Value:
    """One array flowing through a graph: a name, a shape and a dtype."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name: str | None, shape: tuple, dtype):
        self.name = name
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    @property
    def type(self) -> str:
        return type_str(self.shape, self.dtype)

    def __repr__(self):
        return f"{self.name}: {self.type}"


class Node:
    """One step of a graph.

    kind     input | state | const | op | write | output
    op       the registered Function name (OPS key) of an op node, else None
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
    def function_class(self):
        """The Function class of an op node (where its facts live: cpp, random ...)."""
        cls = OPS.get(self.op)
        if cls is None:
            raise GraphError(
                f"op {self.op!r} is not registered; import the module that defines it "
                f"before running this graph")
        return cls

    def __repr__(self):
        return format_node(self)


def op_fact(cls, name: str):
    """A fact about an op read from its class (py, neutral, neutral_attrs): None when
    a subclass overrides forward after the class that states it, whose fact then
    says nothing about the new forward."""
    owner = next((k for k in cls.__mro__ if name in vars(k)), None)
    if owner is None or getattr(owner, "forward", None) is not cls.forward:
        return None
    return getattr(cls, name)


def make_function(node: Node):
    """A Function instance for an op node, rebuilt from its attrs alone.

    The attrs are set directly rather than passed to __init__, so an op whose
    constructor normalises its arguments is rebuilt exactly as recorded.
    """
    cls = node.function_class
    f = cls.__new__(cls)
    f.__dict__.update(node.attrs)
    return f


def as_result_array(y):
    """forward may return a numpy scalar for a 0-d result; the graph holds arrays."""
    return y if isinstance(y, cuda.array_types) else np.asarray(y)



@dataclass(eq=False)
class Group:
    """Elementwise op nodes that run as one kernel (made by passes.fuse).

    name     "k0", "k1" ... in graph order
    nodes    the op nodes, contiguous in the graph's node list
    inputs   the Values they read from outside the group, in order of first use;
             each broadcasts to `shape`
    outputs  the Values of the group that something outside reads (a later node,
             a write, the output node), in node order; each of shape `shape`
    """

    name: str
    nodes: list
    inputs: list
    outputs: list
    shape: tuple

    def header(self) -> str:
        """'kernel k0: 5 ops -> d, f', the comment printed above the group."""
        return f"kernel {self.name}: {len(self.nodes)} ops -> " + \
            ", ".join(v.name for v in self.outputs)


# =============================================================================
# State slots: DataSlot, GradSlot, AttrSlot (where a state node's array lives)
# =============================================================================


@dataclass(eq=False)
class DataSlot:
    """var.data: a parameter, an optimizer slot, a running statistic."""

    var: Variable

    def read(self):
        return self.var._data

    def write(self, array) -> None:
        self.var._data = array

    def __str__(self):
        return self.var.name or "a state variable"


@dataclass(eq=False)
class GradSlot:
    """var.grad.data: a gradient that an earlier backward() left on var."""

    var: Variable

    def read(self):
        return None if self.var.grad is None else self.var.grad._data

    def write(self, array) -> None:
        self.var.grad = None if array is None else Variable(array)

    def __str__(self):
        return f".grad of {self.var.name or 'a variable'}"


@dataclass(eq=False)
class AttrSlot:
    """holder.<name>.data: a Variable an object keeps in a plain attribute (LSTM.h)."""

    holder: object
    name: str

    def read(self):
        var = getattr(self.holder, self.name, None)
        return var._data if isinstance(var, Variable) else None

    def write(self, array) -> None:
        setattr(self.holder, self.name, Variable(array))

    def __str__(self):
        return f"{type(self.holder).__name__}.{self.name}"


def letter_name(n: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'ba': the names a jaxpr gives its values ('id_' and
    'if_' where the letters spell a builtin or a keyword)."""
    letters = []
    while True:
        letters.append(chr(ord("a") + n % 26))
        n //= 26
        if n == 0:
            name = "".join(reversed(letters))
            return name if is_source_name(name) else name + "_"


# =============================================================================
# Names and literals of generated code: is_source_name, identifier, source_literal
# =============================================================================

# Generated code may call any builtin (float("nan")) and names its own helpers with
# a leading '_' (_xp, _arr), so its variables may be neither.
_BUILTINS = frozenset(name for name in vars(builtins) if not name.startswith("_"))


def is_source_name(text) -> bool:
    """True for a name generated code may bind: an identifier in normal form (the
    parser folds 'ｐｒｉｎｔ' to 'print'), no keyword, no builtin, no leading '_'."""
    return isinstance(text, str) and text.isidentifier() and not text.startswith("_") \
        and unicodedata.normalize("NFKC", text) == text and text not in _BUILTINS \
        and not keyword.iskeyword(text) and not keyword.issoftkeyword(text)


def identifier(text: str | None, default: str) -> str:
    """A name generated code may bind (is_source_name), made from any text: values
    become variables of the replay code."""
    text = re.sub(r"\W", "_", unicodedata.normalize("NFKC", text or ""))
    if not text.isidentifier():  # \w admits a few characters identifiers do not
        text = re.sub(r"[^0-9A-Za-z_]", "_", text)
    text = text.lstrip("_0123456789") or default
    if not is_source_name(text):  # a keyword or builtin: 'sum' -> 'sum_'
        text += "_"
    return text if is_source_name(text) else default


def source_literal(value) -> str | None:
    """Python source for a plain value (None, bool, int, float, a word of ASCII
    letters, digits and '_' such as a dtype name, tuples of them), re-rendered from
    its type, or None for any other value: generated code holds no other literal."""
    if value is None or type(value) in (bool, int):
        return repr(value)
    if type(value) is str and re.fullmatch(r"\w*", value, re.ASCII):
        return repr(value)  # nothing in it can end the quotes
    if type(value) is float:
        return repr(value) if math.isfinite(value) else f"float('{value}')"
    if type(value) is tuple:
        parts = [source_literal(v) for v in value]
        if None in parts:
            return None
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
    return None


def printable(text: str) -> str:
    """text with line breaks and other unprintable characters escaped: safe to put on
    one line of a comment in generated code."""
    return text if text.isprintable() else repr(text)[1:-1]


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
    binders = ", ".join(f"{v.name}: {v.type}" for v in node.outputs)
    if node.kind == "op":
        args = ", ".join(v.name for v in node.inputs)
        text = f"{binders} = {node.op}({args})"
        if node.attrs:
            text += " [" + ", ".join(f"{k}={format_attr(v)}"
                                     for k, v in sorted(node.attrs.items())) + "]"
        return text
    if node.kind == "const":
        return f"{binders} = const {_format_const(node.payload)}"
    if node.kind == "write":
        if node.attrs["field"] == "attr":
            return f"{node.attrs['of']}.{node.attrs['name']} <- {node.inputs[0].name}"
        target = node.inputs[0].name + (".grad" if node.attrs["field"] == "grad" else
                                        "[...]" if node.attrs.get("in_place") else "")
        source = node.inputs[1].name if len(node.inputs) > 1 else "None"
        return f"{target} <- {source}"
    if node.kind == "output":
        return "return " + ", ".join(v.name for v in node.inputs)
    if node.kind == "state":
        field = node.attrs.get("field")
        suffix = f"  # {node.attrs['of']}.grad" if field == "grad" else \
            f"  # {node.attrs['of']}.{node.attrs['name']}" if field == "attr" else ""
        return f"{binders} = state{suffix}"
    return f"{binders} = input"


def _origin(node: Node) -> str:
    field = node.attrs.get("field")
    if field == "grad":
        return f" ({node.attrs['of']}.grad)"
    if field == "attr":
        return f" ({node.attrs['of']}.{node.attrs['name']})"
    return ""


def format_graph(graph: StaticGraph) -> str:
    """The jaxpr-like text: a header with inputs and captured state, one line per node;
    the nodes of a kernel (graph.groups) under a comment that names it."""
    inputs = ", ".join(repr(v) for v in graph.input_values)
    header = f"trace {graph.name}({inputs})"
    states = [n for n in graph.nodes if n.kind == "state"]
    if states:
        header += " captures " + ", ".join(
            f"{n.outputs[0].name}: {n.outputs[0].type}{_origin(n)}" for n in states)
    lines = [header]
    starts = {id(g.nodes[0]): g for g in graph.groups}
    inside = {id(n) for g in graph.groups for n in g.nodes}
    for node in graph.nodes:
        if node.kind in ("input", "state"):
            continue
        if id(node) in starts:
            lines.append("  # " + starts[id(node)].header())
        # A kernel's nodes are indented under its header, so that its end shows.
        lines.append(("    " if id(node) in inside else "  ") + format_node(node))
    return "\n".join(lines)


# =============================================================================
# StaticGraph: the container, check, to_dot, plot, compile, run, save/load
# =============================================================================


class StaticGraph:
    """A recorded computation: nodes in topological order, plus how to rebuild outputs.

    `out_tree` describes the structure the traced function returned (see
    saving.py); `graph(*inputs)` runs the graph on arrays or Variables given in the
    order of `input_names`, reads captured state afresh, applies the state writes
    and returns that structure.
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
        self._compiled = {}  # backend name -> plan

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
        """name -> the Variable each data-state node reads (and writes)."""
        return {n.outputs[0].name: n.payload.var for n in self.nodes
                if n.kind == "state" and isinstance(n.payload, DataSlot)}

    def with_nodes(self, nodes: list[Node]) -> StaticGraph:
        """A new graph with the same name and outputs structure (used by passes);
        it has no groups (fuse sets them)."""
        graph = StaticGraph(self.name, nodes, self.out_tree)
        graph.owns_state, graph.device = self.owns_state, self.device
        return graph

    def __str__(self):
        return format_graph(self)

    def __repr__(self):
        counts = {k: len(self.of_kind(k)) for k in ("input", "state", "op", "write")}
        return (f"<StaticGraph {self.name}: {counts['op']} ops, {counts['input']} inputs, "
                f"{counts['state']} state, {counts['write']} writes>")

    # ---- validation ---------------------------------------------------------
    def check(self) -> StaticGraph:
        """Validate the IR and return the graph; raise GraphError naming the bad node.

        Rules: node kinds in order (input, state, const first; op; write; one output
        last); every input defined earlier; names unique and safe (is_source_name);
        consts hold an array of their type; elementwise ops broadcast their inputs to
        their output type; writes aimed at captured state (or, for .grad, at an input)
        with a source of the target's type, at most one write per target.
        """
        defined, writes = set(), set()
        values = {}
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
                if v.name not in defined or values[v.name] is not v:
                    fail(node, f"input {v.name} is used before it is defined")
            for v in node.outputs:
                if not is_source_name(v.name) or v.name in defined:
                    fail(node, f"value name {v.name!r} is not fresh or not a safe name "
                               f"(an identifier, no keyword or builtin, no leading '_')")
                defined.add(v.name)
                values[v.name] = v
            if node.kind == "const":
                array = node.payload
                if not isinstance(array, cuda.array_types) or array.shape != \
                        node.outputs[0].shape or array.dtype != node.outputs[0].dtype:
                    fail(node, "const payload does not match its type")
            elif node.kind == "op":
                cls = node.function_class
                if not node.outputs:
                    fail(node, "an op node needs at least one output")
                if cls.elementwise() and len(node.outputs) == 1:
                    try:
                        shape = np.broadcast_shapes(*(v.shape for v in node.inputs))
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
            if None in spots or spots != list(range(spots[0], spots[0] + len(spots))) or \
                    any(v.shape != group.shape for n in group.nodes for v in n.outputs):
                raise GraphError(f"graph {self.name}: kernel {group.name} is not a run of "
                                 f"consecutive nodes of the graph with results of shape "
                                 f"{group.shape}")

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

    # ---- drawing ----------------------------------------------------------
    def to_dot(self) -> str:
        """DOT text: inputs green, captured state orange, constants grey, ops as
        boxes, the return a double octagon, state writes dashed orange nodes."""
        from dezero.static.drawing import graph_to_dot
        return graph_to_dot(self)

    def plot(self, to_file: str = "graph.png"):
        """Render the graph with Graphviz into to_file (format from the extension)."""
        from dezero.utils import render_dot
        return render_dot(self.to_dot(), to_file)

    # ---- running ----------------------------------------------------------
    def compile(self, backend: str | None = None):
        """The plan of the named backend (see backends/; None: the default for the
        graph's device), made on first use and kept."""
        if backend not in self._compiled:
            from dezero.static.backends import compile
            self._compiled[backend] = compile(self, backend)
        return self._compiled[backend]

    @property
    def code(self) -> str:
        """The generated Python replay code, as text (the python backend's where the
        default backend generates none: the interpreter)."""
        return getattr(self.compile(), "source", None) or self.compile("python").source

    def __call__(self, *inputs):
        values = self.input_values
        if len(inputs) != len(values):
            raise TypeError(f"graph {self.name} takes {len(values)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}")
        for value, x in zip(values, inputs):
            data = x._data if isinstance(x, Variable) else x
            if isinstance(data, TracedArray):
                data = data.array  # called inside a trace: run() says why it refuses
            if not isinstance(data, cuda.array_types) or data.shape != value.shape or \
                    data.dtype != value.dtype:
                got = type_str(data.shape, data.dtype) if isinstance(
                    data, cuda.array_types) else type(data).__name__
                raise TypeError(f"graph {self.name}: input {value.name} must be "
                                f"{value.type}, got {got}; trace again for other shapes")
        return self.compile().run(inputs)

    def interpret(self, *inputs):
        """Run with the reference interpreter (slow, checked); same result as graph(*inputs)."""
        return self.compile("interpreter").run(inputs)

    # ---- devices ----------------------------------------------------------
    def to_gpu(self) -> StaticGraph:
        """Move constants (and state the graph owns, i.e. a loaded graph's) to the GPU.
        A traced graph's state belongs to its model: move the model too."""
        return self._move(cuda.as_cupy, "gpu")

    def to_cpu(self) -> StaticGraph:
        return self._move(cuda.as_numpy, "cpu")

    def _move(self, convert, device):
        for node in self.nodes:
            if node.kind == "const":
                node.payload = convert(node.payload)
            elif node.kind == "state" and self.owns_state:
                node.payload.write(convert(node.payload.read()))
        self.device = device
        self._compiled = {}  # compiled code closes over the old constants
        return self

    # ---- files ------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write path (.json) and its .npz of arrays; see dezero/static/saving.py."""
        from dezero.static.saving import save
        save(self, path)

    @staticmethod
    def load(path: str) -> StaticGraph:
        from dezero.static.saving import load
        return load(path)
