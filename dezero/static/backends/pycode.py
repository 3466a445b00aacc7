"""Replay code: a Graph compiled into Python source that calls forwards on arrays.

The fast backend (the interpreter in interpreter.py is its reference). One
assignment per node, names taken from the IR; each op is a Function instance
rebuilt from its attrs whose bound `forward` the code calls directly, so a replay
builds no Variable and no dynamic graph. `Compiled.run` does what every plan does
(see plan.py) in generated code: reads captured state, calls the replay function,
applies the state writes and rebuilds the outputs.

    print(graph.compile().source)
"""
from __future__ import annotations

import functools
import linecache

import numpy as np

from dezero import cuda
from dezero.core import Variable, _wrap_output
from dezero.errors import GraphError
from dezero.op_record import as_result_array
from dezero.static.backends.interpreter import reraise
from dezero.static.backends.plan import Plan, owned_values, replayed_output, shared_values
from dezero.static.codegen import kernel_spec
from dezero.static.ir import (
    Graph,
    Node,
    format_attr,
)
from dezero.static.names import identifier, is_source_name, printable, source_literal
from dezero.static.slots import AttrSlot, GradSlot

# =============================================================================
# Inline spellings: inline_call (from each op class's `py`)
# =============================================================================

# Where an op's forward is one array expression, its class states that expression
# (`py`, see core.Function; read from the op's record) and the replay code writes it
# inline instead of calling forward, which saves a Python call (and an array-module
# lookup) per node.
# Placeholders are forward's parameter names and the op's attrs, as in `cpp`; the
# code's globals _xp (numpy or cupy, by the graph's device), _eye and _sum serve it.


# numpy 1.x casts by value: a 0-d float32 array meeting a Python number in an
# expression (x * 0.5) becomes float64. The forwards turn their numbers into scalars
# of the input's dtype, so there the replay code calls them for 0-d inputs.
_VALUE_BASED_CASTING = np.lib.NumpyVersion(np.__version__) < "2.0.0"


def inline_call(node) -> str | None:
    """The inline expression for an op node, or None to call its forward."""
    if _VALUE_BASED_CASTING and all(v.shape == () for v in node.inputs):
        return None
    text = node.record.py
    if callable(text):
        text = text([v.shape for v in node.inputs], node.outputs[0].shape, node.attrs)
    elif isinstance(text, dict):  # spelled by the number of inputs (linear: with b?)
        text = text.get(len(node.inputs))
    names = node.record.params[:len(node.inputs)]
    if text is None or len(node.inputs) != len(names):
        return None
    fields = {name: v.name for name, v in zip(names, node.inputs)}
    for key, value in node.attrs.items():
        literal = source_literal(value)
        if literal is None or key in fields:  # an attr may not stand for an input
            return None
        fields[key] = literal
    return text.format(**fields)


def _identity_rows(xp):
    """eye(n, dtype) made once per graph and shape: one_hot picks rows of it."""
    @functools.cache
    def eye(n, dtype):
        rows = xp.eye(n, dtype=dtype)
        if xp is np:
            rows.flags.writeable = False  # shared by every replay
        return rows
    return eye


# =============================================================================
# Code generation: generate
# =============================================================================


def generate(graph: Graph, factory=None, groups=None):
    """(source, globals, line -> node, function name) for the replay function of
    `graph`. With a kernel factory, each of graph.groups is one line that calls
    `factory(kernel_spec(group))` on the group's inputs, instead of its nodes
    (`groups`: those of graph.groups to run so, all by default)."""
    fname = identifier(graph.name, "graph")
    for node in graph.nodes:  # value names become variables: nothing else may pass
        for v in node.inputs + node.outputs:
            if not is_source_name(v.name):
                raise GraphError(f"graph {printable(graph.name)}: value name {v.name!r} is "
                                 f"not a safe name (an identifier, no keyword or builtin, "
                                 f"no leading '_')")
    params = [n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state")]
    inputs = set(graph.input_names)
    n_ops = sum(1 for n in graph.nodes if n.kind == "op")
    steps, kernels = _steps(graph, factory, graph.groups if groups is None else groups)
    xp = cuda.cupy if graph.device == "gpu" else np
    # numpy's add.reduce is ndarray.sum without its Python-level wrapper.
    env = {"_arr": as_result_array, "_xp": xp, "_eye": _identity_rows(xp), "_wrap": _wrap_output,
           "_sum": np.add.reduce if xp is np else lambda x, axis: x.sum(axis=axis)}
    consts = [n.outputs[0].name for n in graph.nodes if n.kind == "const"]
    while fname in consts:  # constants are globals of the code: keep the def apart
        fname += "_"
    lines = [f"def {fname}({', '.join(params)}):  # generated from trace "
             f"{printable(graph.name)}: {n_ops} ops"
             + (f", {len(kernels)} kernels" if kernels else "")]
    if consts:
        lines.append(f"    # constants (globals of this code): {', '.join(consts)}")
    line_nodes, counts, writes, returned = {}, {}, [], []
    early, shared, dying = _state_writes(graph, env), shared_values(graph), _last_uses(
        graph, steps)
    owned = owned_values(graph)
    for group in kernels.values():
        env[f"_{group.name}"] = factory(kernel_spec(group))
    for node in steps:
        if node.kind == "const":
            env[node.outputs[0].name] = node.payload
        elif id(node) in kernels:
            outs = ", ".join(v.name for v in node.outputs)
            lines.append(f"    {outs}{',' if len(node.outputs) == 1 else ''} = _{node.op}("
                         f"{', '.join(v.name for v in node.inputs)})  # kernel {node.op}: "
                         f"{len(kernels[id(node)].nodes)} ops")
            line_nodes[len(lines)] = node
        elif node.kind == "op":
            outs = [v.name for v in node.outputs]
            call = inline_call(node) if len(outs) == 1 else None
            inlined = call is not None
            if not inlined:
                base = identifier(node.op, "op")
                k = counts[base] = counts.get(base, -1) + 1
                while f"_{base}{k}" in env:  # a kernel's name (_k0)
                    k = counts[base] = k + 1
                callee = f"_{base}{k}"
                env[callee] = node.record.function(node.attrs).forward
                call = f"{callee}({', '.join(v.name for v in node.inputs)})"
            if len(outs) == 1 and node.outputs[0].shape == ():
                call = f"_arr({call})"  # numpy returns a scalar for a 0-d result
            text = f"    {', '.join(outs)} = {call}"
            if node.attrs and not inlined:
                attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
                text = f"{text:<40}  # [{printable(attrs)}]"
            lines.append(text)
            line_nodes[len(lines)] = node
            for v in node.outputs if len(outs) > 1 else ():
                if v.shape == ():
                    lines.append(f"    {v.name} = _arr({v.name})")
                    line_nodes[len(lines)] = node
        elif node.kind == "write" and node.attrs["field"] == "attr":
            writes.append(_fresh(node.inputs[0].name, owned))
            target = printable(f"{node.attrs['of']}.{node.attrs['name']}")
            lines.append(f"    # {target} <- {node.inputs[0].name}")
        elif node.kind == "write" and node.inputs[0].name in inputs:  # an input's .grad
            source = node.inputs[1].name if len(node.inputs) > 1 else "None"
            writes += [_fresh(source, owned)] if len(node.inputs) > 1 else []
            lines.append(f"    # {node.inputs[0].name}.grad <- {source}")
        elif node.kind == "output":  # copies of what someone else holds (see plan.py)
            returned = [f"{v.name}.copy()" if v.name in shared else v.name for v in node.inputs]
        for v in node.outputs:
            lines.extend(early.get(v.name, ()))
        if id(node) in dying:
            lines.append(f"    del {', '.join(dying[id(node)])}")
    items = returned + writes
    lines.extend(early.get(None, ()))
    lines.append(f"    return ({', '.join(items)}{',' if len(items) == 1 else ''})")
    return "\n".join(lines) + "\n", env, line_nodes, fname


def _steps(graph: Graph, factory, groups) -> tuple[list, dict]:
    """The nodes the replay code runs, in order: with a factory, each group's nodes
    become one op node named after it (reads its inputs, defines its outputs), mapped
    by id in the dict returned with the list; without one, the graph's nodes."""
    if factory is None or not groups:
        return graph.nodes, {}
    starts = {id(g.nodes[0]): g for g in groups}
    inside = {id(n) for g in groups for n in g.nodes}
    steps, kernels = [], {}
    for node in graph.nodes:
        if id(node) in starts:
            group = starts[id(node)]
            node = Node("op", group.name, group.inputs, None, group.outputs)
            kernels[id(node)] = group
        elif id(node) in inside:
            continue
        steps.append(node)
    return steps, kernels


def _last_uses(graph: Graph, steps: list) -> dict:
    """id(node) -> names of the values it defines or reads that no later node reads.

    The replay code deletes them right after that node: a value lives from the op
    that makes it to its last reader, as in eager code, instead of until the replay
    returns (large intermediates would pile up and their memory be mapped afresh at
    every call). A state array that gets a new .data is deleted after its last
    reader too, so that once the new value is stored (see _state_writes) the old one
    is freed, as eager code frees it. Outputs and write sources live on; inputs
    (the caller's) and constants (globals of the code) are never deleted.
    """
    replaced = {n.inputs[0].name for n in graph.of_kind("write") if n.attrs["field"] == "data"}
    last = {}
    for node in steps:
        # A .data or .grad write reads its source; its target is named, not read.
        target_named = node.kind == "write" and node.attrs["field"] != "attr"
        for v in node.inputs[1:] if target_named else node.inputs:
            if v.name in last:
                last[v.name] = node
        if node.kind == "op" or node.kind == "state" and node.outputs[0].name in replaced:
            last.update((v.name, node) for v in node.outputs)  # unread: dies at once
    dying: dict = {}
    for name, node in last.items():
        if node.kind in ("state", "op"):  # returned or written values live to the end
            dying.setdefault(id(node), []).append(name)
    return dying


def _fresh(name: str, owned: set) -> str:
    """How the code stores a value: a copy of an array that belongs to someone else
    (an input, state, a constant; see plan.owned_values)."""
    return f"{name}.copy()" if name in owned else name


def _state_writes(graph: Graph, env: dict) -> dict:
    """value name -> the lines that store it into captured state (.data or .grad),
    emitted right after the node that defines it; a write that clears a .grad is
    keyed by its target, an in-place write by None (emitted before the return).
    Also puts the state's Variables into env as _s_<name> (the glue reads them too).

    The replay function stores each new value as soon as it is computed (an old
    array is then held only by its local name, deleted after its last reader), so
    a step's memory rises and falls as in eager code: the optimizer's update frees
    each old parameter and slot while the next ones are computed. Writes to the
    .grad of an input and to attributes are left to the glue.
    """
    slots = {}  # state value -> the global holding its Variable (or attribute's object)
    for node in graph.of_kind("state"):
        slot, holder = node.payload, f"_s_{node.outputs[0].name}"
        env[holder] = slot.holder if isinstance(slot, AttrSlot) else slot.var
        slots[node.outputs[0].name] = holder
    owned = owned_values(graph)
    early: dict = {}
    for node in graph.of_kind("write"):
        target = node.inputs[0].name
        if node.attrs["field"] == "attr" or target not in slots:
            continue
        if len(node.inputs) == 1:
            early.setdefault(target, []).append(f"    {slots[target]}.grad = None")
            continue
        source = node.inputs[1].name
        value = _fresh(source, owned)
        if node.attrs.get("in_place"):  # the traced code overwrote the array itself:
            # after the old values' last reader, before the return (key None)
            early.setdefault(None, []).append(
                f"    {slots[target]}._data[...] = {value}  # {target}[...] <- {source}")
            continue
        if node.attrs["field"] == "grad":
            line = f"{slots[target]}.grad = _wrap({value})  # {target}.grad <- {source}"
        elif len(node.inputs[1].shape) > 0:
            # An op's result of ndim >= 1 is an array: store it past the setter's
            # checks (run() refuses to replay while a tracer records).
            line = f"{slots[target]}._data = {value}  # {target} <- {source}"
        else:
            line = f"{slots[target]}.data = {value}  # {target} <- {source}"
        early.setdefault(source, []).append("    " + line)
    return early


# =============================================================================
# Compiled: compile_graph, run (read state, call, write state, build outputs)
# =============================================================================


def compile_graph(graph: Graph, factory=None) -> Compiled:
    return Compiled(graph, factory)


class Compiled(Plan):
    """A graph's replay code plus its glue: generated code that reads captured state,
    calls the replay function (which stores new .data and .grad values as it
    computes them), applies the other writes and rebuilds the outputs.

    factory: None (every op node calls its forward), or a kernel backend's
    `factory(spec) -> kernel`, where kernel(*input_arrays) returns the tuple of
    output arrays of a codegen.KernelSpec; each of graph.groups then runs as one
    call of its kernel (`groups`: only these of them)."""

    def __init__(self, graph: Graph, factory=None, groups=None):
        super().__init__(graph)
        # A distinct pseudo-file per graph, registered with linecache, so that
        # tracebacks through the replay code show its source lines.
        self.filename = f"<replay {graph.name} {id(self):x}>"
        self.source, env, self.line_nodes, fname = generate(graph, factory, groups)
        self.glue = generate_glue(graph, fname, env)
        code = compile(self.source + "\n" + self.glue, self.filename, "exec")
        exec(code, env)
        self.fn, self.replay = env[fname], env["_replay"]
        text = self.source + "\n" + self.glue
        linecache.cache[self.filename] = (len(text), None, text.splitlines(True),
                                          self.filename)

    def __del__(self):
        linecache.cache.pop(getattr(self, "filename", None), None)

    def run(self, leaves):
        """Replay on `leaves` (arrays or Variables, in input order)."""
        self.refuse_while_recording()
        try:
            return self.replay(leaves)
        except Exception as e:  # noqa: BLE001 - re-raised with the node's line
            self.read_state()
            self._reraise(e)

    def _reraise(self, error):
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                node = self.line_nodes.get(tb.tb_lineno)
                if node is not None:
                    reraise(error, node, self.graph.name)
            tb = tb.tb_next
        raise error


# =============================================================================
# Glue: generate_glue (state reads, writes and outputs as generated code)
# =============================================================================


def generate_glue(graph: Graph, fname: str, env: dict) -> str:
    """Source of `_replay(leaves, _fn=<replay function>)`, adding its globals to env."""
    env["_Variable"], env["_wrap"], env["_out"] = Variable, _wrap_output, replayed_output
    # Builtins under reserved names: a value may be called `isinstance`.
    env["_isinstance"], env["_setattr"] = isinstance, setattr
    inputs = [n.outputs[0].name for n in graph.of_kind("input")]
    lines = [f"def _replay(_leaves, _fn={fname}):  # reads state, calls {fname}, "
             f"writes state"]
    if inputs:
        lines.append(f"    {', '.join(inputs)}{',' if len(inputs) == 1 else ''} = _leaves")
        for i, name in enumerate(inputs):
            lines.append(f"    _a{i} = {name}._data if _isinstance({name}, _Variable) "
                         f"else {name}")
    args = [f"_a{i}" for i in range(len(inputs))]
    slots = {}
    for node in graph.of_kind("state"):
        slot, holder = node.payload, f"_s_{node.outputs[0].name}"
        if isinstance(slot, AttrSlot):
            args.append(f"{holder}.{slot.name}._data")
        else:
            args.append(f"{holder}.grad._data" if isinstance(slot, GradSlot) else
                        f"{holder}._data")
        slots[node.outputs[0].name] = holder
    lines.append(f"    _r = _fn({', '.join(args)})")
    k = len(graph.output_values)
    for node in graph.of_kind("write"):  # writes to state are in the replay function
        field, target = node.attrs["field"], node.inputs[0].name
        if field == "attr":
            if node.payload is not None:  # a loaded graph has no object to set
                env[f"_h{k}"] = node.payload.holder
                lines.append(f"    _setattr(_h{k}, {node.payload.name!r}, _wrap(_r[{k}]))")
            k += 1
        elif target not in slots:  # the .grad of an input: only a Variable receives it
            value = "None"
            if len(node.inputs) > 1:
                value, k = f"_wrap(_r[{k}])", k + 1
            lines.append(f"    if _isinstance({target}, _Variable):")
            lines.append(f"        {target}.grad = {value}")
    lines.append(f"    return {_tree_source(graph.out_tree, env)}")
    return "\n".join(lines) + "\n"


def _tree_source(tree, env) -> str:
    kind = tree[0]
    if kind in ("var", "array") and type(tree[1]) is not int:
        raise GraphError(f"an output tree indexes outputs by int, not by {tree[1]!r}")
    if kind == "var":
        return f"_out(_r[{tree[1]}])"
    if kind == "array":
        return f"_r[{tree[1]}]"
    if kind in ("tuple", "list"):
        items = [_tree_source(t, env) for t in tree[1]]
        if kind == "list":
            return f"[{', '.join(items)}]"
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if kind == "dict":
        parts = []
        for key, t in tree[1]:
            name = f"_static{len(env)}"
            env[name] = key
            parts.append(f"{name}: {_tree_source(t, env)}")
        return "{" + ", ".join(parts) + "}"
    name = f"_static{len(env)}"
    env[name] = tree[1]  # "static": a Python value returned as is
    return name
