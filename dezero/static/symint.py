"""SymInt: a symbolic size as user code sees it while a trace records.

Part of the tracer stage (tracer.py makes them). While a recording makes some
dimensions symbolic, `x.shape` of a traced value holds a SymInt for each: the
size's expression (sizes.Size) and its value in this run (the hint). Arithmetic
on SymInts gives SymInts, so `x.reshape(B * T, C)` records the expression.
A decision on one (`==`, `<`, `if n:`, `int(n)`, numpy reading it as an index)
takes the hint and records the relation it relied on; the replay checks every
relation, so a graph is never replayed where one of its decisions would differ.

    B = x.shape[0]; (B * 2).hint  # 64 while recording at 32;  int(B)  # B == 32
"""
from __future__ import annotations

import math
import operator

import numpy as np

import dezero.functions as F
from dezero.core import TracedSize, as_operand
from dezero.static.sizes import Relation, Size, combine, has_size

# =============================================================================
# SymInt: expression and hint; decisions become relations
# =============================================================================

_NEGATED = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}


class SymInt(TracedSize):
    """expr: the Size (or number) it stands for; hint: its value in this run;
    relations: the recording's list of Relations, which decisions append to."""

    __slots__ = ("expr", "hint", "relations")

    def __init__(self, expr, hint, relations: list):
        self.expr, self.hint, self.relations = expr, hint, relations

    def _with(self, op, other, swap=False):
        if isinstance(other, SymInt):
            b, hb = self._own(other), other.hint
        elif isinstance(other, (int, float)) and not isinstance(other, bool):
            b = hb = other
        else:
            return NotImplemented
        a, ha = self.expr, self.hint
        if swap:
            a, b, ha, hb = b, a, hb, ha
        return SymInt(combine(op, a, b), combine(op, ha, hb), self.relations)

    __add__ = lambda self, o: self._with("+", o)           # noqa: E731
    __radd__ = lambda self, o: self._with("+", o, True)    # noqa: E731
    __sub__ = lambda self, o: self._with("-", o)           # noqa: E731
    __rsub__ = lambda self, o: self._with("-", o, True)    # noqa: E731
    __mul__ = lambda self, o: self._with("*", o)           # noqa: E731
    __rmul__ = lambda self, o: self._with("*", o, True)    # noqa: E731
    __floordiv__ = lambda self, o: self._with("//", o)     # noqa: E731
    __rfloordiv__ = lambda self, o: self._with("//", o, True)  # noqa: E731
    __truediv__ = lambda self, o: self._with("/", o)       # noqa: E731
    __rtruediv__ = lambda self, o: self._with("/", o, True)  # noqa: E731

    def __neg__(self):
        return SymInt(combine("-", 0, self.expr), -self.hint, self.relations)

    def __pos__(self):
        return self

    def _own(self, other):
        """other's expression in this recording: a size of another one (kept in a cache
        or an attribute past its trace) is the number it was there."""
        return other.expr if other.relations is self.relations else other.hint

    # ---- decisions: the hint decides, the relation is kept -------------------------
    def decide(self, op: str, other) -> bool:
        other_expr = self._own(other) if isinstance(other, SymInt) else other
        if op in ("==", "!=") and other_expr == self.expr:
            return op == "=="  # the same expression: equal at every size
        result = _COMPARE[op](self.hint, other.hint if isinstance(other, SymInt) else other)
        kept = op if result else _NEGATED[op]
        self.relations.append(Relation(self.expr, kept, other_expr))
        return result

    def _compare(self, op, other):
        if not isinstance(other, (SymInt, int, float)) or isinstance(other, bool):
            return NotImplemented
        return self.decide(op, other)

    __eq__ = lambda self, o: self._compare("==", o)  # noqa: E731
    __ne__ = lambda self, o: self._compare("!=", o)  # noqa: E731
    __lt__ = lambda self, o: self._compare("<", o)   # noqa: E731
    __le__ = lambda self, o: self._compare("<=", o)  # noqa: E731
    __gt__ = lambda self, o: self._compare(">", o)   # noqa: E731
    __ge__ = lambda self, o: self._compare(">=", o)  # noqa: E731

    def __hash__(self):
        # A dict or set lookup that misses compares nothing: the size is fixed (as a
        # hash equal to the number it compares equal to would let a miss pass unguarded).
        return hash(self.specialize())

    def operand_of(self, like):
        """What as_operand makes of it beside like (a Variable or array): the number
        as an op of the graph, in the dtype eager code gives the hint there."""
        dtype = as_operand(self.hint, like).dtype  # (a numpy or cupy array)
        return F.SizeNumber(self, dtype.name)(like)

    def __bool__(self):
        return self.decide("!=", 0)

    def specialize(self):
        """The hint, the size fixed to it for this graph (expr == hint); a size of a
        placeholder has no number to fix (its hint stands in for the name): refused."""
        if isinstance(self.relations, NoNumbers):
            raise TypeError(f"the size {self.expr} of a placeholder was read as a number "
                            f"(int(), text, a hash, {', '.join(_NUMERIC)} ...), which it "
                            f"has not while the graph is defined\n  fix: compute with it "
                            f"as a size (+ - * //, comparisons), or give the placeholder "
                            f"a fixed size there")
        self.decide("==", self.hint)
        return self.hint

    __index__ = __int__ = specialize

    def __array__(self, dtype=None, copy=None):
        # numpy math on a size (np.sqrt(1 / n)) computes with the number: fixed.
        return np.asarray(self.specialize(), dtype)

    def __float__(self):
        return float(self.specialize())

    def __format__(self, spec):
        return str(self) if not spec else format(self.specialize(), spec)

    def __str__(self):  # text is Python's to compute with (len(str(n))): the number
        if isinstance(self.relations, NoNumbers):
            return str(self.expr)  # a placeholder's size: its name is all it has
        return str(self.specialize())

    __repr__ = __str__


class NoNumbers(list):
    """The relations of a recording whose sizes have no numbers (placeholders): its
    SymInts refuse what would fix them to their stand-in hints."""


_NUMERIC = ("%", "**", "abs", "round")


def _on_numbers(op, swap=False):
    """An operation sizes do not express (%, **, abs, round, shifts ...): on the
    numbers, each size fixed to its own (a guard), as eager code computes it."""
    def number(x):
        return x.specialize() if isinstance(x, SymInt) else x
    if swap:
        return lambda self, other: op(number(other), self.specialize())
    return lambda self, *others: op(self.specialize(), *map(number, others))


for _name, _op in {"mod": operator.mod, "pow": operator.pow, "divmod": divmod,
                   "lshift": operator.lshift, "rshift": operator.rshift,
                   "and": operator.and_, "or": operator.or_, "xor": operator.xor}.items():
    setattr(SymInt, f"__{_name}__", _on_numbers(_op))
    setattr(SymInt, f"__r{_name}__", _on_numbers(_op, swap=True))
for _name, _op in {"abs": abs, "round": round, "invert": operator.invert,
                   "trunc": math.trunc, "floor": math.floor, "ceil": math.ceil}.items():
    setattr(SymInt, f"__{_name}__", _on_numbers(_op))


# =============================================================================
# Helpers for the tracer: exprs, hints, holds_symint, symbolic_shape
# =============================================================================


def exprs(value):
    """value with each SymInt replaced by its expression (attrs as the graph keeps them)."""
    if isinstance(value, SymInt):
        return value.expr
    if isinstance(value, tuple):
        return tuple(exprs(x) for x in value)
    if isinstance(value, list):
        return [exprs(x) for x in value]
    if isinstance(value, slice):
        return slice(*exprs((value.start, value.stop, value.step)))
    return value


def hints(value):
    """value with each SymInt replaced by its hint (what forward computes with)."""
    if isinstance(value, SymInt):
        return value.hint
    if isinstance(value, tuple):
        return tuple(hints(x) for x in value)
    if isinstance(value, list):
        return [hints(x) for x in value]
    if isinstance(value, slice):
        return slice(*hints((value.start, value.stop, value.step)))
    return value


def holds_symint(value) -> bool:
    if isinstance(value, SymInt):
        return True
    if isinstance(value, (tuple, list)):
        return any(map(holds_symint, value))
    if isinstance(value, slice):
        return holds_symint((value.start, value.stop, value.step))
    return False


class SymShape(tuple):
    """A shape holding SymInts. Shapes of two ranks are unequal whatever their sizes
    (as numpy's tuples say, with no relation on a size); slices and sums stay so."""

    __slots__ = ()

    def __eq__(self, other):
        if isinstance(other, tuple) and len(other) != len(self):
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = tuple.__hash__

    def __getitem__(self, key):
        item = tuple.__getitem__(self, key)
        return SymShape(item) if isinstance(key, slice) else item

    def __add__(self, other):
        return SymShape(tuple.__add__(self, tuple(other))) if isinstance(
            other, tuple) else NotImplemented

    def __radd__(self, other):
        return SymShape(tuple(other) + tuple(self)) if isinstance(other, tuple) \
            else NotImplemented


def symbolic_shape(shape, hint_shape, relations):
    """A shape of Sizes and ints as SymInts (ints stay ints) with this run's sizes."""
    if not has_size(shape):
        return tuple(shape)
    return SymShape(SymInt(n, h, relations) if isinstance(n, Size) else n
                    for n, h in zip(shape, hint_shape))
