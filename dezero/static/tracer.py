"""The tracer: records the Function calls of one eager run into a StaticGraph.

First stage of the pipeline (tracer -> ir -> passes -> lowering -> backends). While installed
for its thread with dezero.core.set_tracer, the core reports through the hooks of
core.TracerHooks every Variable made, every `.data` read and assignment, every read
of a value into Python, every Function call and every step of backward(); the
tracer turns them into input, state, const, op and write nodes. User code sees
traced arrays through guards (guard.py).

    x = tracer.add_input("x", x); ...run on x...; graph = tracer.finish(y)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from dezero import cuda, layers
from dezero.core import TracerHooks, Variable
from dezero.errors import GraphError, TraceError, user_frame, where
from dezero.op_record import RECORDS, broadcast_shapes
from dezero.static.graph import StaticGraph
from dezero.static.guard import GuardedArray, overlap
from dezero.static.ir import Node, Value
from dezero.static.lowering import container
from dezero.static.names import dotted, identifier, letter_name, printable
from dezero.static.randomness import RandomWatch
from dezero.static.sizes import Relation, Size, has_size, settle, substitute
from dezero.static.slots import AttrSlot, DataSlot, GradSlot
from dezero.static.symint import NoNumbers, exprs, hints, holds_symint, symbolic_shape

# =============================================================================
# Tracer: the core hooks (created, read, assigned, concretized, record, backward_step)
# =============================================================================


@dataclass(eq=False, slots=True)
class Traced:
    """Everything the tracer knows of one Variable it met in the run (Tracer.known)."""

    var: Variable                  # held: its id stays its own for the run
    value: Value | None = None     # the Value it holds now
    computed: bool = False         # made in the run (an op's result, Variable(...))
    literal: bool = False          # holds a plain array made in the run: a constant
    input: bool = False            # an argument of the traced function
    node: Node | None = None       # its state node, when the graph reads it as state
    before_data: object = None     # state: its .data before the run
    before_grad: object = None     # state and arguments: its .grad before the run
    write: Value | None = None     # state: the Value the run left in it
    in_place: bool = False         # state: the run overwrote its own array (before_data)
    attr: tuple | None = None      # (object, name): an attribute carrying it between calls


@dataclass(frozen=True)
class _Typed:
    """The shape (SymInts where symbolic) and dtype an op's shape rule reads."""

    shape: tuple
    dtype: np.dtype


class Tracer(TracerHooks):
    """Receives the core's hooks during one run of a traced function.

    A value is known by the Variable or argument it came from: Variables by
    identity, each with one Traced record in `known`; array arguments and `.data`
    through the GuardedArray user code sees; never by id() of an array, as arrays
    are shared.
    """

    def __init__(self, name: str, carried=(), symbolic=None, least: int = 2):
        self.name = name
        # The smallest value of a symbolic size: 2 for a trace (a size of 1 broadcasts
        # where another would not, so a call with 1 records a graph of its own); 1 for
        # placeholders, whose stand-ins refuse at definition what 1 would broadcast.
        self.least = least
        # (argument position, axis) -> the size's name, for the sizes recorded as
        # symbols; the relations the run's decisions on them relied on (symint.py).
        self.symbolic: dict = dict(symbolic or {})
        # (a placeholder's sizes have no numbers: a decision needing one refuses)
        self.relations: list = [] if least > 1 else NoNumbers()
        self.hints: dict = {}  # each symbolic size's value in this run
        self.inputs: list[tuple[Node, object]] = []   # (input node, argument)
        # id(Variable) -> its record; first those of attributes known to carry values
        # between calls (LSTM.h): a captured Variable found in one is read through it.
        self.known: dict[int, Traced] = {id(v): Traced(v, attr=(h, n)) for h, n, v in carried
                                         if isinstance(v, Variable)}
        self.captures: list[Traced] = []               # the state, in order of capture
        self.written: list[Traced] = []                # the state written, in order
        self.consts: list[Node] = []
        self.ops: list[Node] = []
        self.const_sources: list = []          # the arrays the constants copy
        self.overwritten: list = []            # the arrays the run overwrote in place
        self.uninitialised: list[str] = []     # state whose .data was None before the run
        self.grads_cleared: set = set()        # ids of state whose .grad the run left cleared
        self.unbuilt: list = []                # Variables of no .data whose .grad it cleared
        self.recorded: set = set()             # the Functions called in the run
        self.finished = False
        self.random: RandomWatch | None = None

    def computed(self, var) -> bool:
        """Whether the run made `var` (an op's result, or a Variable made in it); a
        record holds its Variable, so no other object has its id during the run."""
        return getattr(self.known.get(id(var)), "computed", False)

    # ---- arguments ---------------------------------------------------------
    def add_input(self, name: str, arg):
        """Register an argument; returns what the traced function receives for it
        (the Variable itself, or a GuardedArray standing for an array)."""
        data = arg._data if isinstance(arg, Variable) else arg
        value = Value(name, self._input_shape(len(self.inputs), data.shape), data.dtype)
        self.inputs.append((Node("input", outputs=[value]), arg))
        if not isinstance(arg, Variable):
            return GuardedArray(arg, value, name, self)
        self.known[id(arg)] = Traced(arg, value, input=True, before_grad=arg.grad)
        return arg

    def _input_shape(self, position: int, shape: tuple) -> tuple:
        """The shape an input Value records: a name where the size is symbolic (never
        0 or 1, which broadcast: those stay numbers), with the relation that it is
        `least` or more, which the graph's broadcasting relies on."""
        out = []
        for axis, n in enumerate(shape):
            name = self.symbolic.get((position, axis))
            if name is None or n < 2:
                out.append(n)
                continue
            size = Size.name(name)
            self.hints.setdefault(name, n)
            if not any(r.left == size and r.op == ">=" for r in self.relations):
                self.relations.append(Relation(size, ">=", self.least))
            out.append(size)
        return tuple(out)

    # ---- hooks called by the core -----------------------------------------------
    def installed(self) -> None:
        # Also after a pause (layers initialise under set_tracer(None), drawing
        # from np.random): draws made while paused are not the run's.
        if self.random is None:
            self.random = RandomWatch()
        else:
            self.random.restart()

    def created(self, var: Variable, data):
        known = self.known[id(var)] = Traced(var, computed=True)
        if isinstance(data, GuardedArray):  # Variable(h.data): the same value as h
            data._alive("Variable()")
            known.value = self.value_of(data)
            return data.array
        known.literal = True
        return data

    def read(self, var: Variable):
        data = var._data
        if data is None:
            return None
        known = self.known.get(id(var))
        if known is not None and known.value is None and known.literal:
            return data  # a literal made in the run, not yet read by any op
        # State not captured yet gets its Value when first used: reading .shape or
        # .dtype captures nothing.
        return GuardedArray(data, known and known.value, var, self)

    def forward(self, function, xs):
        # Symbolic sizes in attrs (x.reshape(B * T, C)): forward computes with this
        # run's numbers; the op keeps the SymInts, which record() turns into Sizes.
        symbolic = {k: v for k, v in vars(function).items() if holds_symint(v)}
        if not symbolic:
            return function.forward(*xs)
        vars(function).update({k: hints(v) for k, v in symbolic.items()})
        try:
            return function.forward(*xs)
        finally:
            vars(function).update(symbolic)

    def record(self, function, inputs, outputs) -> None:
        self.random.look(self.name, function.random)
        self.recorded.add(function)
        attrs = function.attrs
        for name, value in attrs.items():
            self._check_attr(function.op_name, name, value)
        ins = [self.resolve(x) for x in inputs]
        shapes = [y._data.shape for y in outputs]
        if any(has_size(v.shape) for v in ins) or holds_symint(list(attrs.values())):
            shapes = self._symbolic_shapes(function, inputs, ins, attrs, shapes)
            attrs = {k: exprs(v) for k, v in attrs.items()}
        node = Node("op", function.op_name, ins, attrs,
                    [Value(None, shape, y._data.dtype) for shape, y in zip(shapes, outputs)])
        frame = user_frame()
        node.source = (frame.f_code.co_filename, frame.f_lineno) if frame else None
        self.ops.append(node)
        for y, value in zip(outputs, node.outputs):
            self.known[id(y)] = Traced(y, value, computed=True)

    def _symbolic_shapes(self, function, inputs, values, attrs, shapes):
        """The op's result shapes as expressions of the inputs' sizes: broadcasting
        for an elementwise op, else its shape rule (OpRecord.result_types) on SymInts,
        where any size the rule reads as a number becomes fixed (a relation)."""
        record = RECORDS[function.op_name]
        typed = [_Typed(symbolic_shape(v.shape, x._data.shape, self.relations), v.dtype)
                 for v, x in zip(values, inputs)]
        symbolic = None
        if record.elementwise:
            symbolic = [broadcast_shapes(*(t.shape for t in typed))] * len(shapes)
        elif record.shapes is not None:
            symbolic = record.shapes([t.shape for t in typed], attrs)
        if symbolic is None:  # no rule: sizes forward on zeros reads become fixed
            symbolic = [shape for shape, _ in record.result_types(attrs, typed)]
        if [hints(tuple(s)) for s in symbolic] != [tuple(s) for s in shapes]:
            raise GraphError(f"{function.op_name}: its shape rule gives "
                             f"{', '.join(map(str, symbolic))} where forward made "
                             f"{', '.join(map(str, shapes))}; the rule is wrong")
        return [exprs(tuple(s)) for s in symbolic]

    def shape_of(self, var: Variable):
        known = self.known.get(id(var))
        value = known.value if known is not None else None
        if value is None or not has_size(value.shape) or var._data is None:
            return var._data.shape
        return symbolic_shape(value.shape, var._data.shape, self.relations)

    def shape_of_guard(self, guard: GuardedArray):
        value = guard.value
        if value is None and isinstance(guard.source, Variable) and \
                guard.source._data is guard.array:
            value = getattr(self.known.get(id(guard.source)), "value", None)
        if value is None or not has_size(value.shape):
            return guard.array.shape
        return symbolic_shape(value.shape, guard.array.shape, self.relations)

    def cleared(self, var: Variable) -> None:
        # W.cleargrad() before backward(), as model.cleargrads() tells the observer:
        # if the run never read the old gradient, the graph does not depend on it.
        observer = layers.observer()
        if observer is not None:
            observer.cleared([var])

    def left_cleared(self, clears) -> None:
        """(Variable, its old .grad) of those the run cleared (model.cleargrads()): each
        left None is state the replay clears too, read or not (a head this call does
        not use, a frozen backbone), so that no update outside sees a stale gradient;
        one without .data yet, a guard that its .grad stays None."""
        for var, grad in clears:
            known = self.known.get(id(var))
            if var.grad is not None or known is not None and (
                    known.node is None or known.node.attrs["field"] != "data"):
                continue  # set again, made in the run, an argument or carried state
            if known is None and var._data is None:
                self.unbuilt.append(var)
            elif known is None:
                self.capture(var).before_grad = grad  # (lower() and check put it back)
            self.grads_cleared.add(id(var))

    def backward_step(self, function) -> None:
        # A Function made before the call belongs to a graph the replay will not have
        # (an argument computed eagerly, an LSTM state not cut with unchain_backward).
        if function not in self.recorded:
            raise TraceError(
                f"backward() in {self.name} reached {function.op_name}, computed before "
                f"the call ({where()}); a replay has no graph behind its arguments and "
                f"state\n  fix: compute that value inside the traced function, or cut the "
                f"graph before the call (y.unchain()), or give the traced function y.data")

    def _check_attr(self, op, name, value):
        # An attribute is fixed at recording; an array computed in (or fed to) the
        # run stored there would be replayed frozen (x[arange(n), t] with t an input).
        if isinstance(value, (tuple, list)):
            for item in value:
                self._check_attr(op, name, item)
        elif isinstance(value, GuardedArray):
            raise TraceError(
                f"attribute {name} of op {op} holds a traced array in {self.name} "
                f"({where()}); attributes are fixed when recorded, so every replay "
                f"would reuse this one\n  fix: pass the array as an input of an op "
                f"(for labels, e.g. F.softmax_cross_entropy(x, t) or F.embed_id), or make "
                f"it a static argument")

    def assigned(self, var: Variable, value):
        known = self.known.get(id(var))
        if isinstance(value, GuardedArray):
            value._alive(".data =")
            if value.array is not var._data and known is not None and known.in_place:
                raise TraceError(
                    f"{self.label(var)}.data gets a new array after an in-place write into its "
                    f"old one ({where()}); a replay does one\n  fix: assign new arrays both times")
            self.assign(var, self.value_of(value))
            return value.array
        if value is None:
            raise TraceError(f"{self.label(var)}.data = None in {self.name} ({where()}): "
                             f"a static graph cannot remove a value")
        if not isinstance(value, cuda.array_types):
            return value  # the core's type check explains
        if (known is None or known.node is None and known.value is None and not
                known.literal) and _moved_to_other_device(var._data, value):
            # State moved between CPU and GPU before the run first reads it (optimizer
            # hyperparameters follow their parameters): the move persists, so later
            # calls find it done, as if it had happened before this call.
            return value
        if known is not None and (known.literal or known.value is not None and
                                  known.node is None and not known.input):
            # A Variable of the run is given a new literal array: it is fresh at every
            # call, so the array is a constant of the graph (taken when first read).
            known.value, known.literal = None, True
            return value
        raise TraceError(
            f"{self.label(var)}.data is assigned an array that no recorded Function "
            f"produced, in {self.name} ({where()})\n  the graph would freeze that array "
            f"into every replay\n  fix: compute the new value with dezero functions (under "
            f"dezero.no_grad()) and assign its .data")

    def assign(self, var: Variable, source: Value) -> None:
        """Record that `var` now holds `source`: a state write, or data flow."""
        known = self.known.get(id(var))
        if known is None or known.node is None:
            if known is not None and known.input:
                raise TraceError(
                    f"{self.name} assigns .data of its argument {known.value.name} "
                    f"({where()}); a replay cannot write into its arguments\n  fix: return "
                    f"the new value instead")
            if known is not None and (known.value is not None or known.literal):
                # A Variable of this run: plain data flow, fresh at every call.
                known.value, known.literal = source, False
                return
            known = self.capture(var)
        target = known.node.outputs[0]
        if known.before_data is None:
            target.shape, target.dtype = source.shape, source.dtype
        elif (source.shape, source.dtype) != (target.shape, target.dtype):
            raise TraceError(
                f"{self.label(var)}.data ({target.type}) is assigned a {source.type} in "
                f"{self.name} ({where()}); a static graph cannot change the type of state")
        if known.write is None:
            self.written.append(known)
        known.write = known.value = source  # reads later in the run see the new value

    def concretized(self, var: Variable, how: str) -> None:
        known = self.known.get(id(var))
        if known is not None and known.literal:
            return  # a literal made in the run: its value is known for good
        value = known and known.value
        raise TraceError(
            f"{how} of a traced value in {self.name} ({where()})\n  value: "
            f"{self.describe(var, value)}\n  fix: make it a static argument "
            f"(static_argnames=...), or express the branch with an op (shapes and dtypes "
            f"are fine to branch on)")

    def describe(self, var, value) -> str:
        if value is None or getattr(self.known.get(id(var)), "node", None) is not None:
            return f"captured state {self.label(var)}" + (f": {value.type}" if value else "")
        producer = next((n.op for n in self.ops if any(v is value for v in n.outputs)), None)
        if producer is not None:
            return f"{value.type} from {producer}"
        return f"{value.type} (input {value.name})" if value.name else value.type

    # ---- guards (dezero.static.guard) ------------------------------------------------
    def guard(self, var: Variable) -> GuardedArray:
        """What user code sees for the result of arithmetic on guards."""
        return GuardedArray(var._data, self.resolve(var), None, self)

    def value_of(self, guard: GuardedArray) -> Value:
        source = guard.source
        if isinstance(source, Variable) and source._data is guard.array:
            # .data of a Variable that still holds this array: its current value
            # (an in-place write through another name for the array included).
            guard.value = self.resolve(source)
        elif guard.value is None and getattr(self.known.get(id(source)), "node", None) is not None:
            guard.value = self.known[id(source)].node.outputs[0]  # read before its capture
        return guard.value

    def resolve(self, var: Variable) -> Value:
        """The Value a Variable stands for, capturing or making a const on first sight."""
        known = self.known.get(id(var))
        if known is not None and known.value is not None:
            return known.value
        if known is not None and known.literal:  # its value becomes a const node
            data = var._data
            node = Node("const", outputs=[Value(None, data.shape, data.dtype)],
                        payload=data.copy())
            self.const_sources.append(data)
            self.consts.append(node)
            known.value = node.outputs[0]
            return known.value
        return self.capture(var).node.outputs[0]

    def capture(self, var: Variable) -> Traced:
        """Read `var` by reference: at every replay its current .data is used."""
        data = var._data
        if data is not None and any(overlap(a, data) for a in self.overwritten):
            raise TraceError(
                f"{self.name} reads {self.label(var)} ({where()}), which shares an array "
                f"that the run wrote into in place through another Variable; the replay "
                f"could not know they still share it\n  fix: assign a new array instead "
                f"(v.data = (v - ...).data), or give each its own copy")
        if data is None:
            self.uninitialised.append(self.label(var))
        # (no array yet: typed by the first write)
        value = Value(None, (), np.float32) if data is None else Value(None, data.shape, data.dtype)
        known = self.known.setdefault(id(var), Traced(var))
        known.node = Node("state", outputs=[value], attrs={"field": "data"},
                          payload=DataSlot(var))
        if known.attr is not None:
            holder, name = known.attr
            known.node.attrs = {"field": "attr", "name": name, "of": type(holder).__name__}
            known.node.payload = AttrSlot(holder, name)
        known.before_data, known.before_grad, known.value = data, var.grad, value
        self.captures.append(known)
        return known

    def label(self, var: Variable) -> str:
        return var.name or f"a Variable of shape {getattr(var._data, 'shape', None)}"

    # ---- the end of the run -------------------------------------------------------
    def finish(self, result, attr_writes=(), places=None) -> StaticGraph:
        """Build the graph once the traced function has returned `result`;
        attr_writes: (object, name, Variable) for attributes the run set."""
        self.random.finish(self.name)
        outputs: list[Value] = []
        out_tree = self._flatten_output(result, outputs)
        grad_writes = self._grad_writes()
        attr_sources = [(holder, name, self.resolve(var)) for holder, name, var in attr_writes
                        if var._data is not None]
        self._bind_grads()
        self._name_values(places or {})
        self.finished = True
        changed = [(known, known.write) for known in self.written
                   if known.write is not known.node.outputs[0]]
        writes = [Node("write", inputs=[known.node.outputs[0], source], attrs={"field": "data"}
                       | ({"in_place": True} if known.in_place else {}))
                  for known, source in changed if known.node.attrs["field"] != "attr"]
        # State read through an attribute (self.s.data += x.data on carried state):
        # the replay gives the attribute the new value, as for any carried value.
        set_later = {(id(holder), name) for holder, name, _ in attr_sources}
        for known, source in changed:
            slot = known.node.payload
            if known.node.attrs["field"] == "attr" and \
                    (id(slot.holder), slot.name) not in set_later:
                attr_sources.append((slot.holder, slot.name, source))
        writes += [Node("write", inputs=[target] + ([source] if source else []),
                        attrs={"field": "grad"}) for target, source in grad_writes]
        writes += [Node("write", inputs=[source], payload=AttrSlot(holder, name),
                        attrs={"field": "attr", "name": name, "of": type(holder).__name__})
                   for holder, name, source in attr_sources]
        nodes = [n for n, _ in self.inputs] + [c.node for c in self.captures] + \
            self.consts + self.ops + writes + [Node("output", inputs=outputs)]
        graph = StaticGraph(self.name, nodes, out_tree)
        graph.relations = self._settle_sizes(nodes)
        graph.hints = dict(self.hints)
        arrays = [getattr(arg, "_data", arg) for _, arg in self.inputs] + \
            [c.before_data for c in self.captures]
        if any(cuda.cp is not None and isinstance(a, cuda.cp.ndarray) for a in arrays):
            graph.device = "gpu"
        return graph

    def _settle_sizes(self, nodes) -> list:
        """The relations a replay checks; sizes the run fixed (int(B), B == 32) or
        made equal (T == B) are replaced in every shape and attr of the graph."""
        replacements, relations = settle(self.relations)
        if replacements:
            for node in nodes:
                node.attrs = substitute(node.attrs, replacements)
                for value in node.outputs:
                    value.shape = substitute(value.shape, replacements)
        return relations

    def _flatten_output(self, obj, outputs):
        # An argument returned as it is (dropout in test mode): the replay returns the
        # very object passed in, as eager code does.
        argument = [i for i, (_, arg) in enumerate(self.inputs)
                    if arg is obj or arg is getattr(obj, "array", None)]
        if argument:
            return ["input", argument[0]]
        if isinstance(obj, Variable):
            known = self.known.get(id(obj))
            if known is None or known.node is not None:  # (None: not read in the run)
                name = self.label(obj)
                raise TraceError(
                    f"{self.name} returns {name}, a Variable made before the call; eager "
                    f"code returns that very object (later changes to it show through), a "
                    f"replay only its arguments or new Variables\n  fix: return a new "
                    f"value ({name} * 1.0), or read {name} itself after the call")
            outputs.append(self.resolve(obj))
            return ["var", len(outputs) - 1]
        if isinstance(obj, GuardedArray):
            outputs.append(self.value_of(obj))
            return ["array", len(outputs) - 1]
        if isinstance(obj, cuda.array_types):
            raise TraceError(
                f"{self.name} returns an array that no recorded Function produced; "
                f"replays would return it frozen\n  fix: return the Variable, or "
                f"compute the array with dezero functions")
        kind, extra = container(obj) or (None, None)
        if kind == "dict":
            return [kind, [[k, self._flatten_output(v, outputs)] for k, v in obj.items()], *extra]
        if kind:
            return [kind, [self._flatten_output(o, outputs) for o in obj], *extra]
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return ["static", obj]
        raise TraceError(f"{self.name} returns a {type(obj).__name__} ({where()}); a replay can "
                         f"rebuild Python scalars, tuples, lists, dicts, namedtuples, Ordered"
                         f"Dicts and defaultdicts\n  fix: return those (a namedtuple for fields)")

    def _grad_writes(self):
        """(target, source or None) for each .grad that backward() left changed."""
        writes = []
        for capture in self.captures:
            if capture.node.attrs["field"] == "attr":
                continue  # the attribute write replaces this Variable, grad and all
            if capture.var.grad is not capture.before_grad or id(capture.var) in self.grads_cleared:
                writes.append((capture.node.outputs[0], capture.var.grad))
        for node, arg in self.inputs:
            before = getattr(self.known.get(id(arg)), "before_grad", None)
            if not isinstance(arg, Variable) or arg.grad is before:
                continue
            if before is not None and getattr(self.known.get(id(before)), "node", None):
                raise TraceError(
                    f"{self.name}: argument {node.outputs[0].name} had a .grad before the "
                    f"call and backward() added to it; clear it first (x.cleargrad()), or "
                    f"keep the accumulated gradient in a Variable made outside")
            writes.append((node.outputs[0], arg.grad))
        return [(target, None if grad is None else self.resolve(grad))
                for target, grad in writes]

    def _bind_grads(self):
        # A Variable captured because backward() accumulated into it is the old
        # .grad of some state: replays must read that state's .grad, not the object.
        for owner in self.captures:
            grad = self.known.get(id(owner.before_grad))
            if grad is not None and grad is not owner and grad.node is not None and \
                    grad.node.attrs["field"] == "data":
                grad.node.attrs = {"field": "grad", "of": owner}
                grad.node.payload = GradSlot(owner.var)

    def _name_values(self, places: dict):
        # State is named by where the code reaches it (reach.survey's places, dotted:
        # model.l0.W, an Adam moment adam.ms[l0.W]; names.py), else by Variable.name;
        # its name in generated code is that made an identifier (model_l0_W).
        used: set[str] = {identifier(self.name, "graph")}

        def fresh(base):
            name, i = base, 0
            while name in used or not name.isidentifier():
                i += 1
                name = f"{base}_{i}"
            used.add(name)
            return name

        for node, _ in self.inputs:
            node.outputs[0].name = fresh(identifier(node.outputs[0].name, "x"))
        # .grad state last: it is named after the state whose .grad it is.
        for capture in sorted(self.captures, key=lambda c: c.node.attrs["field"] == "grad"):
            node, value = capture.node, capture.node.outputs[0]
            if node.attrs["field"] == "grad":
                owner = node.attrs["of"].node.outputs[0]
                node.attrs["of"] = owner.name
                value.name = fresh(owner.name + "_grad")
                value.place = owner.place and owner.place + ".grad"
            elif node.attrs["field"] == "attr":
                value.name = fresh(identifier(node.attrs["name"], "s"))
            else:
                place = places.get(id(capture.var))
                base = "_".join(re.findall(r"\w+", place)) if place else capture.var.name
                value.name = fresh(identifier(base, "s"))
                # A place that is one identifier (a global) is the name, or its fresh
                # variant if an argument has it: names stay unique, places too.
                if place and not place.isidentifier():
                    value.place = printable(dotted(place))
        # No computed value is named like the root of a place: no `m` beside `m.l0.W`.
        used.update(c.node.outputs[0].label.split(".")[0] for c in self.captures)
        n = 0
        for node in self.consts + self.ops:
            for value in node.outputs:
                while letter_name(n) in used:  # never a keyword or builtin
                    n += 1
                value.name = fresh(letter_name(n))

    # ---- state before and after (for check=True and lower) -------------------------
    def state_before(self):
        """[(variable, data, grad)] as they were before the run."""
        return [(c.var, c.before_data, c.before_grad) for c in self.captures] + [
            (arg, arg._data, self.known[id(arg)].before_grad) for _, arg in self.inputs
            if isinstance(arg, Variable)]

    def state_names(self):
        """(name, whether its .grad is compared) for each entry of state_before()."""
        return [(c.node.outputs[0].label, c.node.attrs["field"] != "attr")
                for c in self.captures] + [(node.outputs[0].name, True) for node, arg in
                                           self.inputs if isinstance(arg, Variable)]


def _moved_to_other_device(old, new) -> bool:
    """True if `new` is `old` copied between numpy and cupy (same type and values)."""
    if old is None or type(old) is type(new) or old.shape != new.shape or \
            old.dtype != new.dtype:
        return False
    return bool(np.array_equal(cuda.as_numpy(old), cuda.as_numpy(new)))

