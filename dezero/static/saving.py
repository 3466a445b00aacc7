"""Saving and loading a StaticGraph: a JSON description plus an .npz of arrays.

Above ir.py, below graph.py (StaticGraph.save / StaticGraph.load call these). A saved graph runs
with only dezero installed, without the Python function that produced it: its
captured state is saved with it and owned by the loaded graph.

    graph.save("step.json"); g = dezero.static.load("step.json"); g(x, t); g.state["W"]

File format, version 3
----------------------
`NAME.json` is one JSON object:

    {"format": "dezero.static-graph", "version": 2,
     "name": "train_step",                  # the traced function's name
     "arrays": "NAME.npz", "arrays_sha256": "<hex digest of the .npz bytes>",
     "nodes": [NODE, ...],                  # topological order, as printed
     "out_tree": TREE,
     "relations": ["B >= 2", ...]}          # only where shapes hold symbolic sizes

    NODE = {"kind": "input" | "state" | "const" | "op" | "write" | "output",
            "op": "matmul",                 # op nodes: the registered Function name
            "inputs": ["x", "W"],           # names of values defined by earlier nodes
            "attrs": {"axis": 1},           # encoded as below
            "outputs": [{"name": "a", "shape": [32, 10], "dtype": "float32"}]}

A value may add "place": printable text, where state lives ("model.l0.W"), which
print(graph) and drawings show (ir.Value). A dimension of a shape, and an attribute,
may be a symbolic size, {"$size": "B*T"} (sizes.py's text: names, ints, + - * // and,
in attributes, /), with the relations between sizes that every call must keep.
Versions 1 (without places) and 2 (without sizes) load.

State nodes have attrs {"field": "data"} (the Variable's .data), {"field": "grad",
"of": "W"} (the .grad of data state W) or {"field": "attr", "name": "h", "of":
"LSTM"} (a Variable an object kept in an attribute between calls). Write nodes
have inputs [target, source] (or [target] for a .grad cleared to None) and attrs
{"field": "data" | "grad"} (a data write may add "in_place": true: the traced code
overwrote the array itself), or inputs [source] and the "attr" attrs above.

`NAME.npz` (numpy's savez, read with allow_pickle=False) holds "const/<name>" for
every const node and "state/<name>" for every state node's value at save time.

TREE rebuilds what the function returned from the flat outputs:
["var", i] a Variable of output i, ["array", i] the array itself, ["input", i] input i
as the caller passed it (the function returned its argument), ["tuple", [TREE..]],
["list", [TREE..]], ["dict", [[key, TREE]..]], ["static", value] a Python value
returned as it is (None, a bool, int, float or str, encoded as attributes are).
graph.out_tree holds the same lists, its static values decoded; in memory a tuple's
or dict's list may end with its type (a namedtuple, an OrderedDict; a defaultdict
and its factory), to return what the function did. A file names no Python type, so
such a graph does not save (GraphFileError): returning a plain tuple or dict in its
place, different from what the function returned, would be a silent change.

Attribute values: JSON null/bool/int/str/list as themselves; a float as itself, or
{"$float": "inf" | "-inf" | "nan"}; {"$tuple": [...]}, {"$slice": [start, stop, step]},
{"$ellipsis": true}, {"$dtype": "float32"}, {"$size": "B*T"},
{"$scalar": value, "dtype": "float32"},
{"$array": [...], "dtype": "int64", "shape": [...]}.

Inputs of a loaded graph are given positionally, in the order of `graph.input_names`
(the traced function's array arguments, nested ones flattened in order). A loaded
graph owns Variables for its "data" and "attr" state (`graph.state`), and writes
update them: a value carried in an attribute (LSTM.h) carries over between calls in
the graph's own Variable. Fused kernels (graph.groups) are not saved: load() runs
the fusion pass (passes.fuse) on the graph it builds.

Loading: the file is data, never code
-------------------------------------
A graph file may come from anywhere, so load() checks every field before it builds
anything, and each failure is a GraphFileError naming the field ("nodes[3].attrs.axis:
expected int in [...], got str 'x'"). Strict JSON (no NaN or Infinity, no repeated
key, no float that overflows); version a positive int; the graph name printable text;
value names identifiers that are no keyword or builtin and do not start with '_',
each defined once and used only after its node; node kinds, keys and input counts;
ops registered Function names whose attrs are exactly the constructor's parameters,
in the encodings above; dtypes from DTYPES; ints within int64 (or the array's dtype);
the .npz beside the .json, matching its hash, read without pickle, holding exactly
the arrays of the const and state nodes with their declared shapes and dtypes; each
op node's declared results against what its op gives on its declared inputs
(OpRecord.result_types: its forward run on zeros, one node at a time, or a
collective's rule, which needs the communicator); the output tree's indices. The
replay code generator (backends/pycode.py) checks again
what it emits: only such names and literals re-rendered from plain values
(ir.source_literal), with every comment escaped (ir.printable).
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import operator
import os
import reprlib
import zipfile

import numpy as np

from dezero import cuda
from dezero.core import Variable
from dezero.errors import GraphError, GraphFileError
from dezero.files import atomic_file
from dezero.op_record import RECORDS
from dezero.static.ir import KINDS, Graph, Node, Value, format_node, type_str
from dezero.static.names import is_source_name
from dezero.static.passes import fuse
from dezero.static.sizes import Size, evaluate, has_size, names, parse, parse_relation
from dezero.static.slots import DataSlot, GradSlot

FORMAT = "dezero.static-graph"
VERSION = 3
# The dtypes a file may declare: plain numbers, never objects, strings or records.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")
_INT64 = (-2**63, 2**63 - 1)

# =============================================================================
# Attribute encoding: encode_attr
# =============================================================================


def encode_attr(value):
    """A JSON-compatible encoding of an op attribute (raises TypeError if impossible)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, np.integer):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Size):
        return {"$size": str(value)}
    if isinstance(value, tuple):
        return {"$tuple": [encode_attr(v) for v in value]}
    if isinstance(value, list):
        return [encode_attr(v) for v in value]
    if isinstance(value, slice):
        return {"$slice": [p if p is None else encode_attr(p) if isinstance(p, Size) else
                           operator.index(p) for p in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"$ellipsis": True}
    if isinstance(value, np.dtype) or (isinstance(value, type) and
                                       issubclass(value, np.generic)):
        return {"$dtype": np.dtype(value).name}
    if isinstance(value, np.generic):
        return {"$scalar": encode_attr(value.item()), "dtype": value.dtype.name}
    if isinstance(value, cuda.array_types):
        array = cuda.as_numpy(value)
        return {"$array": encode_attr(array.tolist()), "dtype": array.dtype.name,
                "shape": list(array.shape)}
    raise TypeError(f"cannot encode an attribute of type {type(value).__name__}: {value!r}")


# =============================================================================
# Checked reading: Field (a place in the file and the checks made there)
# =============================================================================


def _describe(value) -> str:
    if isinstance(value, (dict, list)):
        what = "object with keys" if isinstance(value, dict) else "list"
        return f"{what} {reprlib.repr(list(value))}"
    return "null" if value is None else f"{type(value).__name__} {reprlib.repr(value)}"


class Field:
    """A place in a graph file, such as `nodes[3].attrs.axis`, with the checks load()
    makes there: each returns the value it accepts or raises a GraphFileError that
    names the place, what it expected and what it found."""

    def __init__(self, path: str = "the description"):
        self.path = path

    def __getitem__(self, key) -> Field:
        if isinstance(key, int):
            return Field(f"{self.path}[{key}]")
        return Field(f"{self.path}.{key}")

    def fail(self, expected: str, value):
        raise GraphFileError(f"{self.path}: expected {expected}, got {_describe(value)}")

    def expect(self, value, ok: bool, expected: str):
        if not ok:
            self.fail(expected, value)
        return value

    def integer(self, value, low: int, high: int) -> int:
        return self.expect(value, type(value) is int and low <= value <= high,
                           f"int in [{low}, {high}]")

    def text(self, value, limit: int = 1000) -> str:
        return self.expect(value, isinstance(value, str) and 0 < len(value) <= limit and
                           value.isprintable(), f"printable text of 1 to {limit} characters")

    def name(self, value) -> str:  # a value name: it becomes a variable of generated code
        return self.expect(value, is_source_name(value), "a name that is an identifier, no "
                           "keyword or builtin, and does not start with '_'")

    def attribute(self, value) -> str:  # an attribute or a class name, shown in comments
        return self.expect(value, isinstance(value, str) and value.isidentifier(),
                           "an identifier")

    def one_of(self, value, choices):
        return self.expect(value, isinstance(value, str) and value in choices,
                           "one of " + ", ".join(choices))

    def items(self, value, length: int | None = None) -> list:
        return self.expect(value, isinstance(value, list) and length in (None, len(value)),
                           "a list" if length is None else f"a list of {length}")

    def record(self, value, required, optional=()) -> dict:
        """An object with all the required keys and no key beyond the optional ones."""
        if not isinstance(value, dict):
            self.fail("an object", value)
        for key in value:
            if key not in required and key not in optional:
                keys = ", ".join((*required, *optional)) or "none"
                raise GraphFileError(f"{self.path}: unexpected key {key!r} (keys: {keys})")
        for key in required:
            if key not in value:
                raise GraphFileError(f"{self.path}: missing key {key!r}")
        return value

    def dtype(self, value) -> np.dtype:
        return np.dtype(self.one_of(value, DTYPES))

    def shape(self, value) -> tuple:
        dims = tuple(self[i].size(n) if isinstance(n, dict) else self[i].integer(n, 0, 2**48)
                     for i, n in enumerate(self.items(value)))
        # numpy refuses a shape whose nonzero dims multiply past its index range
        self.expect(value, len(dims) <= 32 and math.prod(
            max(n, 1) for n in dims if not isinstance(n, Size)) <= 2**48,
            "at most 32 dimensions and 2**48 elements")
        return dims

    def size(self, value, integer: bool = True) -> Size:
        """A symbolic size, {"$size": "B*T"}: its text parsed, never evaluated as code
        (a shape's is an integer; an attr's may be a number of sizes, 1/B)."""
        text = self["$size"].text(self.record(value, ("$size",))["$size"], 200)
        try:
            size = parse(text)
        except ValueError as e:
            raise GraphFileError(f"{self.path}.$size: {e}") from None
        self.expect(value, isinstance(size, Size) and (size.integer or not integer),
                    "a size of names, ints and + - * // (B, B*T, T - 1)")
        return size

    def number(self, value, dtype: np.dtype):
        """A number of dtype's kind in its range: a bool, an int, or a float (which may
        be {"$float": "nan"})."""
        if dtype.kind == "b":
            return self.expect(value, type(value) is bool, "true or false")
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return self.integer(value, int(info.min), int(info.max))
        if isinstance(value, dict):
            return read_attr(self.record(value, ("$float",)), self)
        return self.expect(value, type(value) in (int, float) and
                           abs(value) <= np.finfo(dtype).max, f"a number in {dtype.name}'s range")


# =============================================================================
# Attribute decoding: read_attr, one branch per "$" encoding
# =============================================================================


def read_attr(value, at: Field):
    """An op attribute decoded from the file, each part checked (encodings: see above)."""
    if value is None or isinstance(value, (bool, str, float)):
        return value  # the JSON reader refused non-finite floats
    if isinstance(value, int):
        return at.integer(value, *_INT64)
    if isinstance(value, list):
        return [read_attr(v, at[i]) for i, v in enumerate(value)]
    tags = [k for k in value if k.startswith("$")] if isinstance(value, dict) else []
    if len(tags) != 1 or tags[0] not in _TAGS:
        at.fail("null, bool, number, text, list or an object with one of the keys "
                + ", ".join(_TAGS), value)
    tag = tags[0]
    record = at.record(value, (tag, *_TAGS[tag]))
    part, here = record[tag], at[tag]
    if tag == "$float":
        return float(here.one_of(part, ("inf", "-inf", "nan")))
    if tag == "$tuple":
        return tuple(read_attr(v, here[i]) for i, v in enumerate(here.items(part)))
    if tag == "$slice":
        return slice(*(None if p is None else here[i].size(p) if isinstance(p, dict) else
                       here[i].integer(p, *_INT64) for i, p in enumerate(here.items(part, 3))))
    if tag == "$ellipsis":
        here.expect(part, part is True, "true")
        return Ellipsis
    if tag == "$dtype":
        return here.dtype(part)
    if tag == "$size":
        return at.size(value, integer=False)
    dtype = at["dtype"].dtype(record["dtype"])
    if tag == "$scalar":
        return dtype.type(here.number(part, dtype))
    shape = at["shape"].shape(record["shape"])

    def leaves(value, dims, here):  # "$array": nested lists of exactly the declared shape
        if not dims:
            return [here.number(value, dtype)]
        return [x for i, v in enumerate(here.items(value, dims[0]))
                for x in leaves(v, dims[1:], here[i])]
    return np.array(leaves(part, shape, here), dtype).reshape(shape)


# "$tag" -> the other keys of its object
_TAGS = {"$float": (), "$tuple": (), "$slice": (), "$ellipsis": (), "$dtype": (),
         "$size": (), "$scalar": ("dtype",), "$array": ("dtype", "shape")}


def _read_op_attrs(record, attrs, at) -> dict:
    """The attrs an op stores: its constructor's parameters (Function's convention, so
    that type(f)(**f.attrs) rebuilds it); with **kwargs, any identifier that names
    nothing on the class."""
    names = record.attr_names
    if names is None:
        names = tuple(k for k in at.record(attrs, ()) if is_source_name(k)
                      and not hasattr(record.cls, k))
    return {k: read_attr(v, at[k]) for k, v in at.record(attrs, names).items()}


# =============================================================================
# Files: save, load
# =============================================================================


def _paths(path):
    stem = path[:-5] if path.endswith(".json") else path
    return stem + ".json", stem + ".npz"


def save(graph: Graph, path: str) -> None:
    """Write `path` (.json added if missing) and the .npz beside it."""
    typed = _types_in(graph.out_tree)
    if typed:
        raise GraphFileError(f"cannot save graph {graph.name}: it returns a {typed[0]}, which a "
                             f"graph file (data, never a Python type) cannot\n  fix: return "
                             f"tuple(...) or dict(...) of it from the traced function")
    json_path, npz_path = _paths(os.fspath(path))
    arrays, nodes = {}, []
    for node in graph.nodes:
        entry = {"kind": node.kind,
                 "outputs": [{"name": v.name, "shape": [encode_attr(n) for n in v.shape],
                              "dtype": v.dtype.name,
                              **({"place": v.place} if v.place else {})}
                             for v in node.outputs]}
        if node.kind == "op":
            entry["op"] = node.op
            try:
                entry["attrs"] = {k: encode_attr(v) for k, v in sorted(node.attrs.items())}
            except TypeError as e:
                raise TypeError(f"cannot save op {node.op} of graph {graph.name}: {e}") from e
        elif node.attrs:
            entry["attrs"] = dict(node.attrs)
        if node.inputs:
            entry["inputs"] = [v.name for v in node.inputs]
        if node.kind == "const":
            arrays["const/" + node.outputs[0].name] = cuda.as_numpy(node.payload)
        elif node.kind == "state":
            arrays["state/" + node.outputs[0].name] = cuda.as_numpy(node.payload.read())
        nodes.append(entry)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    blob = buffer.getvalue()
    sized = any(has_size(v.shape) for n in graph.nodes for v in n.outputs)
    # A graph of fixed sizes writes version 2, which dezero before sizes reads.
    description = {"format": FORMAT, "version": VERSION if sized else 2, "name": graph.name,
                   "arrays": os.path.basename(npz_path),
                   "arrays_sha256": hashlib.sha256(blob).hexdigest(),
                   "nodes": nodes, "out_tree": encode_attr(graph.out_tree)}
    if graph.relations:
        description["relations"] = [str(r) for r in graph.relations]
    text = json.dumps(description, indent=1, allow_nan=False)
    try:  # a graph that saves also loads: refuse here what load() would refuse
        _build(json.loads(text), arrays)
    except GraphFileError as e:
        raise GraphFileError(f"cannot save graph {graph.name}: {e}") from None
    directory = os.path.dirname(os.path.abspath(json_path))
    os.makedirs(directory, exist_ok=True)
    # Arrays first: the description names their hash, so a crash between the two
    # renames leaves an old description that rejects the new arrays, never a mix.
    with atomic_file(npz_path) as f:
        f.write(blob)
    with atomic_file(json_path, "w") as f:
        f.write(text)


def load(path: str, make=Graph) -> Graph:
    """Read a graph saved by save(), checking every field before anything is built;
    it owns its state (graph.state) and runs standalone. make: the graph class
    (graph.StaticGraph.load passes its own, which this module sits below)."""
    json_path, _ = _paths(os.fspath(path))
    description = _read_json(json_path)
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise GraphFileError(f"{json_path} is not a dezero static graph file "
                             f"(no \"format\": \"{FORMAT}\")")
    version = description.get("version")
    if type(version) is int and version > VERSION:
        raise GraphFileError(f"{json_path} has format version {version}; this dezero reads "
                             f"versions up to {VERSION}: upgrade dezero to load it")
    try:
        Field().record(description, ("format", "version", "name", "arrays", "arrays_sha256",
                                     "nodes", "out_tree"), ("relations",))
        Field("version").integer(version, 1, VERSION)
        arrays = _read_arrays(description, json_path)
        # Kernels are not saved: fusing the loaded graph finds them again.
        return fuse(_build(description, arrays, make).check()).check()
    except (GraphFileError, GraphError) as e:
        raise GraphFileError(f"{json_path}: {e}") from None
    except RecursionError:
        raise GraphFileError(f"{json_path}: nested too deeply to be a graph") from None


def _read_json(json_path):
    def refuse(constant):
        raise ValueError(f"{constant} is no JSON number (a float attribute writes it "
                         f"{{\"$float\": \"nan\"}})")

    def finite(text):
        if not math.isfinite(float(text)):
            raise ValueError(f"the number {reprlib.repr(text)} overflows a float")
        return float(text)

    def unique(pairs):
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("an object repeats a key")
        return dict(pairs)
    try:
        with open(json_path, encoding="utf-8") as f:
            return json.load(f, parse_constant=refuse, parse_float=finite,
                             object_pairs_hook=unique)
    except (ValueError, RecursionError) as e:  # JSON and Unicode errors are ValueErrors
        raise GraphFileError(f"{json_path} is not a valid graph description (corrupt or "
                             f"truncated JSON: {e})") from e


def _read_arrays(description, json_path) -> dict:
    """The arrays of the .npz named by the description, after checking its hash."""
    name = Field("arrays").text(description["arrays"])
    if os.path.basename(name) != name or not name.endswith(".npz") or \
            os.altsep and os.altsep in name:
        Field("arrays").fail("the file name of the .npz beside the .json", name)
    npz_path = os.path.join(os.path.dirname(json_path), name)
    try:
        with open(npz_path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        raise GraphFileError(f"{json_path} needs its arrays file {npz_path}, which is "
                             f"missing; copy both files together") from None
    if hashlib.sha256(blob).hexdigest() != description["arrays_sha256"]:
        raise GraphFileError(f"{npz_path} does not match {json_path} (its hash differs): "
                             f"it is truncated, corrupt, or from another save")
    try:
        npz = np.load(io.BytesIO(blob), allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with npz:
            return {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise GraphFileError(f"{npz_path} cannot be read as plain arrays (no pickle, no "
                             f"objects): {e}") from e


# =============================================================================
# Building the graph: _build, one reader per part
# =============================================================================

# kind -> (how many values it defines, None for one or more; its required keys; its
# optional keys)
_NODE_RULES = {"input": (1, ("kind", "outputs"), ()),
               "state": (1, ("kind", "outputs", "attrs"), ()),
               "const": (1, ("kind", "outputs"), ()),
               "op": (None, ("kind", "outputs", "op", "attrs"), ("inputs",)),
               "write": (0, ("kind", "outputs", "attrs", "inputs"), ()),
               "output": (0, ("kind", "outputs"), ("inputs",))}


def _build(description, arrays, make=Graph) -> Graph:
    name = Field("name").text(description["name"])
    values, owned, nodes = {}, {}, []
    for i, entry in enumerate(Field("nodes").items(description["nodes"])):
        nodes.append(_read_node(entry, Field("nodes")[i], values, owned, arrays))
    relations = _read_relations(description.get("relations", []), Field("relations"),
                                names([v.shape for n in nodes for v in n.outputs]))
    _check_types(nodes, relations)
    unread = set(arrays) - {f"{n.kind}/{n.outputs[0].name}" for n in nodes
                            if n.kind in ("const", "state")}
    if unread:
        raise GraphFileError(f"arrays: the .npz holds {min(unread)!r}, which no node reads")
    n_outputs = len(nodes[-1].inputs) if nodes and nodes[-1].kind == "output" else 0
    tree = _read_tree(description["out_tree"], Field("out_tree"),
                      (n_outputs, sum(n.kind == "input" for n in nodes)))
    graph = make(name, _own_attributes(nodes), tree)
    graph.owns_state, graph.relations = True, relations
    return graph


def _read_relations(texts, at, known) -> list:
    """The relations between sizes a graph's calls must keep ("B >= 2"), of the names
    its shapes hold."""
    relations = []
    for i, text in enumerate(at.items(texts)):
        try:
            relation = parse_relation(at[i].text(text))
        except ValueError as e:
            raise GraphFileError(f"{at[i].path}: {e}") from None
        unknown = names((relation.left, relation.right)) - known
        if unknown:
            at[i].fail(f"a relation of the graph's sizes ({', '.join(sorted(known)) or 'none'})",
                       text)
        relations.append(relation)
    return relations


def _read_node(entry, at, values, owned, arrays) -> Node:
    kind = at["kind"].one_of(at.record(entry, ("kind",), ("outputs", "op", "attrs",
                                                          "inputs"))["kind"], KINDS)
    count, required, optional = _NODE_RULES[kind]
    at.record(entry, required, optional)
    inputs = []
    for j, name in enumerate(at["inputs"].items(entry.get("inputs", []))):
        if not isinstance(name, str) or name not in values:
            at["inputs"][j].fail("the name of a value defined by an earlier node", name)
        inputs.append(values[name])
    attrs, payload = {}, None
    if kind == "op":
        record = RECORDS.get(entry["op"]) if isinstance(entry["op"], str) else None
        if record is None:
            at["op"].fail("a registered op (import the module that defines it before "
                          "loading)", entry["op"])
        attrs = _read_op_attrs(record, entry["attrs"], at["attrs"])
        low, high = record.arity
        takes = low if low == high else f"{low}..{high}"
        at["inputs"].expect(len(inputs), low <= len(inputs) <= high,
                            f"{takes} inputs for {record.name}")
    elif kind in ("state", "write"):
        attrs = _read_slot_attrs(entry["attrs"], at, kind, len(inputs), owned)
    defined = at["outputs"].items(entry["outputs"])
    at["outputs"].expect(defined, len(defined) == count or count is None and defined,
                         f"{'one or more' if count is None else count} values")
    outputs = [_read_value(v, at["outputs"][j], values) for j, v in enumerate(defined)]
    if kind in ("const", "state"):
        payload = _payload(kind, outputs[0], attrs, arrays, at, owned)
    return Node(kind, entry.get("op"), inputs, attrs, outputs, payload)


def _check_types(nodes, relations=()):
    """Each op node's declared results against its op's rule (OpRecord.result_types:
    forward on zeros of the declared inputs), one node at a time: the kernels and the
    replay code rely on the declared types. A 0-d constant goes in as its value, which
    numpy 1.x casts by (float32 [3] * 1e300 is float64 there, * 0.0 float32)."""
    scalars = {n.outputs[0].name: n.payload for n in nodes
               if n.kind == "const" and n.outputs[0].shape == ()}
    given = {d.args[0] for n in nodes if n.kind == "input" for d in n.outputs[0].shape
             if isinstance(d, Size) and d.op == "name"}
    for i, node in enumerate(nodes):  # every size is one the inputs' shapes give
        unknown = names([node.attrs] + [v.shape for v in node.outputs]) - given
        if unknown:
            raise GraphFileError(f"nodes[{i}] ({format_node(node)}): the size "
                                 f"{min(unknown)} is no size of an input's shape")
    # Symbolic sizes: checked at two numbers for each name, so that no size passes
    # for another (a slice of 3 declared of length B, where B stood for 3).
    for stand_in in _stand_ins(nodes, relations, 2) if given else [{}]:
        _check_types_at(nodes, scalars, stand_in)


def _check_types_at(nodes, scalars, stand_in):
    for i, node in enumerate(nodes):
        declared = [(v.shape, v.dtype) for v in node.outputs]
        inputs = [scalars.get(v.name, v) for v in node.inputs]
        at = f" at {', '.join(f'{k}={n}' for k, n in stand_in.items())}" if stand_in else ""
        declared = [(evaluate(shape, stand_in), dtype) for shape, dtype in declared]
        if any(d < 0 for shape, _ in declared for d in shape):
            raise GraphFileError(f"nodes[{i}] ({format_node(node)}){at}: a size is negative")
        try:
            if stand_in:
                inputs = [v if isinstance(v, np.ndarray) else  # zeros that take no memory
                          np.broadcast_to(np.zeros((), v.dtype), evaluate(v.shape, stand_in))
                          for v in inputs]
                node = Node(node.kind, node.op, node.inputs, evaluate(node.attrs, stand_in),
                            node.outputs, node.payload)
            made = node.record.result_types(node.attrs, inputs) if node.kind == "op" \
                else declared
        except Exception as e:  # noqa: BLE001 - any failure of forward refuses the file
            made = f"raises {type(e).__name__}: {e}"
        if made != declared:
            made = made if isinstance(made, str) else "makes " + _types(made)
            given = _types((evaluate(v.shape, stand_in), v.dtype) for v in node.inputs)
            raise GraphFileError(f"nodes[{i}] ({format_node(node)}){at}: {node.op} of "
                                 f"{given} {made}, where the file declares {_types(declared)}")


def _stand_ins(nodes, relations, count: int) -> list:
    """Up to `count` bindings of the graph's symbolic sizes to numbers, each name the
    first number that keeps the relations of the names bound so far (T <= 16): primes
    that no fixed size of the graph has and no other binding uses first, then any
    number from 1 (a size the relations bound to a few values). A file whose relations
    hold at no number tried is refused: no call could run it."""
    used = sorted(names([v.shape for n in nodes for v in n.outputs]))
    fixed = {d for n in nodes for v in n.outputs for d in v.shape if type(d) is int}
    primes = [p for p in range(3, 1000) if all(p % q for q in range(2, int(p**0.5) + 1))]
    bindings: list = []
    for _ in range(count):
        taken = {n for b in bindings for n in b.values()}
        tried = [p for p in primes if p not in fixed | taken] + list(range(1, 1000))
        chosen: dict = {}
        for name in used:
            for p in (p for p in tried if p not in chosen.values()):
                chosen[name] = p
                if all(r.holds(chosen) for r in relations
                       if names((r.left, r.right)) <= set(chosen)):
                    break
        if any(not r.holds(chosen) for r in relations):
            if bindings:  # the relations leave one number: checked there alone
                break
            raise GraphFileError(f"relations: {', '.join(map(str, relations))} hold at no "
                                 f"sizes tried (the last {chosen}); no call could run it")
        bindings.append(chosen)
    return bindings


def _types(types) -> str:
    return ", ".join(type_str(shape, dtype) for shape, dtype in types) or "nothing"


def _read_value(entry, at, values) -> Value:
    at.record(entry, ("name", "shape", "dtype"), ("place",))
    name = at["name"].name(entry["name"])
    if name in values:
        at["name"].fail("a name no earlier node defines", name)
    place = at["place"].text(entry["place"]) if "place" in entry else None
    values[name] = Value(name, at["shape"].shape(entry["shape"]),
                         at["dtype"].dtype(entry["dtype"]), place)
    return values[name]


# The inputs a write takes, by the field it writes: [target, source], [target] (a
# .grad cleared to None) or [source] (an attribute).
_WRITE_INPUTS = {"data": (2,), "grad": (1, 2), "attr": (1,)}


def _read_slot_attrs(attrs, at, kind, n_inputs, owned) -> dict:
    """The attrs of a state or write node: which slot of a Variable it reads or writes."""
    here = at["attrs"]
    here.record(attrs, ("field",), ("name", "of", "in_place"))
    field = here["field"].one_of(attrs["field"], _WRITE_INPUTS)
    keys = {"data": (), "grad": ("of",) * (kind == "state"), "attr": ("name", "of")}[field]
    # A data write may say that the traced code overwrote the array itself.
    here.record(attrs, ("field", *keys), ("in_place",) * (kind == "write" and field == "data"))
    if "in_place" in attrs:
        here["in_place"].expect(attrs["in_place"], attrs["in_place"] is True, "true")
    if field == "attr":
        here["name"].attribute(attrs["name"])
        here["of"].attribute(attrs["of"])
    elif keys:  # a state read from the .grad of a data state read earlier
        here["of"].expect(attrs["of"], isinstance(attrs["of"], str) and attrs["of"] in owned,
                          "the name of a data state defined earlier")
    if kind == "write":
        expected = " or ".join(map(str, _WRITE_INPUTS[field]))
        at["inputs"].expect(n_inputs, n_inputs in _WRITE_INPUTS[field],
                            f"{expected} values for a {field} write")
    return dict(attrs)


def _payload(kind, value, attrs, arrays, at, owned):
    key = f"{kind}/{value.name}"
    array = arrays.get(key)
    if array is None or array.shape != value.shape or array.dtype != value.dtype:
        got = "nothing" if array is None else f"{array.dtype}{list(array.shape)}"
        raise GraphFileError(f"{at.path}: the .npz holds {got} under {key!r} where the "
                             f"graph says {value.type}")
    if kind == "const":
        return array
    if attrs["field"] in ("data", "attr"):
        owned[value.name] = Variable(array, name=value.name)
        return DataSlot(owned[value.name])
    owner = owned[attrs["of"]]
    owner.grad = Variable(array)
    return GradSlot(owner)


def _read_tree(tree, at, n_outputs):
    """The structure of the returned value (see the format above), checked; n_outputs:
    the number of outputs and of inputs."""
    kind, part = at.items(tree, 2)
    kind = at[0].one_of(kind, ("var", "array", "input", "tuple", "list", "dict", "static"))
    if kind in ("var", "array", "input"):
        return [kind, at[1].integer(part, 0, n_outputs[kind == "input"] - 1)]
    if kind in ("tuple", "list"):
        return [kind, [_read_tree(t, at[1][i], n_outputs) for i, t in
                       enumerate(at[1].items(part))]]
    if kind == "dict":
        pairs = [at[1][i].items(pair, 2) for i, pair in enumerate(at[1].items(part))]
        return [kind, [[at[1][i][0].expect(k, isinstance(k, str), "text"),
                        _read_tree(t, at[1][i][1], n_outputs)] for i, (k, t) in enumerate(pairs)]]
    return [kind, read_attr(part, at[1])]  # "static": a value encoded as an attribute


def _types_in(tree):
    """The names of the Python types an output tree rebuilds (lowering.container)."""
    if tree[0] not in ("tuple", "list", "dict"):
        return []
    subtrees = [t[1] if tree[0] == "dict" else t for t in tree[1]]
    return [t.__name__ for t in tree[2:3]] + [n for t in subtrees for n in _types_in(t)]


def _own_attributes(nodes):
    # With no object around, a value carried in an attribute (LSTM.h) lives in the
    # loaded graph's own Variable: its attribute write becomes a write to that state.
    states = {(n.attrs["of"], n.attrs["name"]): n for n in nodes
              if n.kind == "state" and n.attrs.get("field") == "attr"}
    result = []
    for node in nodes:
        key = (node.attrs.get("of"), node.attrs.get("name"))
        if node.kind == "write" and node.attrs.get("field") == "attr" and key in states:
            state = states[key]
            node = Node("write", inputs=[state.outputs[0], node.inputs[0]],
                        attrs={"field": "data"})
        result.append(node)
    for state in states.values():
        state.attrs = {"field": "data"}
    return result

