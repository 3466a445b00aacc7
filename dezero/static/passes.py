"""Passes: small functions from StaticGraph to StaticGraph.

passes.py sits after the tracer and before the backends, and imports only the IR
(ir.py) besides numpy and the debug log. Each pass returns a new graph and never
edits the old one's nodes or values (the old graph stays printable), and reads op
facts from the Function classes (`random`, `commutative`, `neutral`,
`neutral_attrs`), never from lists of op names. Fusion of elementwise chains (ops
with `cpp`) will be one more pass of the same shape.

    graph = optimize(graph)   # dce, cse, fold, simplify, cse, dce; each then check()
"""
from __future__ import annotations

import keyword

import numpy as np

from dezero import cuda
from dezero.static import debugging
from dezero.static.ir import (
    Node,
    StaticGraph,
    Value,
    as_result_array,
    attrs_key,
    identifier,
    letter_name,
    make_function,
    op_fact,
)

# =============================================================================
# Helpers: remap, is_random
# =============================================================================


def _remap(node: Node, mapping: dict) -> Node:
    """A copy of node whose inputs are replaced through mapping (Value -> Value)."""
    inputs = [mapping.get(id(v), v) for v in node.inputs]
    return Node(node.kind, node.op, inputs, node.attrs, node.outputs, node.payload)


def _is_random(node: Node) -> bool:
    return node.kind == "op" and node.function_class.random


# =============================================================================
# Passes: dce, cse, fold, optimize
# =============================================================================


def dce(graph: StaticGraph) -> StaticGraph:
    """Dead-code elimination: drop ops and consts that no output or write needs.

    Roots are the output, the state writes and random ops (a draw advances the
    random state, so removing one would change every later draw).
    """
    live: set[int] = set()
    kept = []
    for node in reversed(graph.nodes):
        needed = node.kind in ("input", "state", "write", "output") or _is_random(node) \
            or any(id(v) in live for v in node.outputs)
        if needed:
            kept.append(node)
            live.update(id(v) for v in node.inputs)
    kept.reverse()
    debugging.log(3, f"dce {graph.name}: removed {len(graph.nodes) - len(kept)} nodes")
    return graph.with_nodes(kept)


def cse(graph: StaticGraph) -> StaticGraph:
    """Common-subexpression elimination: one node per (op, attrs, inputs); equal small
    constants merge too. Random ops are never merged (each draw is its own)."""
    seen: dict = {}
    mapping: dict[int, Value] = {}
    nodes = []
    for node in graph.nodes:
        node = _remap(node, mapping)
        key = None
        if node.kind == "const" and node.payload.size <= 64:
            array = cuda.as_numpy(node.payload)
            key = ("const", array.dtype.str, array.shape, array.tobytes())
        elif node.kind == "op" and not _is_random(node):
            attrs = attrs_key(node.attrs)
            names = [id(v) for v in node.inputs]
            if node.function_class.commutative:
                names.sort()
            key = None if attrs is None else (node.op, attrs, tuple(names))
        if key is not None and key in seen:
            for old, new in zip(node.outputs, seen[key].outputs):
                mapping[id(old)] = new
            continue
        if key is not None:
            seen[key] = node
        nodes.append(node)
    debugging.log(3, f"cse {graph.name}: merged {len(graph.nodes) - len(nodes)} nodes")
    return graph.with_nodes(nodes)


# Folding never makes a constant larger than this, unless an input already was.
FOLD_LIMIT = 1 << 16


def fold(graph: StaticGraph) -> StaticGraph:
    """Constant folding: an op whose inputs are all constants becomes a constant.

    Never folds captured state (it is read afresh at every replay) or random ops.
    """
    consts: dict[int, Node] = {}
    head, new_consts, rest = [], [], []
    mapping: dict[int, Value] = {}
    for node in graph.nodes:
        node = _remap(node, mapping)
        if node.kind == "const":
            consts[id(node.outputs[0])] = node
            head.append(node)
            continue
        if node.kind == "op" and len(node.outputs) == 1 and not _is_random(node) and \
                all(id(v) in consts for v in node.inputs):
            folded = _evaluate(node, [consts[id(v)].payload for v in node.inputs])
            if folded is not None:
                const = Node("const", outputs=node.outputs, payload=folded)
                consts[id(node.outputs[0])] = const
                new_consts.append(const)
                continue
        (head if node.kind in ("input", "state") else rest).append(node)
    debugging.log(3, f"fold {graph.name}: folded {len(new_consts)} nodes")
    return graph.with_nodes(head + new_consts + rest)


def _evaluate(node: Node, arrays):
    value = node.outputs[0]
    limit = max([FOLD_LIMIT] + [a.size for a in arrays])
    if int(np.prod(value.shape)) > limit:
        return None
    try:
        y = as_result_array(make_function(node).forward(*arrays))
    except Exception:  # noqa: BLE001 - left to fail at run time, with the node's line
        return None
    if y.shape != value.shape or y.dtype != value.dtype:
        return None
    # A forward may return a view of a constant (reshape, broadcast_to): own it.
    return y.copy()


def simplify(graph: StaticGraph) -> StaticGraph:
    """Algebraic simplification: drop ops that return one of their inputs unchanged
    (the class's `neutral` operand or `neutral_attrs`: x * 1, x / 1, x - 0, x ** 1),
    where that input already has the result's shape and dtype (so nothing is
    broadcast or cast)."""
    consts = {id(n.outputs[0]): n.payload for n in graph.nodes if n.kind == "const"}
    mapping: dict[int, Value] = {}
    nodes = []
    for node in graph.nodes:
        node = _remap(node, mapping)
        keep = _unchanged_input(node, consts) if node.kind == "op" and \
            len(node.outputs) == 1 else None
        if keep is not None and (keep.shape, keep.dtype) == (node.outputs[0].shape,
                                                             node.outputs[0].dtype):
            mapping[id(node.outputs[0])] = keep
            continue
        nodes.append(node)
    debugging.log(3, f"simplify {graph.name}: removed {len(graph.nodes) - len(nodes)} nodes")
    return graph.with_nodes(nodes)


def _unchanged_input(node: Node, consts: dict) -> Value | None:
    """The input an op node returns unchanged, by its class's facts, or None."""
    cls = node.function_class
    attrs = op_fact(cls, "neutral_attrs")
    if attrs and len(node.inputs) == 1 and all(
            type(node.attrs.get(k)) in (int, float) and node.attrs[k] == v
            for k, v in attrs.items()):
        return node.inputs[0]
    for i, neutral in (op_fact(cls, "neutral") or {}).items():
        const = consts.get(id(node.inputs[i])) if len(node.inputs) == 2 else None
        if const is not None and bool((const == neutral).all()):
            return node.inputs[1 - i]
    return None


def rename(graph: StaticGraph) -> StaticGraph:
    """Give computed values and constants the names a, b, c ... in node order again,
    closing the gaps the other passes leave (inputs and state keep their names)."""
    used = {identifier(graph.name, "graph")}
    used.update(n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state"))
    n = 0
    mapping: dict[int, Value] = {}
    nodes = []
    for node in graph.nodes:
        node = _remap(node, mapping)
        if node.kind in ("const", "op"):
            for value in node.outputs:
                while letter_name(n) in used or keyword.iskeyword(letter_name(n)):
                    n += 1
                mapping[id(value)] = Value(letter_name(n), value.shape, value.dtype)
                n += 1
            node = Node(node.kind, node.op, node.inputs, node.attrs,
                        [mapping[id(v)] for v in node.outputs], node.payload)
        nodes.append(node)
    return graph.with_nodes(nodes)


PIPELINE = (dce, cse, fold, simplify, cse, dce)


def optimize(graph: StaticGraph, passes=PIPELINE) -> StaticGraph:
    """Run the passes in order, checking the IR after each; then rename the values."""
    for p in passes:
        if debugging.LEVEL >= 5:
            debugging.log(5, f"before {p.__name__}:\n{graph}")
        graph = p(graph).check()
        debugging.log(3, f"check {graph.name} after {p.__name__}: ok")
    graph = rename(graph).check()
    if debugging.LEVEL >= 5:
        debugging.log(5, f"after all passes:\n{graph}")
    return graph
