"""OpRecord: the facts about one op, read once from its Function class when it is defined.

A bottom module (it imports only dezero.cuda): core.Function registers each subclass
here, and the trace compiler (passes, codegen, backends, saving, drawing) reads an
op's facts from its record, never from the class: forward's parameter names (the
placeholders of `cpp` and `py`), the attrs its constructor stores, its C++ and Python
spellings, the simplify facts, and whether it is random, collective, commutative or
elementwise. The facts themselves are documented on core.Function.

    record = RECORDS["mul"]; record.params  # ('x0', 'x1'); record.elementwise  # True
"""
from __future__ import annotations

import inspect
import math
import re
import warnings
from dataclasses import dataclass

import numpy as np

from dezero import cuda

# op name -> Function class, and op name -> its record; a recorded call (op, attrs) is
# rebuilt from here.
OPS: dict = {}
RECORDS: dict = {}

# =============================================================================
# OpRecord: the facts, own_fact (not inherited past an overridden forward)
# =============================================================================


def own_fact(cls, name: str):
    """A fact a class states about its forward (cpp, py, neutral ...): None when a
    subclass overrides forward after the class that states it, whose fact then says
    nothing about the new forward."""
    owner = next((k for k in cls.__mro__ if name in vars(k)), None)
    if owner is None or getattr(owner, "forward", None) is not cls.forward:
        return None
    return getattr(cls, name)


@dataclass(frozen=True, eq=False)
class OpRecord:
    """What the trace compiler knows about one op (one Function class)."""

    name: str             # the op name graphs and files use (cls.op_name)
    cls: type
    params: tuple         # forward's parameter names, without self
    arity: tuple          # (fewest, most) inputs forward takes
    attr_names: tuple | None  # the constructor's parameters (None: it takes **kwargs)
    cpp: object           # the C++ expression of an elementwise op (str, or a function of attrs)
    cpp_type: str | None  # the C++ type cpp yields where it is not the inputs' type
    reduce: str | None    # "sum", "max" or "min" for a reduction a kernel can fold in
    py: object            # the replay code's inline spelling (str, dict or function)
    neutral: dict | None  # simplify: {input position: constant} that leaves the other
    neutral_attrs: dict | None  # simplify: attrs that leave the input unchanged
    epilogue: object      # split_epilogues: (input shapes) -> (op, shape), or None
    parts: object         # split_parts: (input shapes, attrs) -> primitive steps, or None
    labels: str | None    # the parameter of class labels a row kernel reads per row
    fresh_result: bool    # forward returns an array it shares with nothing else
    device_only: bool     # forward reads its inputs only for their device
    types: object         # (input types, attrs) -> result types, not from forward on zeros
    shapes: object        # (input shapes, attrs) -> result shapes, in Python (symbolic sizes)
    random: bool
    collective: bool
    commutative: bool

    @property
    def elementwise(self) -> bool:
        """One value out per value in, broadcasting: the op has a C++ expression (and
        no labels, which it would read per row)."""
        return self.cpp is not None and self.labels is None

    def function(self, attrs: dict):
        """A Function instance with these attrs. They are set directly rather than
        passed to __init__, so an op whose constructor normalises its arguments is
        rebuilt exactly as recorded."""
        f = self.cls.__new__(self.cls)
        f.__dict__.update(attrs)
        return f

    def result_types(self, attrs: dict, inputs: list) -> list:
        """The (shape, dtype) of each result of the op on inputs of these types (anything
        with a shape and dtype): its `types` rule, else what forward makes of zeros of
        them, placeholders that take no memory (numpy's global random state put back
        after a random op). An elementwise op's result has its inputs' broadcast shape,
        and one element of each (with its axes: numpy 1 casts 0-d values otherwise)
        shows its dtype; a 0-d numpy array among the inputs goes in as its value."""
        types = [(tuple(x.shape), np.dtype(x.dtype)) for x in inputs]
        if self.types is not None:
            return self.types(types, attrs)
        shape = np.broadcast_shapes(*(s for s, _ in types)) if self.elementwise else None
        zeros = [x if isinstance(x, np.ndarray) and x.ndim == 0 else
                 np.broadcast_to(np.zeros((), d), s if shape is None else (1,) * len(s))
                 for x, (s, d) in zip(inputs, types)]
        state = np.random.get_state() if self.random else None
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the mean of no elements
                ys = self.function(attrs).forward(*zeros)
        finally:
            if state is not None:
                np.random.set_state(state)
        ys = map(as_result_array, ys if isinstance(ys, tuple) else (ys,))
        return [(y.shape if shape is None else shape, y.dtype) for y in ys]


def _record(cls) -> OpRecord:
    forward = list(inspect.signature(cls.forward).parameters.values())[1:]
    counts = (0, math.inf) if any(p.kind is p.VAR_POSITIONAL for p in forward) else \
        (sum(p.default is p.empty for p in forward), len(forward))
    attr_names = ()
    if cls.__init__ is not object.__init__:
        init = list(inspect.signature(cls.__init__).parameters.values())[1:]
        attr_names = None if any(p.kind is p.VAR_KEYWORD for p in init) else tuple(
            p.name for p in init if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    facts = {name: own_fact(cls, name) for name in ("cpp", "cpp_type", "reduce", "py",
                                                    "neutral", "neutral_attrs", "epilogue",
                                                    "parts", "labels", "types", "shapes")}
    return OpRecord(cls.op_name, cls, tuple(p.name for p in forward), counts, attr_names,
                    random=bool(cls.random), collective=bool(cls.collective),
                    commutative=bool(cls.commutative),
                    fresh_result=bool(own_fact(cls, "fresh_result")),
                    device_only=bool(own_fact(cls, "device_only")), **facts)


# =============================================================================
# Registration: register (called for every Function subclass)
# =============================================================================


def register(cls) -> None:
    """Name the op (snake case of the class; a user's op namespaced by its module so it
    never shadows dezero's), refuse a name two dezero modules claim, and record it."""
    if "op_name" not in cls.__dict__:
        base = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", cls.__name__).lower()
        cls.op_name = base if cls.__module__.startswith("dezero") \
            else f"{cls.__module__}.{cls.__qualname__}"
    registered = OPS.get(cls.op_name)
    if registered is not None and cls.__module__.startswith("dezero") \
            and registered.__module__ != cls.__module__:
        raise TypeError(f"op name {cls.op_name!r} is used by both "
                        f"{registered.__module__} and {cls.__module__}")
    OPS[cls.op_name] = cls
    RECORDS[cls.op_name] = _record(cls)


def as_result_array(y):
    """forward may return a numpy scalar for a 0-d result; a graph holds arrays."""
    return y if isinstance(y, cuda.array_types) else np.asarray(y)


def broadcast_shapes(*shapes):
    """numpy's broadcast of shapes, in Python so that it takes a trace's symbolic
    sizes too (an axis of 1 gives way; two others must be equal). A symbolic size
    is taken as no 1, with no relation: where it meets only itself or 1, a call
    where it is 1 broadcasts to the same shapes."""
    ndim = max(map(len, shapes), default=0)
    result = []
    for axis in range(ndim):
        out = 1
        for shape in shapes:
            n = shape[axis - ndim + len(shape)] if axis - ndim + len(shape) >= 0 else 1
            if isinstance(n, (int, np.integer)) and n == 1:
                continue
            if isinstance(out, (int, np.integer)) and out == 1:
                out = n
            elif not out == n:
                raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do "
                                 f"not broadcast (axis {axis}: {out} and {n})")
        result.append(out)
    return tuple(result)
