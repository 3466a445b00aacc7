"""Replay code: a StaticGraph compiled into Python source that calls forwards on arrays.

The fast backend (the interpreter in interpreter.py is its reference). One
assignment per node, names taken from the IR; each op is a Function instance
rebuilt from its attrs whose bound `forward` the code calls directly, so a replay
builds no Variable and no dynamic graph. `Compiled.run` reads captured state,
calls the code, applies state writes and rebuilds the outputs.

    print(graph.compile().source)
"""
from __future__ import annotations

import functools
import importlib
import inspect
import linecache
import math

import numpy as np

from dezero import core, cuda
from dezero.core import Config, Function, Variable, _wrap_output
from dezero.static.backends.interpreter import as_result_array, make_function, reraise
from dezero.static.ir import (
    AttrSlot,
    GradSlot,
    GraphError,
    StaticGraph,
    TraceError,
    format_attr,
    identifier,
)

# =============================================================================
# Inline spellings: INLINE, inline_call
# =============================================================================

# Backends respell, ops do not: where a dezero op's forward is one array
# expression, the replay code writes that same expression inline instead of
# calling forward, which saves a Python call (and an array-module lookup) per
# node. Placeholders are forward's parameter names and the op's attrs, as in
# `cpp`; `_xp` is numpy or cupy, by the graph's device.
def _inline_table():
    F = importlib.import_module("dezero.functions")
    table = {
        "Add": "{x0} + {x1}", "Sub": "{x0} - {x1}", "Mul": "{x0} * {x1}",
        "Div": "{x0} / {x1}", "Neg": "-{x}", "Pow": "{x} ** {c}", "Square": "{x} * {x}",
        "Exp": "_xp.exp({x})", "Log": "_xp.log({x})", "Tanh": "_xp.tanh({x})",
        "Sin": "_xp.sin({x})", "Cos": "_xp.cos({x})", "Sqrt": "_xp.sqrt({x})",
        "Reshape": "{x}.reshape({shape})", "Transpose": "{x}.transpose({axes})",
        "MatMul": "{x} @ {W}", "Linear": ("{x} @ {W}", "{x} @ {W} + {b}"),
        "Sum": "{x}.sum(axis={axis}, keepdims={keepdims})",
        "BroadcastTo": "_xp.broadcast_to({x}, {shape})", "ReLU": "_xp.maximum({x}, 0)",
        "Sigmoid": "_xp.tanh({x} * 0.5) * 0.5 + 0.5",
        "OneHot": "_eye({num_classes}, {dtype})[{t}]",
    }
    return {getattr(F, name): text for name, text in table.items() if hasattr(F, name)}


_INLINE = None


def _literal(value) -> str | None:
    """Python source for a plain attr value, or None if it has none."""
    if value is None or isinstance(value, bool) or type(value) in (int, str):
        return repr(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    if type(value) is tuple:
        parts = [_literal(v) for v in value]
        if None in parts:
            return None
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
    return None


@functools.cache
def _forward_names(cls) -> list:
    return list(inspect.signature(cls.forward).parameters)[1:]


def inline_call(node) -> str | None:
    """The inline expression for an op node, or None to call its forward."""
    global _INLINE
    if _INLINE is None:
        _INLINE = _inline_table()
    cls = node.function_class
    if cls.op_name == "sum_to" and cls.__module__ == "dezero.functions":
        return _sum_to_call(node)
    if cls.op_name == "transpose" and cls.__module__ == "dezero.functions" \
            and node.attrs["axes"] is None:
        return f"{node.inputs[0].name}.T"  # the usual case: an attribute, not a call
    text = _INLINE.get(cls)
    if text is None:
        return None
    names = _forward_names(cls)
    if isinstance(text, tuple):  # spelled by the number of inputs (linear: with b?)
        text = text[len(node.inputs) - 2] if 2 <= len(node.inputs) <= 3 else None
        names = names[:len(node.inputs)]
    if text is None or len(node.inputs) != len(names):
        return None
    fields = {name: v.name for name, v in zip(names, node.inputs)}
    for key, value in node.attrs.items():
        literal = _literal(value)
        if literal is None:
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


def _method_sum(x, axis):
    return x.sum(axis=axis)


def _sum_to_call(node) -> str:
    # utils.sum_to works out the summed axes at every call; the graph knows both
    # shapes, so the replay code names them once (the same single reduction).
    x, y = node.inputs[0], node.outputs[0]
    lead = len(x.shape) - len(y.shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(y.shape)
                                      if n == 1 and x.shape[i + lead] != 1)
    if all(y.shape[i] != 1 or x.shape[i + lead] == 1 for i in range(len(y.shape))):
        return f"_sum({x.name}, axis={_literal(axes)})"
    return f"{x.name}.sum(axis={_literal(axes)}, keepdims=True).reshape({_literal(y.shape)})"


# =============================================================================
# Code generation: generate
# =============================================================================


def generate(graph: StaticGraph):
    """(source, globals, line -> node) for the replay function of `graph`."""
    fname = identifier(graph.name, "graph")
    params = [n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state")]
    n_ops = sum(1 for n in graph.nodes if n.kind == "op")
    xp = cuda.cupy if graph.device == "gpu" else np
    # numpy's add.reduce is ndarray.sum without its Python-level wrapper.
    env = {"_arr": as_result_array, "_xp": xp, "_eye": _identity_rows(xp),
           "_sum": np.add.reduce if xp is np else _method_sum}
    consts = [n.outputs[0].name for n in graph.nodes if n.kind == "const"]
    while fname in consts:  # constants are globals of the code: keep the def apart
        fname += "_"
    lines = [f"def {fname}({', '.join(params)}):  # generated from trace {graph.name}: "
             f"{n_ops} ops"]
    if consts:
        lines.append(f"    # constants (globals of this code): {', '.join(consts)}")
    line_nodes, counts, writes, returned = {}, {}, [], []
    for node in graph.nodes:
        if node.kind == "const":
            env[node.outputs[0].name] = node.payload
        elif node.kind == "op":
            outs = [v.name for v in node.outputs]
            call = inline_call(node) if len(outs) == 1 else None
            inlined = call is not None
            if not inlined:
                base = identifier(node.op, "op")
                k = counts[base] = counts.get(base, -1) + 1
                callee = f"_{base}{k}"
                env[callee] = make_function(node).forward
                call = f"{callee}({', '.join(v.name for v in node.inputs)})"
            if len(outs) == 1 and node.outputs[0].shape == ():
                call = f"_arr({call})"  # numpy returns a scalar for a 0-d result
            text = f"    {', '.join(outs)} = {call}"
            if node.attrs and not inlined:
                attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
                text = f"{text:<40}  # [{attrs}]"
            lines.append(text)
            line_nodes[len(lines)] = node
            for v in node.outputs if len(outs) > 1 else ():
                if v.shape == ():
                    lines.append(f"    {v.name} = _arr({v.name})")
                    line_nodes[len(lines)] = node
        elif node.kind == "write" and node.attrs["field"] == "attr":
            writes.append(node.inputs[0].name)
            lines.append(f"    # {node.attrs['of']}.{node.attrs['name']} <- {node.inputs[0].name}")
        elif node.kind == "write":
            target = node.inputs[0].name + (".grad" if node.attrs["field"] == "grad" else "")
            if len(node.inputs) > 1:
                writes.append(node.inputs[1].name)
                lines.append(f"    # {target} <- {node.inputs[1].name}")
            else:
                lines.append(f"    # {target} <- None")
        elif node.kind == "output":
            returned = [v.name for v in node.inputs]
    items = returned + writes
    lines.append(f"    return ({', '.join(items)}{',' if len(items) == 1 else ''})")
    return "\n".join(lines) + "\n", env, line_nodes, fname


# =============================================================================
# Compiled: compile_graph, run (read state, call, write state, build outputs)
# =============================================================================


def compile_graph(graph: StaticGraph) -> Compiled:
    return Compiled(graph)


class Compiled:
    """A graph's replay code plus its glue: generated code that reads captured state,
    calls the replay function, applies the state writes and rebuilds the outputs."""

    def __init__(self, graph: StaticGraph):
        self.graph = graph
        # A distinct pseudo-file per graph, registered with linecache, so that
        # tracebacks through the replay code show its source lines.
        self.filename = f"<replay {graph.name} {id(self):x}>"
        self.source, env, self.line_nodes, fname = generate(graph)
        self.glue = generate_glue(graph, fname, env)
        code = compile(self.source + "\n" + self.glue, self.filename, "exec")
        exec(code, env)
        self.fn, self.replay = env[fname], env["_replay"]
        text = self.source + "\n" + self.glue
        linecache.cache[self.filename] = (len(text), None, text.splitlines(True),
                                          self.filename)
        self.reads = [n.payload for n in graph.nodes if n.kind == "state"]

    def __del__(self):
        linecache.cache.pop(getattr(self, "filename", None), None)

    def read_state(self):
        """The arrays of the captured state, in graph order (with a clear error for a
        slot that is empty now)."""
        arrays = [slot.read() for slot in self.reads]
        for slot, array in zip(self.reads, arrays):
            if array is None:
                raise GraphError(f"graph {self.graph.name} reads the {slot}, which is "
                                 f"None now; it was set when the graph was traced")
        return arrays

    def run(self, leaves, runner=None):
        """Replay on `leaves` (arrays or Variables, in input order); `runner` replaces
        the replay function (the interpreter uses it)."""
        if core.current_tracer() is not None:
            raise TraceError(f"graph {self.graph.name} was called while a trace was "
                             f"recording; a replay records nothing\n  fix: call the "
                             f"traced Python function, whose calls a trace records")
        try:
            if runner is None:
                return self.replay(leaves)
            return self.replay(leaves, runner)
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
# Outputs of a replay: ReplayedOutput, replayed_output
# =============================================================================


class ReplayedOutput(Function):
    """The creator of a Variable a replay returns: the replay built no dynamic graph,
    so a gradient cannot flow back through it, and saying so beats a silent None."""

    op_name = "replayed_output"

    def backward(self, *gys):
        raise TraceError(
            "backward() reached a value returned by a replayed traced function; a replay "
            "records no graph, so no gradient can flow into it (eager code would have "
            "filled the parameters' .grad)\n  fix: call backward() inside the traced "
            "function, or call it under dezero.no_grad() if no gradient is needed")


# One creator serves every replayed output: it has no inputs, keeps no outputs
# and its backward only raises, so nothing in it belongs to one replay.
_REPLAYED = ReplayedOutput()
_REPLAYED.generation, _REPLAYED.inputs, _REPLAYED.outputs = 0, [], []


def replayed_output(array):
    """A Variable for a replayed output; under enable_backprop it gets ReplayedOutput
    as its creator, so that backward() through it fails loudly."""
    y = _wrap_output(array)
    if Config.enable_backprop:
        y.creator, y.generation = _REPLAYED, 1
    return y


# =============================================================================
# Glue: generate_glue (state reads, writes and outputs as generated code)
# =============================================================================


def generate_glue(graph: StaticGraph, fname: str, env: dict) -> str:
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
    for k, node in enumerate(graph.of_kind("state")):
        slot = node.payload
        if isinstance(slot, AttrSlot):
            env[f"_s{k}"] = slot.holder
            args.append(f"_s{k}.{slot.name}._data")
        else:
            env[f"_s{k}"] = slot.var
            args.append(f"_s{k}.grad._data" if isinstance(slot, GradSlot) else f"_s{k}._data")
        slots[node.outputs[0].name] = f"_s{k}"
    lines.append(f"    _r = _fn({', '.join(args)})")
    k = len(graph.output_values)
    for node in graph.of_kind("write"):
        field = node.attrs["field"]
        target = node.inputs[0].name
        if field == "attr":
            if node.payload is not None:  # a loaded graph has no object to set
                env[f"_h{k}"] = node.payload.holder
                lines.append(f"    _setattr(_h{k}, {node.payload.name!r}, _wrap(_r[{k}]))")
            k += 1
            continue
        value = "None"
        if len(node.inputs) > 1:
            value = f"_r[{k}]" if field == "data" else f"_wrap(_r[{k}])"
            k += 1
        if target in slots and node.attrs.get("in_place"):
            # The run overwrote the array in place: whoever shares it sees the update.
            lines.append(f"    {slots[target]}._data[...] = {value}")
        elif target in slots and field == "data" and len(node.inputs[1].shape) > 0:
            # An op's result of ndim >= 1 is an array: store it past the setter's
            # checks (run() refuses to replay while a tracer records).
            lines.append(f"    {slots[target]}._data = {value}")
        elif target in slots:
            lines.append(f"    {slots[target]}.{field} = {value}")
        else:  # the .grad of an input: only a Variable argument can receive it
            lines.append(f"    if _isinstance({target}, _Variable):")
            lines.append(f"        {target}.grad = {value}")
    lines.append(f"    return {_tree_source(graph.out_tree, env)}")
    return "\n".join(lines) + "\n"


def _tree_source(tree, env) -> str:
    kind = tree[0]
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
            name = f"_k{len(env)}"
            env[name] = key
            parts.append(f"{name}: {_tree_source(t, env)}")
        return "{" + ", ".join(parts) + "}"
    name = f"_k{len(env)}"
    env[name] = tree[1]  # "static": a Python value returned as is
    return name
