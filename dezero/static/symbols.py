"""Define-and-run from symbols: placeholders, dezero.compile, Builder and Script.

A placeholder is a Variable without numbers: its data is an AbstractArray (a shape
and a dtype). A Function called on one computes no numbers (abstract evaluation):
the core hands it to abstract_forward, which gives each result its shape from the
op's shape rule (the `shapes` fact, broadcasting for elementwise ops) and its dtype.
Sizes named by strings ("B") are carried as stand-in numbers, which the one tracer
(tracer.py) records as Sizes, so the graph runs for any size.

Recording: placeholders made outside a Builder build the eager creator graph only;
compile(outputs) walks it back from the outputs, and feeds every Function call, in
the order they ran, to Tracer.record. Inside `with Builder(...)` a Tracer is
installed for the block, so a training step (backward, optimizer update) records
its state reads and writes as trace() does.

    a = dezero.placeholder("a", ()); f = dezero.compile(a * 2 + 1); f(a=np.array(3.0))
"""
from __future__ import annotations

import itertools
import weakref

import numpy as np

from dezero.core import Constant, Function, Variable, current_tracer, set_tracer
from dezero.op_record import RECORDS, broadcast_shapes
from dezero.static.graph import StaticGraph
from dezero.static.names import is_source_name
from dezero.static.passes import optimize
from dezero.static.symint import hints
from dezero.static.tracer import Traced, Tracer, _Typed

# Named sizes stand in as distinct odd numbers far from the sizes code writes (3, 1):
# each one's shape rule runs on them, and the tracer records the names instead. Each
# value also keeps its shape at the next even numbers (`alt`): the sizes that differ
# there are those that hold a name.
_STAND_IN_OF: dict = {}
_FIXED: set = set()  # the fixed sizes of placeholders: no name stands as one of them
_SMALL = 1 << 20  # elements up to which an op without a rule runs forward on zeros
_serials = itertools.count()  # placeholders become a graph's inputs in order of making
_abstract_results: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class AbstractArray:
    """The data of a placeholder and of what ops compute from it: a shape (stand-in
    numbers for named sizes) and a dtype, no numbers. Anything that needs numbers
    raises, naming the placeholder."""

    __array_ufunc__ = None  # numpy ufuncs refuse it (TypeError)

    def __init__(self, shape, dtype, source: str, alt=None):
        self._shape, self.dtype, self.source = tuple(shape), np.dtype(dtype), source
        self._alt = self._shape if alt is None else tuple(alt)

    @property
    def shape(self):
        """The shape; outside a recording (no Builder), a size that holds a name is an
        UnboundSize, which refuses to be computed with (its number is a stand-in)."""
        if self._alt == self._shape or current_tracer() is not None:
            return self._shape
        names = getattr(self, "symbols", ("?",) * len(self._shape))
        return tuple(UnboundSize(self.source, name) if n != a else n
                     for n, a, name in zip(self._shape, self._alt, names))

    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: UnboundSize(self.source) if self._alt != self._shape and
                    current_tracer() is None else int(np.prod(self._shape)))

    def _refuse(self, how="its numbers", error=TypeError):
        raise error(f"{how} of {self.source}: a placeholder has no numbers, only "
                        f"a shape and dtype\n  fix: f = dezero.compile(outputs), then "
                        f"f(name=array) computes with numbers")

    def __array__(self, *_, **__):
        self._refuse()

    def __array_function__(self, func, types, args, kwargs):
        if func is np.ones_like and self.ndim == 0:  # the seed of loss.backward()
            return np.ones((), self.dtype)
        self._refuse(f"np.{func.__name__}" + (" (backward() of a non-scalar: sum it first)"
                                              if func is np.ones_like else ""))

    def __float__(self):
        self._refuse("float()")

    def __int__(self):
        self._refuse("int()")

    def __bool__(self):
        self._refuse("a branch on the value (bool())")

    def __getattr__(self, name):  # array methods (x.sum()); not symbols or serial
        if name in ("symbols", "serial") or name.startswith("__"):
            raise AttributeError(name)
        self._refuse(f".{name}", AttributeError)

    def __repr__(self):
        return f"AbstractArray(shape={self.shape}, dtype={self.dtype})"

    @staticmethod
    def abstract_forward(function: Function, xs):
        """The results of `function` on these inputs, as AbstractArrays."""
        return abstract_forward(function, xs)


class UnboundSize:
    """A size that holds a name (B), read in Python outside a Builder: no recording
    keeps what is computed from it, so its number (a stand-in) must not leak into the
    graph; every use refuses, with the way out (no int, so numpy asks it too)."""

    __slots__ = ("source", "name")

    def __init__(self, source, name="?"):
        self.source, self.name = source, name

    def __repr__(self):  # the name, where the placeholder gave it
        return self.name

    __str__ = __repr__

    def _refuse(self, *_):
        raise TypeError(f"a size of {self.source} that holds a name was read in Python "
                        f"outside a dezero.Builder, where its number stands in for the "
                        f"name and no recording would keep what is computed from it\n  fix: "
                        f"define the graph in `with dezero.Builder(...) as b:` with "
                        f"b.input(...), where a size read in Python is recorded")


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "divmod", "lshift",
              "rshift", "and", "or", "xor", "radd", "rsub", "rmul", "rtruediv", "rfloordiv",
              "rmod", "rpow", "rdivmod", "eq", "ne", "lt", "le", "gt", "ge", "hash", "index",
              "int", "float", "bool", "format", "neg", "abs", "round"):
    setattr(UnboundSize, f"__{_name}__", UnboundSize._refuse)


def _operator(name):
    return lambda self, *_: self._refuse(f"Python's {name}")


for _name in ("add", "sub", "mul", "truediv", "floordiv", "pow", "matmul", "mod"):
    for _form in ("__{}__", "__r{}__", "__i{}__"):
        setattr(AbstractArray, _form.format(_name), _operator(_name))
for _name in ("neg", "lt", "le", "gt", "ge", "getitem", "setitem"):
    setattr(AbstractArray, f"__{_name}__", _operator(_name))


def abstract_forward(function, xs):
    record = RECORDS.get(function.op_name)
    if record is None:
        raise TypeError(f"{function.op_name}: not a registered op, so it cannot run on "
                        f"placeholders")
    source = next(x.source for x in xs if isinstance(x, AbstractArray))
    source = source if source.startswith("a value") else f"a value computed from {source}"
    shapes, alt = [_plain_shape(x) for x in xs], [_plain_shape(x, alt=True) for x in xs]
    out = _result_types(function, record, xs, shapes)
    if current_tracer() is None and alt != shapes:
        alt = [s for s, _ in _result_types(function, record, xs, alt)]
    else:  # in a recording the tracer knows the names: no second shape
        alt = [s for s, _ in out]
    ys = tuple(AbstractArray(s, d, source, a) for (s, d), a in zip(out, alt))
    _abstract_results[function] = ys
    return ys if len(ys) > 1 else ys[0]


def _plain_shape(x, alt=False) -> tuple:
    """The ints of x's shape (an AbstractArray's stand-ins, or at the next numbers)."""
    if isinstance(x, AbstractArray):
        return x._alt if alt else x._shape
    return tuple(x.shape)


def _result_types(function, record, xs, shapes) -> list:
    """[(shape, dtype)] of function's results on inputs of these shapes (xs' dtypes).
    Sizes in its attrs (a Builder's reshape to (B*T, C)) go in as the numbers the shapes
    hold; the tracer records the expressions."""
    attrs = {k: hints(v) for k, v in function.attrs.items()}
    typed = [x if isinstance(x, np.ndarray) else _Typed(s, x.dtype) for x, s in zip(xs, shapes)]
    if record.elementwise:
        out = [(broadcast_shapes(*shapes), t) for _, t in record.result_types(attrs, typed)]
    elif sum(int(np.prod(s)) for s in shapes) <= _SMALL:
        out = record.result_types(attrs, typed)  # the dtypes forward gives, exactly
    elif record.shapes is not None:
        # the float inputs' dtype (scores beside int labels, a table beside its ids)
        floats = [x.dtype for x in xs if x.dtype.kind == "f"]
        dtype = np.result_type(*(floats or [x.dtype for x in xs]))
        out = [(tuple(s), dtype) for s in record.shapes(shapes, attrs)]
    elif record.types is not None:
        out = record.result_types(attrs, typed)
    else:
        raise TypeError(f"{function.op_name} cannot run on placeholders of shapes "
                        f"{', '.join(map(str, shapes))}: it has no shape rule (the "
                        f"'shapes' fact)\n  fix: give {function.op_name} a shape rule, "
                        f"or use smaller sizes")
    return [(tuple(s), d) for s, d in out]


def placeholder(name: str, shape, dtype=np.float32) -> Variable:
    """A Variable without numbers: `shape` holds ints and names of sizes ("B")."""
    if not is_source_name(name):
        raise ValueError(f"placeholder: its name must be an identifier (no keyword or "
                         f"builtin, no leading '_'): the graph's input is called so, got "
                         f"{name!r}")
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(n, str) and is_source_name(n) or isinstance(n, (int, np.integer))
            and not isinstance(n, bool) and n >= 0 for n in shape):
        raise TypeError(f"placeholder {name}: shape {shape!r} must be a tuple of sizes, "
                        f"each an int >= 0 or a name such as 'B'")
    stand_ins = [n if isinstance(n, str) else int(n) for n in shape]
    taken = {v + d for v in _STAND_IN_OF.values() for d in (0, 1)}  # (with their alts)
    fixed = [n for n in stand_ins if isinstance(n, int) and n in taken]
    if fixed:
        raise ValueError(f"placeholder {name}: the size {fixed[0]} is a number that stands "
                         f"for a named size while graphs are defined; a fixed size of it "
                         f"would be taken for the name (give that axis a name too)")
    _FIXED.update(n for n in stand_ins if isinstance(n, int))
    var = object.__new__(Variable)
    var.name, var.grad, var.creator, var.generation = name, None, None, 0
    var._data = AbstractArray([_stand_in(n) for n in stand_ins], dtype,
                              f"placeholder {name}", [_stand_in(n, 1) for n in stand_ins])
    var._data.symbols, var._data.serial = tuple(stand_ins), next(_serials)
    return var


def _stand_in(n, alt=0):
    if isinstance(n, int):
        return n
    if n not in _STAND_IN_OF:  # the same name stands for the same number everywhere
        _STAND_IN_OF[n] = next(v for v in range(1009, 1 << 30, 2) if v not in _FIXED and
                               v + 1 not in _FIXED and v not in _STAND_IN_OF.values())
    return _STAND_IN_OF[n] + alt


def is_placeholder(var) -> bool:
    return isinstance(var, Variable) and hasattr(var._data, "symbols")


def _add_placeholder(tracer: Tracer, var: Variable):
    position = len(tracer.inputs)
    for axis, n in enumerate(var._data.symbols):
        if isinstance(n, str):
            tracer.symbolic[(position, axis)] = n
    tracer.add_input(var.name, var)


def compile(outputs, name: str = "compiled") -> StaticGraph:
    """The StaticGraph of `outputs` (a Variable, a tuple or a dict of them) computed
    from placeholders: call it with arrays by name, f(a=..., b=...)."""
    leaves = list(_leaves(outputs))
    for v in leaves:
        if v.creator is None and not is_placeholder(v):
            raise TypeError(f"compile: output {v.name or v} was not computed by Functions "
                            f"from placeholders (made under no_grad()?), so no graph leads "
                            f"to it\n  fix: compute it from dezero.placeholder(...) values")
    functions, placeholders, seen = [], [], set()
    stack = [v.creator for v in leaves if v.creator is not None]
    placeholders += [v for v in leaves if is_placeholder(v)]
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        functions.append(f)
        for x in f.inputs:
            if x.creator is not None:
                stack.append(x.creator)
            elif is_placeholder(x) and all(x is not p for p in placeholders):
                placeholders.append(x)
    functions.sort(key=lambda f: f.generation)
    named = [p.name for p in placeholders]
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        raise ValueError(f"compile: two placeholders are named {twice[0]!r}; the graph's "
                         f"inputs are called by name, so each needs its own")
    tracer = Tracer(name, least=1)
    previous = set_tracer(tracer)
    try:
        for p in sorted(placeholders, key=lambda p: p._data.serial):
            _add_placeholder(tracer, p)
        for f in functions:
            for x in f.inputs:
                if isinstance(x, Constant) and id(x) not in tracer.known:
                    tracer.known[id(x)] = Traced(x, computed=True, literal=True)
            tracer.record(f, f.inputs, _outputs_of(f))
        return _finish(tracer, outputs)
    finally:
        set_tracer(previous)


def _finish(tracer, outputs):
    graph = optimize(tracer.finish(outputs))
    if graph.device == "gpu":  # state on the GPU: its constants too (made on the CPU)
        graph.to_gpu()
    return graph


def _outputs_of(f):
    ys = [ref() for ref in f.outputs]
    abstract = _abstract_results.get(f, ())
    for i, y in enumerate(ys):
        if y is None:  # a result nobody kept: a Variable for its type
            ys[i] = Variable.__new__(Variable)
            ys[i]._data, ys[i].name, ys[i].grad, ys[i].creator = abstract[i], None, None, f
    return ys


def _leaves(obj):
    if isinstance(obj, Variable):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _leaves(v)


class Builder:
    """Records a graph from named inputs while the block runs:

        with dezero.Builder("step") as b:
            x = b.input("x", ("B", 3)); b.output("y", model(x))
        script = b.build(); script.set_input("x", x); script.run()["y"]
    """

    def __init__(self, name: str = "script"):
        self.name, self.outputs, self.tracer, self._previous = name, {}, Tracer(name, least=1), None
        self.script = None

    def __enter__(self):
        self._previous = set_tracer(self.tracer)
        return self

    def __exit__(self, *exc):
        set_tracer(self._previous)
        stray = [c.var.name for c in self.tracer.captures if is_placeholder(c.var)]
        if exc[0] is None and not stray:
            for _, var in self.tracer.inputs:  # inputs take no gradient: give it as an output
                var.grad = None
            self.script = Script(_finish(self.tracer, dict(self.outputs)))
        # The block computed no numbers: state keeps its arrays for the runs.
        for var, data, grad in self.tracer.state_before():
            var._data, var.grad = data, grad
        if exc[0] is None and stray:
            raise TypeError(f"Builder {self.name}: placeholder {', '.join(stray)} was made "
                            f"outside it\n  fix: make inputs with b.input(name, shape)")

    def input(self, name: str, shape, dtype=np.float32) -> Variable:
        if any(var.name == name for _, var in self.tracer.inputs):
            raise ValueError(f"Builder {self.name}: an input is named {name!r} already; "
                             f"each input needs a name of its own")
        var = placeholder(name, shape, dtype)
        _add_placeholder(self.tracer, var)
        return var

    def output(self, name: str, var: Variable) -> None:
        if name in self.outputs:
            raise ValueError(f"Builder {self.name}: an output is named {name!r} already; "
                             f"each output needs a name of its own")
        self.outputs[name] = var

    def build(self) -> Script:
        if self.script is None:
            raise RuntimeError(f"Builder {self.name}: build() after the with block ends")
        return self.script


class Script:
    """A graph with named inputs, set one by one, and named outputs."""

    def __init__(self, graph: StaticGraph, backend=None):
        self.graph, self.backend, self.inputs = graph, backend, {}

    def compile(self, backend=None):
        """Make the replay now (else the first run() does); a new backend or device
        drops the compiled kernels and keeps the graph."""
        if backend is not None and backend != self.backend:
            self.graph._compiled, self.backend = {}, backend
        self.graph.compile(self.backend)
        return self

    def to_gpu(self):
        """The graph and every Variable it reads (the model's parameters, the optimizer's
        slots and hyperparameters, which no Python moves while a Script runs) to the GPU."""
        self.graph.to_gpu()
        for var in self.graph.state.values():
            var.to_gpu()
        return self

    def to_cpu(self):
        self.graph.to_cpu()
        for var in self.graph.state.values():
            var.to_cpu()
        return self

    def set_input(self, name: str, array) -> None:
        self.graph.arguments(**{name: array}, partial=True)  # checks name, rank, dtype
        self.inputs[name] = array

    def clear_inputs(self) -> None:
        self.inputs = {}

    def run(self) -> dict:
        args = self.graph.arguments(**self.inputs)
        return self.graph.compile(self.backend).run(args)

    def save(self, path: str) -> None:
        self.graph.save(path)

    @staticmethod
    def load(path: str) -> Script:
        return Script(StaticGraph.load(path))


