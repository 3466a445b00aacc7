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

from dezero.core import Constant, Function, Variable, set_tracer
from dezero.op_record import RECORDS, broadcast_shapes
from dezero.static.graph import StaticGraph
from dezero.static.passes import optimize
from dezero.static.tracer import Traced, Tracer, _Typed

# Named sizes stand in as distinct odd numbers far from the sizes code writes (3, 1):
# each one's shape rule runs on them, and the tracer records the names instead.
_STAND_IN_OF: dict = {}
_SMALL = 1 << 20  # elements up to which an op without a rule runs forward on zeros
_serials = itertools.count()  # placeholders become a graph's inputs in order of making
_abstract_results: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class AbstractArray:
    """The data of a placeholder and of what ops compute from it: a shape (stand-in
    numbers for named sizes) and a dtype, no numbers. Anything that needs numbers
    raises, naming the placeholder."""

    __array_ufunc__ = None  # numpy ufuncs refuse it (TypeError)

    def __init__(self, shape, dtype, source: str):
        self.shape, self.dtype, self.source = tuple(shape), np.dtype(dtype), source

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape)))

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
    attrs, shapes = function.attrs, [tuple(x.shape) for x in xs]
    source = next(x.source for x in xs if isinstance(x, AbstractArray))
    source = source if source.startswith("a value") else f"a value computed from {source}"
    typed = [x if isinstance(x, np.ndarray) else _Typed(tuple(x.shape), x.dtype) for x in xs]
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
    ys = tuple(AbstractArray(s, d, source) for s, d in out)
    _abstract_results[function] = ys
    return ys if len(ys) > 1 else ys[0]


def placeholder(name: str, shape, dtype=np.float32) -> Variable:
    """A Variable without numbers: `shape` holds ints and names of sizes ("B")."""
    for n in shape:
        if not (isinstance(n, str) and n.isidentifier() or isinstance(n, int) and n >= 0):
            raise TypeError(f"placeholder {name}: shape {tuple(shape)} holds {n!r}; a size "
                            f"is an int >= 0 or a name such as 'B'")
    var = object.__new__(Variable)
    var.name, var.grad, var.creator, var.generation = name, None, None, 0
    var._data = AbstractArray([_stand_in(n) for n in shape], dtype, f"placeholder {name}")
    var._data.symbols, var._data.serial = tuple(shape), next(_serials)
    return var


def _stand_in(n):
    if isinstance(n, int):
        return n
    if n not in _STAND_IN_OF:  # the same name stands for the same number everywhere
        _STAND_IN_OF[n] = 1009 + 2 * len(_STAND_IN_OF)
    return _STAND_IN_OF[n]


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
    return optimize(tracer.finish(outputs))


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
        var = placeholder(name, shape, dtype)
        _add_placeholder(self.tracer, var)
        return var

    def output(self, name: str, var: Variable) -> None:
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
        self.graph.to_gpu()
        return self

    def to_cpu(self):
        self.graph.to_cpu()
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


