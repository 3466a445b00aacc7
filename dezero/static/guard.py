"""GuardedArray: what user code sees of a traced array while a trace records.

Part of the tracer stage (tracer.py makes the guards). During a recording, `.data`
of a traced Variable and every array argument reach user code as a GuardedArray.
It tells its shape, dtype, ndim, size and len(), and records arithmetic with other
guards, arrays and Python numbers as dezero ops (under no_grad, as eager numpy
builds no graph), so the book's in-place updates such as `W.data -= lr *
W.grad.data` become state writes, replayed in place. Any other use (a Python number, numpy math,
indexing, .tolist()) would freeze the numbers it read into every replay, so it
raises TraceError naming the line and the way out. Functions never see a guard:
the core hands it to the tracer, which unwraps it to the real array. Also here:
with_leaves and unguarded (arguments in, results out); random numbers drawn
outside an op are watched in randomness.py.

    h.data.shape   # fine while tracing;   float(h.data)   # TraceError
"""
from __future__ import annotations

import math

import numpy as np

import dezero.functions as F
from dezero import cuda
from dezero.core import TracedArray, Variable, current_tracer, no_grad
from dezero.errors import TraceError, where
from dezero.static.ir import type_str
from dezero.static.lowering import container, rebuilt

# =============================================================================
# GuardedArray: shape and dtype readable, arithmetic recorded, numbers refused
# =============================================================================

# Python operator -> the dezero function that records it (first operand: the guard).
_OPERATORS = {"add": F.add, "radd": F.add, "sub": F.sub, "rsub": F.rsub, "mul": F.mul,
              "rmul": F.mul, "truediv": F.div, "rtruediv": F.rdiv, "pow": F.pow,
              "matmul": F.matmul, "rmatmul": F.rmatmul}
# numpy ufuncs that are these operators, called as np.add(a, b) or by `array + guard`.
_UFUNCS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "truediv",
           np.power: "pow", np.matmul: "matmul"}
_NUMPY_1 = int(np.__version__.split(".")[0]) < 2
# numpy functions whose result depends only on the shape and dtype of their argument.
_SHAPE_ONLY = {np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.shape, np.ndim,
               np.size}


class GuardedArray(TracedArray):
    """A traced array as user code sees it during a recording.

    array   the real array (what eager code would have seen)
    value   the graph Value it stands for (None for state not captured yet)
    source  the Variable whose .data it is, the argument's name for an array
            argument, or None for the result of arithmetic on guards
    """

    __slots__ = ("array", "value", "source", "tracer")
    # Below Variable's 200: `guard * variable` is the Variable's operator.
    __array_priority__ = 100

    def __init__(self, array, value, source, tracer):
        self.array, self.value, self.source, self.tracer = array, value, source, tracer

    # ---- the type is fine to read ------------------------------------------------
    # Sizes the recording makes symbolic are SymInts (symint.py) in shape and size.
    shape = property(lambda self: self.tracer.shape_of_guard(self))
    dtype = property(lambda self: self.array.dtype)
    ndim = property(lambda self: self.array.ndim)
    size = property(lambda self: math.prod(self.shape))
    itemsize = property(lambda self: self.array.itemsize)
    nbytes = property(lambda self: self.size * self.array.itemsize)

    def __len__(self):
        if not self.ndim:
            return len(self.array)  # numpy's TypeError
        return int(self.shape[0])  # Python needs an int: a symbolic size is fixed

    def __repr__(self):
        return f"<traced array {type_str(self.shape, self.dtype)}: its numbers are not " \
               f"known while tracing>"

    # ---- arithmetic: recorded as dezero ops ------------------------------------
    def _operator(self, name, other):
        if isinstance(other, Variable):
            return NotImplemented  # the Variable's operator runs (and keeps the graph)
        self._alive(f"`{name}`")
        if isinstance(other, (GuardedArray, np.generic)) or _NUMPY_1 and not self.ndim and \
                isinstance(other, (int, float, complex)) and type(self.array) is np.ndarray:
            # numpy's promotion among arrays and numpy scalars (a float64 scalar is
            # strong in numpy 2), not as_operand's, which takes it as a Python float;
            # so too for a 0-d array and a Python number, which numpy 1.x promotes as
            # two scalars (0-d float32 * 2.0 is float64 there)
            other = Variable(other if isinstance(other, GuardedArray) else np.asarray(other))
        return self._recorded(_OPERATORS[name], Variable(self), other)

    def _in_place(self, name, other):
        result = self._operator(name, other)
        if result is NotImplemented:
            self._refuse(f"in-place `{name}` with a Variable")
        if result.dtype != self.dtype:  # numpy's in-place operators cast back
            if not np.can_cast(result.dtype, self.dtype, "same_kind"):
                raise TypeError(f"in-place {name}: cannot cast {result.dtype} back to "
                                f"{self.dtype} (numpy's same_kind rule)")
            result = self._recorded(F.astype, Variable(result), self.dtype)
        return self._write_back(result)

    def operand_of(self, ref):
        # numpy returns a scalar for 0-d arithmetic (a guard with no source); as a
        # float64 it is a Python float to as_operand, taking a float ref's dtype.
        if self.source is None and self.shape == () and self.dtype == np.float64 and \
                ref.dtype.kind in "fc" and ref.dtype != np.float64:
            return self._recorded(F.astype, Variable(self), ref.dtype)
        return self

    def __neg__(self):
        self._alive("`-`")
        return self._recorded(F.neg, Variable(self))

    def __pos__(self):
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = _UFUNCS.get(ufunc)
        if name is None or method != "__call__" or kwargs or len(inputs) != 2:
            self._refuse(f"numpy's {ufunc.__name__}")
        if inputs[0] is self:
            return self._operator(name, inputs[1])
        return self._operator("r" + name, inputs[0]) if "r" + name in _OPERATORS \
            else self._refuse(f"numpy's {ufunc.__name__} with it second")

    def __array_function__(self, func, types, args, kwargs):
        if func in _SHAPE_ONLY:
            return func(*(a.array if isinstance(a, GuardedArray) else a for a in args),
                        **kwargs)
        self._refuse(f"numpy's {func.__name__}")

    def __array__(self, dtype=None, copy=None):
        self._refuse("conversion to a numpy array")

    # ---- full writes: v.data[...] = new ----------------------------------------
    def __setitem__(self, key, new):
        if not (key is Ellipsis or key == slice(None)):
            self._refuse(f"a write into part of it ([{key!r}] = ...)")
        self._alive("`[...] =`")
        with no_grad():
            # The array's own module: np.asarray of a cupy array raises on the GPU.
            new = Variable(new) if isinstance(new, GuardedArray) else \
                cuda.get_array_module(self.array).asarray(new)
            y = F.broadcast_to(F.astype(new, self.dtype), self.shape)
        self._write_back(self.tracer.guard(y))

    # ---- reading numbers: refused (and the operators in _REFUSED below) ---------
    def __getitem__(self, key):
        self._refuse(f"indexing [{key!r}]")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)  # protocol probes (numpy's, copy's) look for these
        self._refuse(f".{name}")

    # ---- helpers ----------------------------------------------------------------
    def _recorded(self, function, *args):
        """function(*args) recorded as ops of the trace (under no_grad, as eager numpy
        builds no graph), its result a guard."""
        with no_grad():
            return self.tracer.guard(function(*args))

    def _write_back(self, result):
        # In place, as in eager code: the array itself changes, so every Variable
        # that shares it sees the new value, and so does every name for this guard.
        source, tracer = self.source, self.tracer
        if isinstance(source, str):
            raise TraceError(
                f"{tracer.name} writes into its argument {source} in place ({where()}); a "
                f"replay cannot write into its arguments\n  fix: {source} = {source} + ... "
                f"(a new array), or return the new value")
        if isinstance(source, Variable) and source._data is self.array:
            shared = [arg for _, arg in tracer.inputs if arg is not source and
                      overlap(getattr(arg, "_data", arg), self.array)] + \
                [c.var for c in tracer.captures if c.var is not source and
                 overlap(c.var._data, self.array)]
            if shared:
                raise TraceError(
                    f"{tracer.name} writes in place ({where()}) into an array that "
                    f"{tracer.label(source)} shares with an argument or another state "
                    f"Variable; the replay could not know they still share it\n  fix: "
                    f"assign a new array instead (v.data = (v - ...).data), or give each "
                    f"its own copy")
            for other in tracer.known.values():  # Variables of the run sharing it
                if other.computed and other.value is not None and other.var._data is self.array:
                    other.value = result.value
            tracer.assign(source, result.value)
            known = tracer.known[id(source)]
            # into the state's own array, not into a new one the run gave it
            known.in_place = known.in_place or known.before_data is self.array
            tracer.overwritten.append(self.array)
            if known.node is not None and known.before_data is self.array:
                known.before_data = self.array.copy()  # to put back (check, lower)
        self.array[...] = result.array
        self.value = result.value
        return self

    def _alive(self, what):
        if self.tracer.finished or self.tracer is not current_tracer():
            raise TraceError(
                f"{what} of an array read while {self.tracer.name} was being traced, after "
                f"that recording ended ({where()}); it stands for a value of the trace, "
                f"not for numbers\n  fix: keep the Variable (or return it from the traced "
                f"function) instead of its .data")

    def _refuse(self, what):
        self._alive(what)
        var = self.source if isinstance(self.source, Variable) else None
        raise TraceError(
            f"{what} of a traced array in {self.tracer.name} ({where()})\n  value: "
            f"{self.tracer.describe(var, self.tracer.value_of(self))}\n  the recording "
            f"would freeze the numbers it read into every replay\n  fix: use dezero "
            f"functions on the Variable, move this outside the traced function, or make "
            f"the value a static argument (static_argnames=...)")

    __hash__ = object.__hash__


# Special methods that would read the numbers -> what the refusal calls them.
_REFUSED = {"bool": "bool()", "float": "float()", "int": "int()", "index": "use as an index",
            "complex": "complex()", "iter": "iteration", "abs": "`abs()`", "lt": "`<`",
            "le": "`<=`", "gt": "`>`", "ge": "`>=`", "eq": "`==`", "ne": "`!=`",
            "floordiv": "`//`", "mod": "`%`"}
for _name in _OPERATORS:
    setattr(GuardedArray, f"__{_name}__", lambda self, other, n=_name: self._operator(n, other))
for _name in ("add", "sub", "mul", "truediv", "pow", "matmul"):
    setattr(GuardedArray, f"__i{_name}__", lambda self, other, n=_name: self._in_place(n, other))
for _name, _what in _REFUSED.items():
    setattr(GuardedArray, f"__{_name}__", lambda self, *other, w=_what: self._refuse(w))


def root(array):
    """The array whose memory `array` views (itself if it owns its memory)."""
    while isinstance(array.base, cuda.array_types):
        array = array.base
    return array


def overlap(a, b) -> bool:
    """Whether arrays a and b may share memory: one array, or views of one buffer."""
    return a is b or (a is not None and b is not None and root(a) is root(b) and
                      cuda.get_array_module(a).may_share_memory(a, b))


# =============================================================================
# Arguments and results: with_leaves, unguarded
# =============================================================================


def with_leaves(args, kwargs, static_positions, static_names, leaves):
    """args and kwargs with their arrays and Variables replaced, in signature order
    (positions, then keywords by name; static ones skipped), by `leaves`."""
    leaves = iter(leaves)

    def walk(obj):
        if isinstance(obj, (Variable, *cuda.array_types)):
            leaf = next(leaves)
            if isinstance(obj, Variable) and obj.grad is not None:
                next(leaves)  # its .grad: an input of its own (trace.flatten), no argument
            return leaf
        return mapped(obj, walk)

    args = [a if i in static_positions else walk(a) for i, a in enumerate(args)]
    kwargs = {k: kwargs[k] if k in static_names else walk(kwargs[k]) for k in sorted(kwargs)}
    return args, kwargs


def unguarded(obj, behind=None):
    """obj with each GuardedArray replaced by its array (what eager code returns);
    the list `behind`, if given, receives the Variable each guard is .data of."""
    if isinstance(obj, GuardedArray):
        if behind is not None and isinstance(obj.source, Variable):
            behind.append(obj.source)
        return obj.array
    return mapped(obj, lambda item: unguarded(item, behind))  # finish() refuses the rest


def mapped(obj, fn):
    """A container like obj (lowering.container's kinds) of fn(item) for its items;
    anything else as it is."""
    kind, extra = container(obj) or (None, None)
    if kind == "dict":
        return rebuilt(kind, extra, {k: fn(v) for k, v in obj.items()})
    return rebuilt(kind, extra, [fn(o) for o in obj]) if kind else obj
