"""Reduction kernels: a fused group with reductions as a ReductionSpec.

Beside codegen.py (whose node expressions it reuses): passes.fuse lets a reduction
(Function.reduce: sum, max, min) join the kernel that computes what it reduces,
with the elementwise ops after it, on the full shape or on the reduced one. Such a
kernel runs row by row (a row: one position of the kept axes) in passes over the
reduced axes; each pass folds values into reductions whose results the next
passes and the row's elementwise ops read (a softmax: max, then the sum of exp,
then the quotient). kernels/cpu_reductions.py writes the C++ loops around it.

    spec = kernel_spec(group)  # a ReductionSpec when group.axes is not None
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from dezero.static.ir import Group


@dataclass(frozen=True)
class ReductionSpec:
    """A reduction kernel over `shape`, whose `axes` it reduces: for each row (a
    position of the kept axes) it runs `setup`, then each pass runs its element
    statements at every position of the reduced axes, folding values into its
    reductions and storing its full outputs, then its `after` statements on the
    row's values. An input is read per element (level "full", broadcast to
    `shape`) or per row ("row"); an output is stored so too."""

    name: str
    inputs: tuple    # Params, read-only; sources[i]: its position in the group's inputs
    sources: tuple
    outputs: tuple   # Params
    levels: tuple    # "full" or "row", one per input then one per output
    shape: tuple
    axes: tuple
    setup: tuple     # statements before the first pass
    passes: tuple    # per pass: (element statements, ((kind, accumulator, value), ...),
                     #            after statements)
    pairwise: bool   # sums in numpy's order: pairwise (the reduced axes innermost)
    comment: str
    segments: tuple = ()  # never horizontal (see codegen.KernelSpec)
    totals: tuple = ()  # (accumulator, row value): sums over all rows, after them
    finish: tuple = ()  # statements on the totals (level "total": one value)
    kept: int = 0       # row buffers _keep0, _keep1 ...: full values passes share
    stores: tuple = ()  # per pass: the names of the full outputs it computes and stores
    sizes: tuple = ()   # the names of the symbolic sizes of its shapes (KernelSpec.sizes)

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()

    @property
    def body(self) -> str:
        """The statements of one row, pass by pass, to read (a backend writes the
        loops around them, as a KernelSpec's body)."""
        lines = [self.comment, *self.setup]
        for k, (element, folds, after) in enumerate(self.passes):
            lines.append(f"// pass {k}, over axes {list(self.axes)} of {list(self.shape)}:")
            lines += [f"  {line}" for line in element]
            lines += [f"  {a} = {kind}({a}, {v});" for kind, a, v in folds]
            lines += list(after)
        if self.totals:
            lines.append("// after all rows:")
            lines += [f"{a} = sum of {v} over the rows;" for a, v in self.totals]
            lines += list(self.finish)
        return "\n".join(lines) + "\n"


def reduction_spec(group: Group, names: dict, expression, param) -> ReductionSpec:
    """The spec of a group with reductions, given codegen's C names of its values
    (c_names), its node expressions (node, names of the inputs) -> C++, and its
    Params (value, name) -> Param."""
    shape, axes = tuple(group.shape), tuple(group.axes)
    ctype = param(group.nodes[0].outputs[0], "").ctype
    inside = {id(v) for n in group.nodes for v in n.outputs}
    # A value is per element ("full"), per row, or a total over all rows (after them).
    level: dict = {}
    for node in group.nodes:
        reads = [level[id(v)] for v in node.inputs if id(v) in level]
        level[id(node.outputs[0])] = (
            ("row" if node.inputs[0].shape == shape else "total") if node.record.reduce
            else "full" if node.outputs[0].shape == shape else
            "total" if "total" in reads else "row")
    full = {i: lv == "full" for i, lv in level.items()}
    # An input read at two levels (per element, per row, for the totals) is passed
    # once for each, its later names _row3, _total4 ...; labels (Function.labels) are
    # read per row, and compared with the column.
    by_level: dict = {}
    for node in group.nodes:
        mine = level[id(node.outputs[0])]
        for j, v in enumerate(node.inputs):
            if id(v) not in inside:
                by_level.setdefault(
                    ("label" if node.record.params[j] == node.record.labels else
                     "full" if mine == "full" or node.record.reduce else mine, id(v)), v)
    position = {id(v): i for i, v in enumerate(group.inputs)}
    keys = sorted(by_level, key=lambda key: (position[key[1]], key[0]))
    local = {id(v): names[("local", id(v))] for n in group.nodes for v in n.outputs}
    reads = {"full": dict(local), "row": dict(local), "total": dict(local)}
    for k, (lv, i) in enumerate(keys):
        name = f"_{lv}{k}" if k and keys[k - 1][1] == i else names[i]
        for read in ("full", "row") if lv == "label" else (lv,):
            reads[read][i] = name
    rows = [n for n in group.nodes if n.record.reduce and level[id(n.outputs[0])] == "row"]
    # stage: the pass that computes a full value (after the reductions it reads);
    # for a row value, the number of passes after which it is known.
    stage: dict = {id(v): 0 for v in group.inputs}
    for node in group.nodes:
        before = max([stage[id(v)] for v in node.inputs if id(v) in inside] + [0])
        stage[id(node.outputs[0])] = before + 1 if node.record.reduce else before
    count = max([stage[id(n.inputs[0])] + 1 for n in rows] +
                [stage[id(v)] + 1 for v in group.outputs if full[id(v)]])
    passes = [([], [], []) for _ in range(count)]
    setup, totals, finish, stores = [], [], [], []
    # The full values a pass needs: computed there, or kept in a row buffer (_keep)
    # by the earlier pass that computed them (softmax's exp is computed once).
    made: dict = {}  # id(value) -> [the pass that computed it, its buffer or None]
    for p in range(count):
        wanted = {id(n.inputs[0]) for n in rows if stage[id(n.inputs[0])] == p}
        wanted |= {id(v) for v in group.outputs if full[id(v)] and stage[id(v)] == p}
        for node in reversed(group.nodes):
            if id(node.outputs[0]) in wanted and id(node.outputs[0]) not in made:
                wanted |= {id(v) for v in node.inputs if full.get(id(v))}
        for node in group.nodes:
            i = id(node.outputs[0])
            if i not in wanted or node.record.reduce:
                continue
            if i in made and made[i][1] is None:
                made[i][1] = f"_keep{sum(m[1] is not None for m in made.values())}"
                passes[made[i][0]][0].append(f"{made[i][1]}[_r] = {local[i]};")
            text = f"{made[i][1]}[_r]" if i in made else expression(node, reads["full"])
            passes[p][0].append(f"const {ctype} {local[i]} = {text};")
            made.setdefault(i, [p, None])
        stores.append(tuple(v for v in group.outputs if full[id(v)] and stage[id(v)] == p))
        passes[p][0].extend(f"{names[id(v)]} = {local[id(v)]};" for v in stores[p])
    for node in group.nodes:
        value = node.outputs[0]
        mine, acc = level[id(value)], f"_acc_{local[id(value)]}"
        if mine == "total":
            if node.record.reduce:
                totals.append((acc, reads["row"][id(node.inputs[0])]))
            text = acc if node.record.reduce else expression(node, reads["total"])
            finish.append(f"const {ctype} {local[id(value)]} = {text};")
        elif node.record.reduce:
            v = reads["full"][id(node.inputs[0])]
            if node.record.reduce == "pick":  # the entry at the row's label
                v = f"{reads['full'][id(node.inputs[1])]} == _r ? {v} : {acc}"
            passes[stage[id(value)] - 1][1].append((node.record.reduce, acc, v))
            passes[stage[id(value)] - 1][2].append(f"const {ctype} {local[id(value)]} = {acc};")
        elif not full[id(value)]:
            text = expression(node, reads["row"])
            (passes[stage[id(value)] - 1][2] if stage[id(value)] else setup).append(
                f"const {ctype} {local[id(value)]} = {text};")
    passes[-1][2].extend(f"{names[id(v)]} = {local[id(v)]};" for v in group.outputs
                         if level[id(v)] == "row")
    finish += [f"{names[id(v)]} = {local[id(v)]};" for v in group.outputs
               if level[id(v)] == "total"]
    kept = [d for d in range(len(shape)) if d not in axes and shape[d] != 1]
    wide = [d for d in axes if shape[d] != 1]
    inputs = tuple(param(by_level[key], reads["full" if key[0] == "label" else key[0]][key[1]])
                   for key in keys)
    return ReductionSpec(
        group.name, inputs, tuple(position[i] for _, i in keys),
        tuple(param(v, names[id(v)]) for v in group.outputs),
        tuple(lv for lv, _ in keys) + tuple(level[id(v)] for v in group.outputs),
        shape, axes, tuple(setup), tuple((tuple(e), tuple(f), tuple(a)) for e, f, a in passes),
        not kept or not wide or max(kept) < min(wide),
        f"// kernel {group.name}: " + ", ".join(n.op for n in group.nodes),
        totals=tuple(totals), finish=tuple(finish),
        stores=tuple(tuple(names[id(v)] for v in values) for values in stores),
        kept=sum(m[1] is not None for m in made.values()), sizes=group.sizes)


