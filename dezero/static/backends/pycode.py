"""Replay code: a Graph compiled into Python source that calls forwards on arrays.

The fast backend (the interpreter in interpreter.py is its reference): the graph's
program (lowering.py) printed as one Python function, a line per step, names taken
from the IR. Each op is a Function instance rebuilt from its attrs whose bound
`forward` the code calls directly, so a replay builds no Variable and no dynamic
graph; kernel backends (dezero/kernels/: cpu.py, gpu.py) pass a factory for the kernel
steps.

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
from dezero.static.ir import Graph, format_attr, format_node
from dezero.static.lowering import Plan, holder, lower, returned_arguments
from dezero.static.names import identifier, is_source_name, printable, source_literal
from dezero.static.sizes import Size, evaluate, has_size, substitute
from dezero.static.sizes import names as names_of
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
        text = text([(v.shape, v.dtype) for v in node.inputs], node.outputs[0].shape, node.attrs)
    elif isinstance(text, dict):  # spelled by the number of inputs (linear: with b?)
        text = text.get(len(node.inputs))
    names = node.record.params[:len(node.inputs)]
    if text is None or len(node.inputs) != len(names):
        return None
    fields = {name: v.name for name, v in zip(names, node.inputs)}
    for key, value in node.attrs.items():
        literal = source_literal(value) if not has_size(value) else sized_literal(value)
        if literal is None or key in fields:  # an attr may not stand for an input
            return None
        fields[key] = literal
    return text.format(**fields)


def sized_literal(value) -> str | None:
    """Source for a size, or a tuple of ints and sizes, over the replay function's
    locals of the sizes (B is _n_B, read from the inputs' shapes at its start; apart
    from _s_<name>, the holders of state)."""
    if isinstance(value, Size):
        return f"({substitute(value, {n: Size.name('_n_' + n) for n in names_of(value)})})"
    if type(value) is tuple:
        parts = [sized_literal(v) if has_size(v) else source_literal(v) for v in value]
        return None if None in parts else f"({parts[0]},)" if len(parts) == 1 else \
            f"({', '.join(parts)})"
    return None


def _sized_forward(record, attrs, one, sizes, *xs):
    """forward of an op whose attrs hold sizes, rebuilt with this call's sizes."""
    y = record.function(evaluate(attrs, sizes)).forward(*xs)
    return y[0] if one and type(y) is tuple else y


def _one_result(forward, *xs):
    """forward(*xs) of an op node of one result, as Function.__call__ reads it: a
    tuple of one array (a book-style `return y,`) is that array, not the result."""
    y = forward(*xs)
    return y[0] if type(y) is tuple else y


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
# Code generation: generate (the program as Python source)
# =============================================================================


def generate(graph: Graph, factory=None, program=None):
    """(source, globals, line -> printed step, function name) of the replay function
    of `graph`: its program (lower(graph) if None) as Python, a line or a few per step. With
    a kernel factory, a kernel step whose group is compiled is one line that calls
    `factory(group)` on the group's inputs; other kernel steps are their
    nodes' lines."""
    fname = identifier(graph.name, "graph")
    _check_names(f"graph {printable(graph.name)}", graph.nodes)
    program = program or lower(graph)
    env = _globals(cuda.cupy if graph.device == "gpu" else np)
    env.update({"_wrap": _wrap_output, "_Variable": Variable, "_isinstance": isinstance,
                "_setattr": setattr, "_outputs": program.outputs})
    consts = [n.outputs[0].name for n in graph.nodes if n.kind == "const"]
    env.update((n.outputs[0].name, n.payload) for n in graph.of_kind("const"))
    while fname in consts:  # constants are globals of the code: keep the def apart
        fname += "_"
    code = _Code(env, factory)
    kernels = sum(1 for s in program.steps if s.kind == "kernel" and code.calls_kernel(s))
    n_ops = sum(1 for n in graph.nodes if n.kind == "op")
    inputs = graph.input_names
    code.lines.append(f"def {fname}({', '.join(inputs)}):  # generated from trace "
                      f"{printable(graph.name)}: {n_ops} ops"
                      + (f", {kernels} kernels" if kernels else ""))
    if consts:
        code.lines.append(f"    # constants (globals of this code): {', '.join(consts)}")
    leaves = {s.node.inputs[0].name for s in program.steps if s.target == "input"}
    # Arguments returned as they were passed: the return hands back the caller's object.
    code.returned = {i: inputs[i] for i in returned_arguments(graph.out_tree)}
    leaves.update(code.returned.values())
    for name in inputs:
        if name in leaves:  # its .grad is stored: keep what the caller passed
            code.lines.append(f"    _i_{name} = {name}")
        code.lines.append(f"    {name} = {name}._data if _isinstance({name}, _Variable) "
                          f"else {name}")
    code.lines += _read_sizes(graph.input_values, graph.of_kind("op"))
    for step in program.steps:
        code.step(step)
    return "\n".join(code.lines) + "\n", env, code.line_steps, fname


def _read_sizes(values, nodes) -> list:
    """Lines that read the symbolic sizes from the shapes of `values` (the inputs: a
    size another input has too is checked where the call comes, Plan.sizes_of), and
    put them in a dict `_sizes` where one of `nodes` calls its forward with them."""
    lines, seen = [], []
    for value in values:
        for axis, n in enumerate(value.shape):
            if isinstance(n, Size) and n.op == "name" and n.args[0] not in seen:
                seen.append(n.args[0])
                lines.append(f"    _n_{n.args[0]} = {value.name}.shape[{axis}]")
    if seen and any(has_size(n.attrs) and (len(n.outputs) > 1 or inline_call(n) is None)
                    for n in nodes):
        lines.append(f"    _sizes = {{{', '.join(f'{n!r}: _n_{n}' for n in seen)}}}")
    return lines


def group_function(step):
    """The numpy statements that the replay code runs for a kernel step of a graph on
    the CPU when its group is not compiled, as a function of the group's inputs
    (positional, in order; then the tuple of the values of its symbolic sizes, as its
    kernel takes them) that returns the tuple of its outputs, its code in `.source`:
    what measure.py times against the group's kernel."""
    group = step.group
    _check_names(f"kernel {group.name}", group.nodes)
    code = _Code(_globals(np), None)
    params = [v.name for v in group.inputs]
    if group.sizes:  # their values, as a kernel takes them (Group.sizes)
        params.append("_group_sizes")
        code.lines.append(f"    {''.join(f'_n_{n}, ' for n in group.sizes)}= _group_sizes")
        if any(has_size(n.attrs) and inline_call(n) is None for n in group.nodes):
            code.lines.append(f"    _sizes = dict(zip({group.sizes!r}, _group_sizes))")
    for inner in step.body:
        code.step(inner)
    outs = "".join(f"{v.name}, " for v in group.outputs)
    source = "\n".join([f"def _{group.name}({', '.join(params)}):",
                        *code.lines, f"    return ({outs})\n"])
    exec(compile(source, f"<numpy statements of kernel {group.name}>", "exec"), code.env)
    function = code.env[f"_{group.name}"]
    function.source = source
    return function


def _globals(xp) -> dict:
    """What the statements of replay code read besides values: numpy or cupy, and helpers."""
    # numpy's add.reduce is ndarray.sum without its Python-level wrapper.
    return {"_arr": as_result_array, "_xp": xp, "_eye": _identity_rows(xp),
            "_sum": np.add.reduce if xp is np else lambda x, axis: x.sum(axis=axis)}


def _check_names(where: str, nodes) -> None:
    """Value names become variables of generated code: nothing else may pass."""
    for v in (v for node in nodes for v in node.inputs + node.outputs):
        if not is_source_name(v.name):
            raise GraphError(f"{where}: value name {v.name!r} is not a safe name (an "
                             f"identifier, no keyword or builtin, no leading '_')")


class _Code:
    """The lines of a replay function, one method per step kind."""

    def __init__(self, env: dict, factory):
        self.env, self.factory, self.lines, self.line_steps, self.counts = env, factory, [], {}, {}

    def calls_kernel(self, step) -> bool:
        return self.factory is not None and step.group.compiled

    def emit(self, text: str, step=None):
        self.lines.append("    " + text)
        if step is not None:
            self.line_steps[len(self.lines)] = str(step)

    def step(self, step):
        getattr(self, step.kind if step.kind != "return" else "returns")(step)

    def read(self, step):
        node, name, place = step.node, step.node.outputs[0].name, step.node.outputs[0].place
        slot, held = node.payload, f"_s_{name}"
        self.env[held] = holder(slot)
        where = f".{slot.name}" if isinstance(slot, AttrSlot) else \
            ".grad" if isinstance(slot, GradSlot) else ""
        # State says where it lives (its place) where the code reads it.
        self.emit(f"{name} = {held}{where}._data" + (f"  # {printable(place)}" if place else ""))

    def node(self, step):
        node = step.node
        outs = [v.name for v in node.outputs]
        call = inline_call(node) if len(outs) == 1 else None
        inlined = call is not None
        if not inlined:
            base = identifier(node.op, "op")
            k = self.counts[base] = self.counts.get(base, -1) + 1
            while f"_{base}{k}" in self.env:  # a kernel's name (_k0)
                k = self.counts[base] = k + 1
            callee = f"_{base}{k}"
            args = ", ".join(v.name for v in node.inputs)
            if has_size(node.attrs):
                self.env[callee] = functools.partial(_sized_forward, node.record,
                                                     node.attrs, len(outs) == 1)
                args = "_sizes" + (", " + args if args else "")
            else:
                forward = node.record.function(node.attrs).forward
                self.env[callee] = forward if len(outs) > 1 else \
                    functools.partial(_one_result, forward)
            call = f"{callee}({args})"
        if len(outs) == 1 and node.outputs[0].shape == ():
            call = f"_arr({call})"  # numpy returns a scalar for a 0-d result
        text = f"{', '.join(outs)} = {call}"
        if node.attrs and not inlined:
            attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
            text = f"{text:<36}  # [{printable(attrs)}]"
        self.emit(text, step)
        for v in node.outputs if len(outs) > 1 else ():
            if v.shape == ():
                self.emit(f"{v.name} = _arr({v.name})", step)

    def kernel(self, step):
        group = step.group
        if not self.calls_kernel(step):
            for inner in step.body:
                self.step(inner)
            return
        self.env[f"_{group.name}"] = self.factory(group)
        outs = ", ".join(v.name for v in group.outputs)
        args = [v.name for v in group.inputs]
        if any(step.into):  # arrays the kernel writes into (a matmul's, read only here)
            args.append(f"out=({', '.join(v.name if v else 'None' for v in step.into)},)")
        if group.sizes:  # the values of its symbolic sizes (Group.sizes)
            args.append(f"sizes=({', '.join(f'_n_{n}' for n in group.sizes)},)")
        self.emit(f"{outs}{',' if len(group.outputs) == 1 else ''} = _{group.name}("
                  f"{', '.join(args)})  # kernel {group.name}: {len(group.nodes)} ops" + "".join(
                      f"; {v.name} into {w.name}'s array"
                      for v, w in zip(group.outputs, step.into) if w), step)
        if step.names:
            self.emit(f"del {', '.join(step.names)}")

    def store(self, step):
        node, source = step.node, step.source
        value = "None" if source is None else f"{source}.copy()" if step.copies else source
        if step.target == "attr":
            held = f"_h{len(self.lines)}"
            self.env[held] = step.slot.holder
            self.emit(f"_setattr({held}, {step.slot.name!r}, _wrap({value}))  "
                      f"# {printable(node.attrs['of'])}.{printable(node.attrs['name'])}")
            return
        to = f"_{step.target[0]}_{node.inputs[0].name}"  # _s_W (state), _i_x (argument)
        if node.attrs.get("in_place"):  # the traced code overwrote the array itself
            line = f"{to}._data[...] = {value}"
        elif node.attrs["field"] == "grad":
            line = f"{to}.grad = {value if source is None else f'_wrap({value})'}"
        else:  # an array of ndim >= 1 skips the setter's checks (run() refuses to
            # replay while a tracer records); numpy may give a 0-d result as a scalar
            line = f"{to}.{'_data' if node.inputs[1].shape else 'data'} = {value}"
        if step.target == "input":  # only a Variable argument receives a .grad
            line = f"if _isinstance({to}, _Variable): {line}"
        self.emit(f"{line}  # {printable(format_node(node))}")

    def free(self, step):
        self.emit(f"del {', '.join(step.names)}")

    def returns(self, step):
        items = [f"{n}.copy()" if n in step.copies else n for n in step.names]
        arguments = ", ".join(f"{i}: _i_{name}" for i, name in self.returned.items())
        self.emit(f"return _outputs(({', '.join(items)}{',' if len(items) == 1 else ''})"
                  + (f", {{{arguments}}})" if arguments else ")"))


# =============================================================================
# Compiled: the plan, run
# =============================================================================


class Compiled(Plan):
    """A graph's replay code: its program printed as one Python function that reads
    captured state, runs the steps, stores and returns what the traced function did.

    factory: None (every op node calls its forward), or a kernel backend's
    `factory(group) -> kernel`, where kernel(*input_arrays, out=None) returns the tuple
    of the group's output arrays (written into the arrays of `out`, one or None per
    output, where given); each compiled group (group.compiled) then runs as one call
    of its kernel (dezero/kernels/ makes them)."""

    def __init__(self, graph: Graph, factory=None):
        super().__init__(graph)
        # A distinct pseudo-file per graph, registered with linecache, so that
        # tracebacks through the replay code show its source lines.
        self.filename = f"<replay {graph.name} {id(self):x}>"
        self.source, env, self.line_steps, fname = generate(graph, factory, self.program)
        exec(compile(self.source, self.filename, "exec"), env)
        self.fn = env[fname]
        linecache.cache[self.filename] = (len(self.source), None,
                                          self.source.splitlines(True), self.filename)

    def __del__(self):
        linecache.cache.pop(getattr(self, "filename", None), None)

    def run(self, leaves):
        """Replay on `leaves` (arrays or Variables, in input order)."""
        if self.symbolic:
            self.sizes_of(leaves)  # ranks, static sizes and relations, with a clear error
        return self.replay(leaves)

    def replay(self, leaves):
        """run(leaves), the sizes already checked (Plan.replay)."""
        self.refuse_while_recording()
        try:
            return self.fn(*leaves)
        except Exception as e:  # noqa: BLE001 - re-raised with the step's line
            self.read_state()
            self._reraise(e)

    def _reraise(self, error):
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = self.line_steps.get(tb.tb_lineno)
                if line is not None:
                    reraise(error, line, self.graph.name)
            tb = tb.tb_next
        raise error


compile_graph = Compiled
