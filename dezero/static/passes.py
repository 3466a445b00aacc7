"""Passes: small functions from Graph to Graph.

passes.py sits after the tracer and before the backends, and imports only the IR
(ir.py and the names below it) besides numpy, the op records and the debug log. Each
pass returns a new graph and never edits the old one's nodes or values (the old graph
stays printable), and reads op facts from each node's record (`node.record.random`,
`collective`, `commutative`, `neutral`, `neutral_attrs`, `elementwise`), never from
lists of op names. The last pass, fuse, lays
kernel groups (ir.Group) over the node list for codegen.py and the kernel backends.

    graph = optimize(graph)   # dce, cse, fold, simplify, split_epilogues, split_parts,
                              # cse, dce, rename, fuse; each then check()
"""
from __future__ import annotations

import heapq
import keyword
import os

import numpy as np

from dezero import cuda
from dezero.errors import GraphError
from dezero.op_record import RECORDS, as_result_array, broadcast_shapes
from dezero.static import debugging, horizontal
from dezero.static.ir import (
    Graph,
    Group,
    Node,
    Value,
    attrs_key,
    format_attr,
    format_node,
    row_shapes,
)
from dezero.static.names import identifier, letter_name
from dezero.static.sizes import Size, count, has_size, positive

# =============================================================================
# Helpers: remap, is_pinned
# =============================================================================


def _remap(node: Node, mapping: dict) -> Node:
    """A copy of node whose inputs are replaced through mapping (Value -> Value)."""
    inputs = [mapping.get(id(v), v) for v in node.inputs]
    return Node(node.kind, node.op, inputs, node.attrs, node.outputs, node.payload)


def _is_pinned(node: Node) -> bool:
    """A random or collective op: it must run as recorded, each call on its own (a draw
    advances the random state; every process must meet a collective, in order)."""
    return node.kind == "op" and (node.record.random or node.record.collective)


# =============================================================================
# Passes: dce, cse, fold, optimize
# =============================================================================


def dce(graph: Graph) -> Graph:
    """Dead-code elimination: drop ops and consts that no output or write needs.

    Roots are the output, the state writes, random ops (a draw advances the
    random state, so removing one would change every later draw) and collectives
    (the other processes wait for this one).
    """
    live: set[int] = set()
    kept = []
    for node in reversed(graph.nodes):
        needed = node.kind in ("input", "state", "write", "output") or _is_pinned(node) \
            or any(id(v) in live for v in node.outputs)
        if needed:
            kept.append(node)
            live.update(id(v) for v in node.inputs)
    kept.reverse()
    debugging.log(3, f"dce {graph.name}: removed {len(graph.nodes) - len(kept)} nodes")
    return graph.with_nodes(kept)


def cse(graph: Graph) -> Graph:
    """Common-subexpression elimination: one node per (op, attrs, inputs); equal
    constants of up to FOLD_LIMIT elements merge too (an attention's causal mask, made
    by each layer). Random and collective ops are never merged (each draw and each
    exchange is its own)."""
    seen: dict = {}
    mapping: dict[int, Value] = {}
    nodes = []
    for node in graph.nodes:
        node = _remap(node, mapping)
        key = None
        if node.kind == "const" and node.payload.size <= FOLD_LIMIT:
            array = cuda.as_numpy(node.payload)
            key = ("const", array.dtype.str, array.shape, array.tobytes())
        elif node.kind == "op" and not _is_pinned(node):
            attrs = attrs_key(node.attrs)
            names = [id(v) for v in node.inputs]
            if node.record.commutative:
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


def fold(graph: Graph) -> Graph:
    """Constant folding: an op whose inputs are all constants becomes a constant.

    Never folds captured state (it is read afresh at every replay), random ops or
    collectives.
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
        if node.kind == "op" and len(node.outputs) == 1 and not _is_pinned(node) and \
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
    if has_size(value.shape) or int(np.prod(value.shape)) > limit:
        return None
    try:
        y = as_result_array(node.record.function(node.attrs).forward(*arrays))
    except Exception:  # noqa: BLE001 - left to fail at run time, with the node's line
        return None
    if y.shape != value.shape or y.dtype != value.dtype:
        return None
    # A forward may return a view of a constant (reshape, broadcast_to): own it.
    return y.copy()


def simplify(graph: Graph) -> Graph:
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
    record = node.record
    attrs = record.neutral_attrs
    if attrs and len(node.inputs) == 1 and all(
            type(node.attrs.get(k)) in (int, float) and node.attrs[k] == v
            for k, v in attrs.items()):
        return node.inputs[0]
    for i, neutral in (record.neutral or {}).items():
        const = consts.get(id(node.inputs[i])) if len(node.inputs) == 2 else None
        if const is not None and bool((const == neutral).all()):
            return node.inputs[1 - i]
    return None


def split_epilogues(graph: Graph) -> Graph:
    """An op whose forward ends with an elementwise op on its last input (the class's
    `epilogue`: linear(x, W, b) is linear(x, W) then add(y, b)) becomes those two
    nodes, computing what forward does in the same order; fuse then joins the
    elementwise one to the ops after it, one pass over the matmul's result. Only
    where every input and the result share one dtype (no node promotes)."""
    used = {v.name for n in graph.nodes for v in n.outputs}
    nodes = []
    for node in graph.nodes:
        split = node.record.epilogue if node.kind == "op" else None
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if split is None or out is None or len(node.inputs) != node.record.arity[1] or \
                any(v.dtype != out.dtype for v in node.inputs):
            nodes.append(node)
            continue
        op, shape = split(*(v.shape for v in node.inputs))
        name = f"{out.name}_{node.op}"
        while name in used:
            name += "_"
        used.add(name)
        first = Value(name, shape, out.dtype)
        nodes += [Node("op", node.op, node.inputs[:-1], node.attrs, [first]),
                  Node("op", op, [first, node.inputs[-1]], {}, node.outputs)]
    debugging.log(3, f"split_epilogues {graph.name}: split {len(nodes) - len(graph.nodes)} "
                     f"nodes")
    return graph.with_nodes(nodes)


def split_parts(graph: Graph) -> Graph:
    """An op whose class states its `parts` (softmax, log_softmax,
    softmax_cross_entropy) becomes those steps, which compute what its forward does
    in the same order, where every step can join a kernel (fusion_refusal): fuse then
    makes them one reduction kernel with the elementwise ops around them (on the GPU
    a row kernel, and a ReductionKernel for a loss's mean over the rows)."""
    used = {v.name for n in graph.nodes for v in n.outputs}
    nodes, consts = [], []  # a graph's constants come before its ops
    for node in graph.nodes:
        split = _split(node, used) if node.kind == "op" and node.record.parts is not None \
            else None
        consts += [n for n in split or () if n.kind == "const"]
        nodes += [n for n in split if n.kind == "op"] if split else [node]
    head = sum(n.kind in ("input", "state", "const") for n in nodes)
    debugging.log(3, f"split_parts {graph.name}: {len(nodes) - len(graph.nodes)} more nodes")
    return graph.with_nodes(nodes[:head] + consts + nodes[head:])


def _split(node: Node, used: set) -> list | None:
    """The nodes of node's parts, or None where one of them could not join a kernel."""
    steps, results = node.record.parts([v.shape for v in node.inputs], node.attrs)
    dtype = node.outputs[0].dtype
    values = dict(zip(node.record.params, node.inputs))
    named = dict(zip(results, node.outputs))
    nodes = []

    def fresh(name):
        name = f"{node.outputs[0].name}_{name}"
        while name in used:
            name += "_"
        used.add(name)
        return name

    for name, op, inputs, attrs in steps:
        for i in inputs:
            if isinstance(i, Size):  # a number of sizes (1/B): computed at each replay
                values[i] = Value(fresh("c"), (), dtype)
                nodes.append(Node("op", "size_number", [node.inputs[0]],
                                  {"value": i, "dtype": dtype.name}, [values[i]]))
            elif not isinstance(i, str):  # a number: a constant of the result's dtype
                values[i] = Value(fresh("c"), (), dtype)
                nodes.append(Node("const", outputs=[values[i]], payload=np.asarray(i, dtype)))
        shapes = [values[i].shape for i in inputs]
        shape = _reduced_shape(shapes[0], attrs["axis"], attrs["keepdims"]) \
            if "axis" in attrs else (shapes[0][0], 1) if RECORDS[op].reduce == "pick" \
            else broadcast_shapes(*shapes)
        out = named.get(name) or Value(fresh(name), shape, dtype)
        part = Node("op", op, [values[i] for i in inputs], attrs, [out])
        if out.shape != shape or fusion_refusal(part) is not None:
            return None
        values[name] = out
        nodes.append(part)
    return nodes


def device_reads(graph: Graph) -> Graph:
    """A node whose op reads its inputs only for their device (record.device_only: a
    number of sizes, 1/B) reads the graph's first input instead of the value it was
    given: equal ones merge in cse, and none waits for a kernel (a kernel's result,
    scaled by it, could not join that kernel)."""
    first = graph.input_values[:1]
    if not first or not any(n.kind == "op" and n.record.device_only and n.inputs != first
                            for n in graph.nodes):
        return graph
    return graph.with_nodes([Node(n.kind, n.op, first, n.attrs, n.outputs, n.payload)
                             if n.kind == "op" and n.record.device_only else n
                             for n in graph.nodes])


def _reduced_shape(shape: tuple, axis, keepdims: bool) -> tuple:
    axes = range(len(shape)) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    axes = {a % len(shape) for a in axes} if shape else ()  # numpy reduces a 0-d over 0, -1
    return tuple(1 if d in axes else n for d, n in enumerate(shape)
                 if keepdims or d not in axes)


def rename(graph: Graph) -> Graph:
    """Give computed values and constants the names a, b, c ... in node order again,
    closing the gaps the other passes leave (inputs and state keep their names)."""
    used = {identifier(graph.name, "graph")}
    used.update(n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state"))
    used.update(n.outputs[0].label.split(".")[0] for n in graph.of_kind("state"))  # m of m.W
    n = 0
    mapping: dict[int, Value] = {}
    nodes, renamed = [], {}
    for old in graph.nodes:
        node = _remap(old, mapping)
        if node.kind in ("const", "op"):
            for value in node.outputs:
                while letter_name(n) in used or keyword.iskeyword(letter_name(n)):
                    n += 1
                mapping[id(value)] = Value(letter_name(n), value.shape, value.dtype)
                n += 1
            node = Node(node.kind, node.op, node.inputs, node.attrs,
                        [mapping[id(v)] for v in node.outputs], node.payload)
        nodes.append(node)
        renamed[id(old)] = node
    return _carry_groups(graph, graph.with_nodes(nodes), renamed, mapping)


# =============================================================================
# Fusion: fuse (elementwise nodes into kernel groups)
# =============================================================================

KERNEL_DTYPES = ("float32", "float64")


def fusion_refusal(node: Node, device: str = "cpu") -> str | None:
    """Why an op node cannot be part of a kernel, or None when it can: the rule
    stated with Function.cpp (one float dtype in and out, boolean inputs aside, attrs
    finite numbers), and reductions (Function.reduce); on the GPU their kernel must
    also fit the GPU's kernels (gpu_misfit, checked by fuse on the groups it makes)."""
    record = node.record
    if not all(positive(n) for v in (*node.inputs, *node.outputs) for n in v.shape
               if isinstance(n, Size)):
        return ("a symbolic size that may be 0 (T - 1): a kernel's loops take each size "
                "as 1 or more, as the graph's relations do")
    if record.random:
        return "a random op (each replay draws afresh)"
    if record.collective:
        return "a collective (it exchanges data with other processes)"
    labels = node.inputs[record.params.index(record.labels)] if record.labels else None
    if labels is not None and (len(node.inputs[0].shape) != 2 or
                               labels.dtype.name not in ("int32", "int64") or
                               labels.shape[1:] not in ((), (1,))):
        return ("labels compared with the column: only in a kernel over the rows of a "
                "2-d value, with int32 or int64 labels of shape (N,) or (N, 1)")
    axes = reduced_axes(node) if record.reduce else None
    if axes == ():  # pick_labels of one class: a kernel would have no rows to fold
        return "a reduction of no axis of length > 1 (its rows are its elements)"
    if axes and node.outputs[0].shape not in row_shapes(node.inputs[0].shape, axes):
        return "a reduction to a shape that keeps some reduced axes and drops others"
    if axes and record.reduce != "sum" and any(node.inputs[0].shape[d] == 0 for d in axes):
        return f"a {record.reduce} of no elements (numpy raises)"
    if axes and record.reduce == "sum" and device == "cpu" and _in_blocks(node, axes):
        return ("a sum over axes that kept ones interleave, the innermost reduced (numpy "
                "adds its rows pairwise, then row after row: an order no kernel follows)")
    if record.cpp is None and not record.reduce:
        return "not elementwise (no cpp on its class)"
    if len(node.outputs) != 1:
        return f"{len(node.outputs)} results"
    dtype = node.outputs[0].dtype
    if dtype.name not in KERNEL_DTYPES or any(v.dtype not in (dtype, bool) for v in
                                              node.inputs if v is not labels):
        return (f"dtypes {', '.join(v.dtype.name for v in node.inputs)} -> {dtype.name} "
                f"(a kernel computes in one of {', '.join(KERNEL_DTYPES)})")
    for key, value in sorted(node.attrs.items()) if not record.reduce else ():
        if not _finite_as(value, dtype):
            return f"attr {key}={format_attr(value)} is no finite {dtype.name} number"
    return None


def _in_blocks(node: Node, axes: tuple) -> bool:
    """Whether numpy adds a sum in blocks (the reduced axes after the last kept one,
    pairwise) added one after another: the innermost axis of more than one element
    is reduced, and a kept one comes after another reduced one."""
    shape = node.inputs[0].shape
    kept = [d for d, n in enumerate(shape) if _wide(n) and d not in axes]
    wide = [d for d in axes if _wide(shape[d])]
    return bool(kept and wide) and min(wide) < max(kept) < max(wide)


def _wide(n) -> bool:
    """Whether an axis holds more than one element: a symbolic size is taken to (a
    trace's are 2 or more; a placeholder graph's of 1 add the same values)."""
    return isinstance(n, Size) or n > 1


def _finite_as(value, dtype) -> bool:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        return False
    with np.errstate(over="ignore"):
        try:
            return bool(np.isfinite(dtype.type(value)))
        except OverflowError:  # an int beyond any float
            return False


def reduced_axes(node: Node) -> tuple:
    """The axes of its input that a reduction node reduces, sorted and >= 0: its
    `axis` attr (sum, max, min), or those its result's shape sums away (sum_to)."""
    shape = node.inputs[0].shape
    if "axis" in node.attrs:
        axis = node.attrs["axis"]
        axes = range(len(shape)) if axis is None else axis if isinstance(axis, tuple) \
            else (axis,)
        return tuple(sorted({a % len(shape) for a in axes})) if shape else ()
    out = node.outputs[0].shape
    lead = len(shape) - len(out)
    return tuple(range(lead)) + tuple(d + lead for d, n in enumerate(out)
                                      if n == 1 and shape[d + lead] != 1)


def _reads_as_row(shape: tuple, full: tuple, axes: tuple) -> bool:
    """Whether a row value of `shape` broadcasts to `full` along the reduced axes
    only (numpy aligns shapes on the right: a (N,) sum of (N, C) over axis 1 does not)."""
    lead = len(full) - len(shape)
    return lead >= 0 and all((shape[d - lead] if d >= lead else 1) == (1 if d in axes else n)
                             for d, n in enumerate(full))


def _joined(space: tuple, node: Node, values: list, update: bool) -> tuple | None:
    """The (shape, axes) of a group after `node`, reading `values` of it, joins it, or
    None where it cannot. A group without reductions has one shape; a reduction of
    values of that shape joins and sets its axes; then an elementwise node joins with
    the full shape or a row shape (that of a reduction's result), unless it is part
    of an `update` on the row shape (of a bias, after its gradient's sum), which the
    horizontal rule runs with the other parameters' updates. A sum of all
    of a row value (a loss's mean over the batch) joins as the kernel's total, after
    its rows, and elementwise nodes on totals after it. An op comparing labels with
    the column joins only a kernel over the rows of 2-d values."""
    shape, axes = space
    out = node.outputs[0].shape
    rows = set() if axes is None else row_shapes(shape, axes)
    total = out == () and () not in rows
    if node.record.reduce:
        if values[0].shape != shape:
            return space if total and node.record.reduce == "sum" and \
                values[0].shape in rows else None
        mine = reduced_axes(node)
        return (shape, mine) if axes in (None, mine) else None
    if node.record.labels and (len(shape) != 2 or axes != (1,)):
        return None
    if axes is None:
        return space if out == shape and all(v.shape == shape for v in values) else None
    if total:
        return space if all(v.shape == () for v in values) else None
    if out == shape:
        fits = all(v.shape == shape or v.shape in rows and _reads_as_row(v.shape, shape, axes)
                   for v in values)
    else:  # a row node reads row values of its own shape (one value a row: any)
        one = all(n == 1 for n in out)
        fits = out in rows and not update and all(
            v.shape == out or one and v.shape in rows for v in values)
    return space if fits else None


def _merged(spaces: list) -> tuple | None:
    """The space of groups merged into one, or None where they disagree."""
    axes = {a for _, a in spaces if a is not None}
    return (spaces[0][0], next(iter(axes), None)) \
        if len({s for s, _ in spaces}) == 1 and len(axes) <= 1 else None


def fuse(graph: Graph) -> Graph:
    """Group elementwise op nodes, and the reductions they feed with the elementwise
    ops after those, into kernels (graph.groups), reordering the nodes so that each
    group's are consecutive. On the GPU a kernel that fits no GPU kernel (gpu_misfit:
    several sums over all rows, or rows too long for a row kernel) gives up some
    reductions (_set_apart), and the groups are made again. On the CPU every group
    stays as formed: whether it runs compiled is measured later (kernels/measure.py)."""
    small: dict = {}
    while True:
        fused = _fuse(graph, small)
        more = {id(n): f"a reduction whose kernel fits no GPU kernel: {gpu_misfit(g)}"
                for g in fused.groups if not g.compiled and graph.device == "gpu"
                for n in _set_apart(g)}
        if not more:
            return fused
        small |= more
        debugging.log(3, f"fuse {graph.name}: again, each sum over all rows, or each "
                         f"reduction, of a kernel but its first a boundary")


def _set_apart(group: Group) -> list:
    """The reductions of a GPU kernel that fits none, which fuse makes boundaries: its
    sums over all rows after the first, or (rows too long for a row kernel) its
    reductions after the first (alone it may fit)."""
    totals = _totals(group)
    return totals[1:] if len(totals) > 1 else [n for n in group.nodes if n.record.reduce][1:]


def _fuse(graph: Graph, small: dict) -> Graph:
    """fuse, with the reduction nodes in `small` (ids -> why) left out of kernels.

    Nodes are visited in order; a fusable node (fusion_refusal) joins the groups of
    its inputs' producers whose results have its shape, merging them, unless a path
    would then leave the merged group and come back (through other nodes and other
    groups: the group could not run as one step); it then joins the first group it
    can, or starts one. Groups of one node are dropped (a kernel gains nothing over
    the op). A kernel never spans a collective, so scheduling the groups moves no
    node across it.
    """
    def log(message):
        debugging.log(3, f"fuse {graph.name}: {message}")

    # Units: every op node starts as one; a group is a unit that grew. Edges point
    # from a unit to the units that read its values (waiters); a unit runs as one
    # step, so the edges between units must never close a cycle.
    producer = {id(v): n for n in graph.nodes for v in n.outputs}
    apart = _masks_apart(graph, producer)
    parent: list[int] = []      # union-find over unit ids: merged units share a root
    members: list[list] = []    # root -> its nodes, for groups (fusable units)
    waiters: list[set] = []     # unit -> units reading its values (ids, maybe merged)
    phase_of: list[int] = []    # unit -> how many collectives come before its nodes
    space: list[tuple] = []     # unit -> (shape, reduced axes or None), see _joined
    unit_of: dict[int, int] = {}
    phase = 0
    # Updates: elementwise nodes whose results flow, through elementwise ones, into
    # a new .data of state.
    updates: set = set()
    for node in reversed(graph.nodes):
        if node.kind == "write" and node.attrs["field"] == "data" or id(node) in updates:
            updates.update(id(producer[id(v)]) for v in node.inputs[node.kind == "write":]
                           if producer[id(v)].kind == "op" and producer[id(v)].record.elementwise)

    def find(u):
        while parent[u] != u:
            u = parent[u]
        return u

    def joinable(chosen, inputs):
        """Can a node reading units `inputs` join the groups `chosen` (roots), merging
        them? Not when a path from them leads, through a unit outside, to one of the
        inputs or back to a chosen group (none can for one group and no other input:
        the units' graph has no cycle)."""
        if len(chosen) == 1 and not inputs:
            return True
        todo = [w for w in (find(w) for g in chosen for w in waiters[g]) if w not in chosen]
        seen = set()
        while todo:
            u = todo.pop()
            if u in inputs:
                return False
            if u not in seen:
                seen.add(u)
                for w in waiters[u]:
                    if find(w) in chosen:
                        return False
                    todo.append(find(w))
        return True

    for node in graph.nodes:
        if node.kind != "op":
            continue
        units = [unit_of.get(id(producer[id(v)])) for v in node.inputs]  # None: not an op
        inputs = {find(u) for u in units if u is not None}
        reason = small.get(id(node)) or fusion_refusal(node, graph.device)
        if reason is not None:
            log(f"boundary {format_node(node)}: {reason}")
            phase += node.record.collective
        near, spaces = [], {}
        for v, u in zip(node.inputs, units) if reason is None else ():
            if u is None or not members[find(u)] or find(u) in spaces:
                continue
            u = find(u)
            spaces[u] = _joined(space[u], node, [w for w, k in zip(node.inputs, units)
                                                 if k is not None and find(k) == u],
                                id(node) in updates)
            if phase_of[u] != phase:
                log(f"{node.outputs[0].name} starts apart from {v.name}: a collective "
                    f"lies between them")
            elif spaces[u] is not None:
                near.append(u)
            else:
                log(f"{node.outputs[0].name} starts apart from {v.name}: shape "
                    f"{v.shape} -> {node.outputs[0].shape}")
        if near and id(node) in apart:
            log(f"{node.outputs[0].name} starts apart from its inputs' kernel: they are "
                f"stored anyway, and its readers come after more non-kernel ops")
            near = []
        options = [near] + [[g] for g in near] if len(near) > 1 else [near]
        chosen = next((o for o in options if _merged([spaces[g] for g in o] or [(0, None)])
                       and joinable(set(o), inputs - set(o))), [])
        if len(chosen) < len(near):
            log(f"{node.outputs[0].name} " + ("joins one of its inputs' kernels: merging "
                "them all" if chosen else "starts a kernel: joining its inputs'") +
                " would make a path leave the kernel and come back, or mix reductions")
        if not chosen and reason is None and node.record.labels and not node.record.reduce:
            reason = "labels compared with the column: only in a kernel over rows"
            log(f"boundary {format_node(node)}: {reason}")
        if not chosen:
            chosen = [len(parent)]
            parent.append(chosen[0])
            members.append([])
            waiters.append(set())
            phase_of.append(phase)
            space.append((node.inputs[0].shape, reduced_axes(node))
                         if reason is None and node.record.reduce else
                         (node.outputs[0].shape, None))
        else:
            space[chosen[0]] = _merged([spaces[g] for g in chosen])
        root = chosen[0]
        for g in chosen[1:]:
            parent[g] = root
            members[root] += members[g]
            waiters[root] |= waiters[g]
        if reason is None:
            members[root].append(node)
        unit_of[id(node)] = root
        for u in inputs - set(chosen):
            waiters[u].add(root)
    kept = [g for g in range(len(parent)) if parent[g] == g and len(members[g]) > 1]
    spaces = {id(n): space[g] for g in kept for n in members[g]}
    kept = [members[g] for g in kept]
    nodes = _schedule(graph.nodes, kept)
    kept = horizontal.merge(nodes, kept, log)
    nodes = _schedule(nodes, [[n for part in parts for n in part] for parts in kept])
    fused = graph.with_nodes(nodes)
    fused.groups = _make_groups(nodes, kept, graph.device, spaces)
    log(f"{len(fused.groups)} kernels of " + ", ".join(
        str(len(g.nodes)) for g in fused.groups) + " ops")
    for g in fused.groups:
        if not g.compiled and graph.device == "gpu":
            log(f"kernel {g.name} fits no GPU kernel: {gpu_misfit(g)}")
    return fused


def _masks_apart(graph: Graph, producer: dict) -> set:
    """ids of the fusable nodes that start a kernel rather than join their inputs'
    (the backward's mask of an activation: relu's y > 0, sigmoid's 1 - y): each
    input they read from a kernel is stored anyway (a non-kernel op reads it too),
    and each of their readers is an elementwise node that also reads a value made
    past more non-kernel ops (the gradient from a matmul). Joined to the forward's
    kernel, the mask would be one more array it stores; apart, it is computed
    inside the backward's kernel."""
    fusable = {id(n) for n in graph.nodes if n.kind == "op" and fusion_refusal(n) is None}
    readers: dict[int, list] = {}
    depth: dict[int, int] = {}  # value -> the most non-kernel ops on a path to it
    for node in graph.nodes:
        for v in node.inputs:
            readers.setdefault(id(v), []).append(node)
        level = max((depth.get(id(v), 0) for v in node.inputs), default=0)
        level += node.kind == "op" and id(node) not in fusable
        depth.update((id(v), level) for v in node.outputs)

    def stored(v):
        return any(id(r) not in fusable for r in readers[id(v)])

    def level(node):
        return max((depth[id(v)] for v in node.inputs), default=0)

    apart = set()
    for node in graph.nodes:
        if id(node) not in fusable or len(node.outputs) != 1:
            continue
        grouped = [v for v in node.inputs if id(producer[id(v)]) in fusable]
        later = readers.get(id(node.outputs[0]), [])
        if grouped and later and all(stored(v) for v in grouped) and all(
                id(r) in fusable and level(r) > level(node) for r in later):
            apart.add(id(node))
    return apart


def _schedule(nodes: list, groups: list) -> list:
    """The nodes in a topological order in which each group's are consecutive: the
    ready unit (a node or a whole group) that comes first in the old order goes
    first, so the order changes only where a group needs it."""
    unit = {id(n): ("node", id(n)) for n in nodes}
    for i, group in enumerate(groups):
        unit.update((id(n), ("group", i)) for n in group)
    position = {id(n): i for i, n in enumerate(nodes)}
    producer = {id(v): n for n in nodes for v in n.outputs}
    parts: dict = {}
    before: dict = {}   # unit -> the units it waits for
    after: dict = {}    # unit -> the units waiting for it
    for node in nodes:
        u = unit[id(node)]
        parts.setdefault(u, []).append(node)
        before.setdefault(u, set())
        for v in node.inputs:
            w = unit[id(producer[id(v)])]
            if w != u and w not in before[u]:
                before[u].add(w)
                after.setdefault(w, []).append(u)
    waiting = {u: len(ws) for u, ws in before.items()}
    ready = [(position[id(parts[u][0])], u) for u, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, u = heapq.heappop(ready)
        ordered += parts[u]
        for w in after.get(u, ()):
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(ready, (position[id(parts[w][0])], w))
    if len(ordered) < len(nodes):  # a bug of fuse's, never the user's graph
        stuck = [", ".join(n.outputs[0].name for n in parts[u]) for u in sorted(waiting)
                 if waiting[u] and u[0] == "group"]
        raise GraphError("fuse: no order runs each kernel as one step; these groups wait "
                         "for each other: " + "; ".join(f"[{s}]" for s in stuck))
    return ordered


def _make_groups(nodes: list, groups: list, device: str, spaces: dict) -> list[Group]:
    """Group records named k0, k1 ... in the order of the scheduled nodes, from
    groups given as lists of segments (node lists); a group of several segments is a
    horizontal one, its segments Groups named k4_0, k4_1 ... spaces: id(node) ->
    (shape, reduced axes or None) of its group."""
    readers: dict[int, list] = {}
    for node in nodes:
        for v in node.inputs:
            readers.setdefault(id(v), []).append(node)
    position = {id(n): i for i, n in enumerate(nodes)}

    def make(name, members):
        members = sorted(members, key=lambda n: position[id(n)])
        inside = {id(n) for n in members}
        defined = {id(v) for n in members for v in n.outputs}
        inputs = list({id(v): v for n in members for v in n.inputs  # in order of first
                       if id(v) not in defined}.values())           # use, x * x's x once
        # A value no one reads (a graph that dce did not clean) stays a result too.
        outputs = [v for n in members for v in n.outputs
                   if not all(id(r) in inside for r in readers.get(id(v), [None]))]
        shape, axes = spaces[id(members[0])]
        return Group(name, members, inputs, outputs, shape, axes=axes)

    def first(members):
        return min(position[id(n)] for n in members)

    made = []
    for parts in sorted(groups, key=lambda g: min(first(p) for p in g)):
        name = f"k{len(made)}"
        group = make(name, parts[0]) if len(parts) == 1 else horizontal.group(
            name, [make(f"{name}_{j}", p) for j, p in enumerate(sorted(parts, key=first))])
        decide(group, device)
        made.append(group)
    return made


# How the CPU backend decides whether a group runs compiled (DEZERO_KERNELS), and
# the decision print(graph) shows before any is measured (none: compiled).
KERNEL_MODES = {"measure": "to be measured", "always": "",
                "never": "numpy calls: DEZERO_KERNELS=never"}


def kernel_mode() -> str:
    """$DEZERO_KERNELS, read at each fuse: measure (the default: each kernel is timed
    against its group's numpy calls), always (compiled on one thread, nothing timed:
    reproducible runs) or never."""
    mode = os.environ.get("DEZERO_KERNELS") or "measure"
    if mode not in KERNEL_MODES:
        raise ValueError(f"DEZERO_KERNELS={mode!r}: it takes measure, always or never\n"
                         f"  fix: unset it, or set it to one of those")
    return mode


def decide(group: Group, device: str = "cpu") -> None:
    """Set group.compiled and group.decision before any kernel is built. On the GPU a
    group is compiled where it makes one kernel (gpu_misfit): each cupy call is a
    launch of its own, so one kernel beats several. On the CPU every group is
    compiled (unless DEZERO_KERNELS=never), and with DEZERO_KERNELS=measure the
    backend then times its kernel against its numpy calls (backends/measure.py),
    which decides: no rule of sizes could, as a call's cost depends on the machine."""
    mode = kernel_mode() if device == "cpu" else None
    group.compiled = mode != "never" if mode else group.axes is None or gpu_misfit(group) is None
    group.decision = KERNEL_MODES[mode] if mode else "" if group.compiled else "op by op"


# A row kernel runs each row on one thread, in order: quick for a batch's rows of
# scores, but for a few long rows slower than a launch per op, each of which spreads
# over the whole GPU. Longer rows run op by op (a bound to measure on a GPU:
# benchmarks/bench_gpu.py times a loss's row kernel against its ops).
GPU_ROW_MAX = 4096


def gpu_misfit(group: Group) -> str | None:
    """Why a group with reductions fits none of the GPU's kernels, or None. One pass
    folding one reduction runs as a cupy ReductionKernel; any other group as a row
    kernel (one thread a row runs its passes), on rows of GPU_ROW_MAX elements or
    fewer, and, for its sums over all rows (a loss's mean), one ReductionKernel after
    it, which folds one such sum."""
    totals = _totals(group)
    if len(totals) > 1:
        return f"{len(totals)} sums over all rows (the kernel after the rows folds one)"
    # A width of symbolic size fits: a row kernel runs rows of any length, correctly
    # (a sequence's keys; the bound is one of speed).
    width = count([group.shape[d] for d in group.axes])
    if isinstance(width, int) and width > GPU_ROW_MAX and not _one_fold(group):
        return (f"rows of {width} elements in several passes or folds (a row kernel runs "
                f"each row on one thread: rows over {GPU_ROW_MAX} run op by op)")
    return None


def _one_fold(group: Group) -> bool:
    """Whether a group runs as one ReductionKernel: one sum, max or min, no labels,
    no work of the full shape after the reduction (a second pass over each row)."""
    reductions = [n for n in group.nodes if n.record.reduce]
    if len(reductions) > 1 or reductions[0].record.reduce == "pick" or \
            any(n.record.labels for n in group.nodes):
        return False
    after = {id(reductions[0].outputs[0])}
    for node in group.nodes:
        if any(id(v) in after for v in node.inputs):
            if node.outputs[0].shape == tuple(group.shape):
                return False
            after.add(id(node.outputs[0]))
    return True


def _totals(group: Group) -> list:
    """A group's sums over all rows: reductions of values of a row shape."""
    return [n for n in group.nodes if n.record.reduce and n.inputs[0].shape != group.shape]


def _carry_groups(graph: Graph, new: Graph, nodes: dict, values: dict):
    """new.groups: graph's groups over new's nodes (nodes and values map ids of the
    old ones to the new ones)."""
    def carry(g):
        return Group(g.name, [nodes[id(n)] for n in g.nodes],
                     [values.get(id(v), v) for v in g.inputs],
                     [values.get(id(v), v) for v in g.outputs], g.shape, g.compiled,
                     segments=[carry(s) for s in g.segments], axes=g.axes,
                     decision=g.decision)
    new.groups = [carry(g) for g in graph.groups]
    return new


# fuse comes after rename and nothing renames after it, so that the values its
# debug output names are those of the final graph (a node that fusion moves keeps
# its name: the names then say where it was computed before).
PIPELINE = (dce, cse, fold, simplify, split_epilogues, split_parts, device_reads, cse, dce,
            rename, fuse)


# A check costs as much as a pass: a graph of more nodes is checked once, after the
# last pass (DEZERO_DEBUG=3 checks every graph after every pass, naming the culprit).
CHECK_EACH_PASS_BELOW = 1000


def optimize(graph: Graph, passes=PIPELINE) -> Graph:
    """Run the passes in order, checking the IR after each (see CHECK_EACH_PASS_BELOW);
    a pipeline without rename is renamed at the end."""
    each = debugging.LEVEL >= 3 or len(graph.nodes) < CHECK_EACH_PASS_BELOW
    for p in passes:
        if debugging.LEVEL >= 5:
            debugging.log(5, f"before {p.__name__}:\n{graph}")
        graph = p(graph).check() if each else p(graph)
        debugging.log(3, f"check {graph.name} after {p.__name__}: ok")
    if rename not in passes:
        graph = rename(graph)
    if rename not in passes or not each:
        graph.check()
    if debugging.LEVEL >= 5:
        debugging.log(5, f"after all passes:\n{graph}")
    return graph
