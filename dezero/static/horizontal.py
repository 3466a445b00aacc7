"""Horizontal fusion (multi-tensor apply): one kernel for the same update of many arrays.

A rule of the fusion pass (passes.fuse calls merge after the vertical rule): kernel
groups of one body on arrays of other shapes, such as an optimizer's update of each
parameter, none waiting for another, become the segments of one group, which a
backend runs as one call (one C function looping over the segments on the CPU, one
launch on the GPU). Imports only the IR's facts (attrs_key), the size type below
it and numpy.

    groups = merge(nodes, groups, log)   # node lists -> lists of segments
    record = group("k4", segments)       # the Group of segments k4_0, k4_1 ...
"""
from __future__ import annotations

import numpy as np

from dezero.static.ir import Group, attrs_key
from dezero.static.sizes import has_size

# =============================================================================
# Segments: segment_key, merge, group
# =============================================================================

# The most elements a segment has. A horizontal kernel's results are all stored
# after it, where separate kernels store each as soon as it is made, so the old and
# the new arrays of its segments live side by side; on larger arrays the work
# outweighs the call a merge saves.
MAX_SEGMENT = 1 << 16


def segment_key(part: list, readers: dict):
    """What makes two vertical groups one horizontal kernel's segments: dtype, the
    collective phase, the ops with their attrs, how each reads its operands (the k-th
    outside input, or the result of the j-th op), which results are read outside;
    None for a group that cannot be a segment (an outside input neither of the
    group's shape nor of one element: a segment's loop indexes every input alike;
    a group with reductions; one of symbolic sizes)."""
    shape, inside = part[0].outputs[0].shape, {id(n) for n in part}
    if any(n.record.reduce for n in part):  # a reduction kernel loops otherwise
        return None
    if any(has_size(v.shape) for n in part for v in n.inputs):  # segments' sizes are fixed
        return None
    local, outside, ops = {}, {}, []
    for node in part:
        operands = []
        for v in node.inputs:
            if id(v) in local:
                operands.append(local[id(v)])
            elif v.shape == shape or int(np.prod(v.shape, dtype=np.int64)) == 1:
                operands.append((outside.setdefault(id(v), len(outside)), v.shape == shape))
            else:
                return None
        read_outside = not all(id(r) in inside for r in readers.get(id(node.outputs[0]),
                                                                     [None]))
        ops.append((node.op, attrs_key(node.attrs), tuple(operands), read_outside))
        local[id(node.outputs[0])] = len(local)
    return part[0].outputs[0].dtype.name, tuple(ops)


def merge(nodes: list, groups: list, log) -> list:
    """Horizontal fusion (multi-tensor apply): groups of the same body on arrays of
    other shapes (an optimizer's update of each parameter), none depending on another
    through any path, merge into one kernel whose segments they are. Returns the
    groups as lists of segments (a vertical group: a list of one).

    Units (nodes, groups) form a graph; merging two units closes a cycle exactly when
    a path leads from one to the other, so a group joins a set only when it is
    neither among the set's descendants nor among its ancestors. Per class of equal
    bodies, the first group seeds a set and the others join in order; those refused
    try again among themselves while a round merges something. Groups of more than
    MAX_SEGMENT elements stay apart."""
    position = {id(n): i for i, n in enumerate(nodes)}
    groups = [sorted(g, key=lambda n: position[id(n)]) for g in groups]
    unit = {id(n): i for i, n in enumerate(nodes)}
    for k, group in enumerate(groups):
        unit.update((id(n), len(nodes) + k) for n in group)
    parent = list(range(len(nodes) + len(groups)))
    edges = {"down": [set() for _ in parent], "up": [set() for _ in parent]}
    producer = {id(v): n for n in nodes for v in n.outputs}
    readers: dict = {}
    phase, phases = 0, {}
    for node in nodes:
        phase += node.kind == "op" and node.record.collective
        phases[id(node)] = phase
        for v in node.inputs:
            readers.setdefault(id(v), []).append(node)
            a, b = unit[id(producer[id(v)])], unit[id(node)]
            if a != b:
                edges["down"][a].add(b)
                edges["up"][b].add(a)

    def find(u):
        while parent[u] != u:
            u = parent[u]
        return u

    def reach(start, way, known):
        """The roots reachable from root `start` along edges `way`, added to `known`
        (whose own descendants are in it already)."""
        todo = [start]
        while todo:
            for w in (find(w) for w in edges[way][todo.pop()]):
                if w not in known:
                    known.add(w)
                    todo.append(w)
        return known

    classes: dict = {}
    for k, group in enumerate(groups):
        key = segment_key(group, readers)
        if key is not None and int(np.prod(group[0].outputs[0].shape)) <= MAX_SEGMENT:
            classes.setdefault((phases[id(group[0])], key), []).append(k)
    merged = {k: [k] for k in range(len(groups))}
    for todo in classes.values():
        while len(todo) > 1:
            first = todo[0]
            root = find(len(nodes) + first)
            down, up, refused = reach(root, "down", set()), reach(root, "up", set()), []
            for k in todo[1:]:
                r = find(len(nodes) + k)
                if r in down or r in up:
                    refused.append(k)
                    continue
                reach(r, "down", down)
                reach(r, "up", up)
                parent[r] = root
                edges["down"][root] |= edges["down"][r]
                edges["up"][root] |= edges["up"][r]
                merged[first] += merged.pop(k)
            if len(refused) == len(todo) - 1:
                break
            todo = refused
    for k, ks in merged.items():
        if len(ks) > 1:
            log(f"horizontal kernel of {len(ks)} groups of {len(groups[k])} ops, on " +
                ", ".join(str(groups[j][0].outputs[0].shape) for j in ks))
    return [[groups[j] for j in ks] for ks in merged.values()]


def group(name: str, segments: list) -> Group:
    """The horizontal Group of `segments` (Groups named name_0, name_1 ...): their
    nodes one segment after the other, their inputs (each once), their outputs, and
    the shape (total elements,)."""
    inputs = []
    for v in (v for s in segments for v in s.inputs):
        if not any(v is w for w in inputs):
            inputs.append(v)
    size = sum(int(np.prod(s.shape, dtype=np.int64)) for s in segments)
    return Group(name, [n for s in segments for n in s.nodes], inputs,
                 [v for s in segments for v in s.outputs], (size,), segments=segments)
