"""Saving and loading a StaticGraph: a JSON description plus an .npz of arrays.

Beside ir.py (StaticGraph.save / StaticGraph.load call these). A saved graph runs
with only dezero installed, without the Python function that produced it: its
captured state is saved with it and owned by the loaded graph.

    graph.save("step.json"); g = dezero.static.load("step.json"); g(x, t); g.state["W"]

File format, version 1
----------------------
`NAME.json` is one JSON object:

    {"format": "dezero.static-graph", "version": 1,
     "name": "train_step",                  # the traced function's name
     "arrays": "NAME.npz", "arrays_sha256": "<hex digest of the .npz bytes>",
     "nodes": [NODE, ...],                  # topological order, as printed
     "out_tree": TREE}

    NODE = {"kind": "input" | "state" | "const" | "op" | "write" | "output",
            "op": "matmul",                 # op nodes: the registered Function name
            "inputs": ["x", "W"],           # names of values defined by earlier nodes
            "attrs": {"axis": 1},           # encoded as below
            "outputs": [{"name": "a", "shape": [32, 10], "dtype": "float32"}]}

State nodes have attrs {"field": "data"} (the Variable's .data), {"field": "grad",
"of": "W"} (the .grad of data state W) or {"field": "attr", "name": "h", "of":
"LSTM"} (a Variable an object kept in an attribute between calls). Write nodes
have inputs [target, source] (or [target] for a .grad cleared to None) and attrs
{"field": "data" | "grad"}, or inputs [source] and the "attr" attrs above.

`NAME.npz` (numpy's savez, read with allow_pickle=False) holds "const/<name>" for
every const node and "state/<name>" for every state node's value at save time.

TREE rebuilds what the function returned from the flat outputs:
["var", i] a Variable of output i, ["array", i] the array itself, ["tuple", [TREE..]],
["list", [TREE..]], ["dict", [[key, TREE]..]], ["static", value] a JSON value.

Attribute values: JSON null/bool/int/str/list as themselves; a float as itself, or
{"$float": "inf" | "-inf" | "nan"}; {"$tuple": [...]}, {"$slice": [start, stop, step]},
{"$ellipsis": true}, {"$dtype": "float32"}, {"$scalar": value, "dtype": "float32"},
{"$array": [...], "dtype": "int64", "shape": [...]}, {"$dict": [[key, value], ...]}.

Inputs of a loaded graph are given positionally, in the order of `graph.input_names`
(the traced function's array arguments, nested ones flattened in order). A loaded
graph owns Variables for its "data" and "attr" state (`graph.state`), and data
writes update them; "attr" writes have no object to set in a loaded graph, so
values carried in attributes do not carry over between its calls.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import zipfile

import numpy as np

from dezero import cuda
from dezero.core import OPS, Variable
from dezero.files import atomic_file
from dezero.static.ir import DataSlot, GradSlot, Node, StaticGraph, Value

FORMAT = "dezero.static-graph"
VERSION = 1

# =============================================================================
# Attribute encoding: encode_attr, decode_attr
# =============================================================================


def encode_attr(value):
    """A JSON-compatible encoding of an op attribute (raises TypeError if impossible)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, np.integer):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, tuple):
        return {"$tuple": [encode_attr(v) for v in value]}
    if isinstance(value, list):
        return [encode_attr(v) for v in value]
    if isinstance(value, slice):
        return {"$slice": [encode_attr(value.start), encode_attr(value.stop),
                           encode_attr(value.step)]}
    if value is Ellipsis:
        return {"$ellipsis": True}
    if isinstance(value, np.dtype) or (isinstance(value, type) and
                                       issubclass(value, np.generic)):
        return {"$dtype": np.dtype(value).name}
    if isinstance(value, np.generic):
        return {"$scalar": value.item(), "dtype": value.dtype.name}
    if isinstance(value, cuda.array_types):
        array = cuda.as_numpy(value)
        return {"$array": array.tolist(), "dtype": array.dtype.name,
                "shape": list(array.shape)}
    if isinstance(value, dict):
        return {"$dict": [[encode_attr(k), encode_attr(v)] for k, v in value.items()]}
    raise TypeError(f"cannot encode an attribute of type {type(value).__name__}: {value!r}")


def decode_attr(value):
    if isinstance(value, list):
        return [decode_attr(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$float" in value:
        return float(value["$float"])
    if "$tuple" in value:
        return tuple(decode_attr(v) for v in value["$tuple"])
    if "$slice" in value:
        return slice(*(decode_attr(v) for v in value["$slice"]))
    if "$ellipsis" in value:
        return Ellipsis
    if "$dtype" in value:
        return np.dtype(value["$dtype"])
    if "$scalar" in value:
        return np.dtype(value["dtype"]).type(value["$scalar"])
    if "$array" in value:
        return np.array(value["$array"], dtype=value["dtype"]).reshape(value["shape"])
    if "$dict" in value:
        return {decode_attr(k): decode_attr(v) for k, v in value["$dict"]}
    raise ValueError(f"unknown attribute encoding {value!r}")


def _tree_to_json(tree):
    kind = tree[0]
    if kind in ("var", "array"):
        return [kind, tree[1]]
    if kind in ("tuple", "list"):
        return [kind, [_tree_to_json(t) for t in tree[1]]]
    if kind == "dict":
        if not all(isinstance(k, str) for k, _ in tree[1]):
            raise TypeError("only a dict with str keys can be saved as a graph output")
        return [kind, [[k, _tree_to_json(t)] for k, t in tree[1]]]
    return ["static", tree[1]]


def _tree_from_json(tree):
    kind = tree[0]
    if kind in ("tuple", "list"):
        return (kind, [_tree_from_json(t) for t in tree[1]])
    if kind == "dict":
        return (kind, [(k, _tree_from_json(t)) for k, t in tree[1]])
    return (kind, tree[1])


# =============================================================================
# Files: save, load, GraphFileError
# =============================================================================


class GraphFileError(ValueError):
    """A saved graph cannot be read: corrupt, truncated, mismatched or too new."""


def _paths(path):
    stem = path[:-5] if path.endswith(".json") else path
    return stem + ".json", stem + ".npz"


def save(graph: StaticGraph, path: str) -> None:
    """Write `path` (.json added if missing) and the .npz beside it."""
    json_path, npz_path = _paths(os.fspath(path))
    arrays, nodes = {}, []
    for node in graph.nodes:
        entry = {"kind": node.kind,
                 "outputs": [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name}
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
    description = {"format": FORMAT, "version": VERSION, "name": graph.name,
                   "arrays": os.path.basename(npz_path),
                   "arrays_sha256": hashlib.sha256(blob).hexdigest(),
                   "nodes": nodes, "out_tree": _tree_to_json(graph.out_tree)}
    text = json.dumps(description, indent=1, allow_nan=False)
    directory = os.path.dirname(os.path.abspath(json_path))
    os.makedirs(directory, exist_ok=True)
    # Arrays first: the description names their hash, so a crash between the two
    # renames leaves an old description that rejects the new arrays, never a mix.
    with atomic_file(npz_path) as f:
        f.write(blob)
    with atomic_file(json_path, "w") as f:
        f.write(text)


def load(path: str) -> StaticGraph:
    """Read a graph saved by save(); it owns its state (graph.state) and runs standalone."""
    _import_ops()
    json_path, _ = _paths(os.fspath(path))
    try:
        with open(json_path, encoding="utf-8") as f:
            description = json.load(f)
    except json.JSONDecodeError as e:
        raise GraphFileError(f"{json_path} is not a valid graph description (corrupt or "
                             f"truncated JSON: {e})") from e
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise GraphFileError(f"{json_path} is not a dezero static graph file "
                             f"(no \"format\": \"{FORMAT}\")")
    version = description.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise GraphFileError(f"{json_path} has format version {version}; this dezero reads "
                             f"versions up to {VERSION}: upgrade dezero to load it")
    npz_path = os.path.join(os.path.dirname(json_path), description["arrays"])
    try:
        with open(npz_path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        raise GraphFileError(f"{json_path} needs its arrays file {npz_path}, which is "
                             f"missing; copy both files together") from None
    if hashlib.sha256(blob).hexdigest() != description.get("arrays_sha256"):
        raise GraphFileError(f"{npz_path} does not match {json_path} (its hash differs): "
                             f"it is truncated, corrupt, or from another save")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        return _build(description, arrays).check()
    except (KeyError, IndexError, TypeError, ValueError, zipfile.BadZipFile) as e:
        if isinstance(e, GraphFileError):
            raise
        raise GraphFileError(f"{json_path} is corrupt: {type(e).__name__}: {e}") from e


def _build(description, arrays) -> StaticGraph:
    values: dict[str, Value] = {}
    owned: dict[str, Variable] = {}
    nodes = []
    for entry in description["nodes"]:
        outputs = [Value(o["name"], o["shape"], o["dtype"]) for o in entry["outputs"]]
        inputs = [values[name] for name in entry.get("inputs", ())]
        attrs = entry.get("attrs", {})
        kind = entry["kind"]
        payload = None
        if kind == "op":
            if entry["op"] not in OPS:
                raise GraphFileError(f"op {entry['op']!r} is not registered; import the "
                                     f"module that defines it before loading")
            attrs = {k: decode_attr(v) for k, v in attrs.items()}
        elif kind in ("const", "state"):
            array = arrays[f"{kind}/{outputs[0].name}"]
            if array.shape != outputs[0].shape or array.dtype != outputs[0].dtype:
                raise GraphFileError(f"array {outputs[0].name} in the .npz is "
                                     f"{array.dtype}{list(array.shape)}, the graph says "
                                     f"{outputs[0].type}")
            if kind == "const":
                payload = array
            elif attrs.get("field", "data") in ("data", "attr"):
                owned[outputs[0].name] = Variable(array, name=outputs[0].name)
                payload = DataSlot(owned[outputs[0].name])
            else:
                owner = owned[attrs["of"]]
                owner.grad = Variable(array)
                payload = GradSlot(owner)
        nodes.append(Node(kind, entry.get("op"), inputs, attrs, outputs, payload))
        values.update((v.name, v) for v in outputs)
    graph = StaticGraph(description["name"], _own_attributes(nodes),
                        _tree_from_json(description["out_tree"]))
    graph.owns_state = True
    return graph


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


def _import_ops():
    # Op classes register themselves on import; load the modules that define them.
    import importlib
    import importlib.util
    for module in ("dezero.functions", "dezero.functions_conv"):
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
