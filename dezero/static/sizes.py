"""Symbolic sizes: a dimension named `B`, or an expression of names and numbers (`B*T`).

The bottom of static/ (it imports only numpy): ir.py lets a Value's shape and an op's
attrs hold a Size where a recording or a placeholder left a size open; passes compare
them, backends evaluate them at replay (`evaluate`, with the sizes `bind` reads from
the arguments' shapes), printing and graph files write them as text (`str`, `parse`).
A Size is pure data: `==` between two Sizes says whether they are the same
expression. While a trace records, user code sees SymInts instead (symint.py), which
know the size of this run and turn every decision on one into a guard.

    B, T = Size.name("B"), Size.name("T"); str(B * T - 1)  # 'B*T - 1'
    evaluate((B * T, 3), {"B": 2, "T": 5})                 # (10, 3)
"""
from __future__ import annotations

import operator
import re

# =============================================================================
# Size: names, numbers and + - * // / between them
# =============================================================================

# op -> (Python's operator, precedence); "name" and "neg" are the leaves and unary minus.
_BINARY = {"+": (operator.add, 1), "-": (operator.sub, 1), "*": (operator.mul, 2),
           "//": (operator.floordiv, 2), "/": (operator.truediv, 2)}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Size:
    """An expression of named sizes: op is "name" (args: the name) or a binary op of
    _BINARY (args: two operands, each a Size, an int or, under "/", a float)."""

    __slots__ = ("op", "args", "_hash")

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args
        self._hash = hash((op, args))

    @staticmethod
    def name(name: str) -> Size:
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(f"a size's name must be an identifier such as 'B' or "
                             f"'seq_len', got {name!r}")
        return Size("name", (name,))

    @property
    def integer(self) -> bool:
        """Whether the expression is an int for int names ("/" makes a float)."""
        if self.op == "name":
            return True
        return self.op != "/" and all(isinstance(a, int) or isinstance(a, Size) and a.integer
                                      for a in self.args)

    # ---- arithmetic: a new Size, folded where both sides are numbers ---------------
    def _binary(self, op, other, swap=False):
        if not isinstance(other, (Size, int, float)) or isinstance(other, bool):
            return NotImplemented
        a, b = (other, self) if swap else (self, other)
        return combine(op, a, b)

    __add__ = lambda self, o: self._binary("+", o)          # noqa: E731
    __radd__ = lambda self, o: self._binary("+", o, True)   # noqa: E731
    __sub__ = lambda self, o: self._binary("-", o)          # noqa: E731
    __rsub__ = lambda self, o: self._binary("-", o, True)   # noqa: E731
    __mul__ = lambda self, o: self._binary("*", o)          # noqa: E731
    __rmul__ = lambda self, o: self._binary("*", o, True)   # noqa: E731
    __floordiv__ = lambda self, o: self._binary("//", o)    # noqa: E731
    __rfloordiv__ = lambda self, o: self._binary("//", o, True)  # noqa: E731
    __truediv__ = lambda self, o: self._binary("/", o)      # noqa: E731
    __rtruediv__ = lambda self, o: self._binary("/", o, True)  # noqa: E731

    def __neg__(self):
        return combine("-", 0, self)

    # ---- data: equal when the same expression --------------------------------------
    def __eq__(self, other):
        return isinstance(other, Size) and self._hash == other._hash and \
            self.op == other.op and self.args == other.args

    def __hash__(self):
        return self._hash

    def __index__(self):
        raise TypeError(f"the size {self} has no value until a call gives one; "
                        f"evaluate it with sizes.evaluate(size, bindings)")

    def __str__(self):
        return _text(self, 0)

    __repr__ = __str__


def combine(op: str, a, b):
    """a op b, folded: numbers compute; an expression of + - * alone takes its one
    written form (canonical: B - 1 whether from B - 1 or -1 + B, B*T*8 from B*T*2*4),
    so equal sizes compare equal; x // 1 is x."""
    if not isinstance(a, Size) and not isinstance(b, Size):
        return _BINARY[op][0](a, b)
    if op == "//" and type(b) is int and b == 1:
        return a
    if op == "//":  # a sum of products divided by a product of its every term: exact
        quotient = _divided(_polynomial(a), _polynomial(b))
        if quotient is not None:
            return _canonical(quotient)
    size = Size(op, (a, b))
    polynomial = _polynomial(size) if op in "+-*" else None
    return size if polynomial is None else _canonical(polynomial)


def _divided(a, b) -> dict | None:
    """a / b where b is one term (c * names) that divides every term of a, else None
    (B*T*4 // B is T*4; B*T // 2 stays as it is written)."""
    if a is None or b is None or len(b) != 1:
        return None
    (names_, c), = b.items()
    quotient = {}
    for term, k in a.items():
        rest = list(term)
        for n in names_:
            if n not in rest:
                return None
            rest.remove(n)
        if k % c:
            return None
        quotient[tuple(rest)] = k // c
    return quotient


def _canonical(polynomial: dict):
    """The Size (or int) of a sum of products of names: terms of more names first,
    added before subtracted, then by name, the number last (B*T*8 + B - 1, T - B)."""
    out = None
    for names_, c in sorted(polynomial.items(), key=lambda t: (-len(t[0]), t[1] < 0, t[0])):
        term = None
        for name in names_:
            term = Size("name", (name,)) if term is None else \
                Size("*", (term, Size("name", (name,))))
        term = abs(c) if term is None else term if abs(c) == 1 else Size("*", (term, abs(c)))
        if out is None:
            out = term if c > 0 else -term if type(term) is int else Size("-", (0, term))
        else:
            out = Size("+" if c > 0 else "-", (out, term))
    return 0 if out is None else out


def _text(x, outer: int) -> str:
    if not isinstance(x, Size):
        return repr(x) if x >= 0 else f"({x!r})"
    if x.op == "name":
        return x.args[0]
    precedence = _BINARY[x.op][1]
    a, b = x.args
    if x.op == "-" and type(a) is int and a == 0:  # -B, -(B*2)
        return f"-{_text(b, 3)}"
    # The right operand binds tighter but after + and a product after *: B - (T - 1),
    # B // (2*T), B*(T//2); B + T - 1 and B*T*8 need no brackets.
    tighter = not (x.op == "+" or x.op == "*" and isinstance(b, Size) and b.op in ("*", "name"))
    text = f"{_text(a, precedence)}{_spaced(x.op)}{_text(b, precedence + tighter)}"
    return f"({text})" if precedence < outer else text


def _spaced(op: str) -> str:
    return f" {op} " if op in "+-" else op


# =============================================================================
# Walking values that hold sizes: names, evaluate, has_size
# =============================================================================


def names(value) -> set:
    """The names a value (a Size, or a tuple, list, dict or slice of them) holds."""
    if isinstance(value, Size):
        return {value.args[0]} if value.op == "name" else set().union(*map(names, value.args))
    if isinstance(value, (tuple, list)):
        return set().union(*map(names, value)) if value else set()
    if isinstance(value, dict):
        return names(list(value.values()))
    if isinstance(value, slice):
        return names((value.start, value.stop, value.step))
    return set()


def has_size(value) -> bool:
    """Whether a value (shape, attrs ...) holds a Size anywhere."""
    if isinstance(value, Size):
        return True
    if isinstance(value, (tuple, list)):
        return any(map(has_size, value))
    if isinstance(value, dict):
        return any(map(has_size, value.values()))
    if isinstance(value, slice):
        return has_size((value.start, value.stop, value.step))
    return False


def evaluate(value, bindings: dict):
    """value with every Size replaced by its number under bindings (name -> int)."""
    if isinstance(value, Size):
        if value.op == "name":
            try:
                return bindings[value.args[0]]
            except KeyError:
                raise KeyError(f"no value for the size {value.args[0]}") from None
        a, b = (evaluate(x, bindings) for x in value.args)
        return _BINARY[value.op][0](a, b)
    if isinstance(value, tuple):
        return tuple(evaluate(x, bindings) for x in value)
    if isinstance(value, list):
        return [evaluate(x, bindings) for x in value]
    if isinstance(value, dict):
        return {k: evaluate(x, bindings) for k, x in value.items()}
    if isinstance(value, slice):
        return slice(*evaluate((value.start, value.stop, value.step), bindings))
    return value


def substitute(value, replacements: dict):
    """value with names replaced by what replacements maps them to (ints or Sizes)."""
    if isinstance(value, Size):
        if value.op == "name":
            return replacements.get(value.args[0], value)
        a, b = (substitute(x, replacements) for x in value.args)
        return combine(value.op, a, b)
    if isinstance(value, tuple):
        return tuple(substitute(x, replacements) for x in value)
    if isinstance(value, list):
        return [substitute(x, replacements) for x in value]
    if isinstance(value, dict):
        return {k: substitute(x, replacements) for k, x in value.items()}
    if isinstance(value, slice):
        return slice(*substitute((value.start, value.stop, value.step), replacements))
    return value


def evaluator(value, names: tuple):
    """A function of the sizes' values (a sequence, in `names` order) that gives
    `value` (a Size, an int, or tuples of them) evaluated: made once for a kernel,
    called at each replay, without a dict of bindings per call."""
    place = {n: i for i, n in enumerate(names)}

    def make(x):
        if isinstance(x, tuple):
            parts = [make(y) for y in x]
            return lambda values: tuple(p(values) for p in parts)
        if not isinstance(x, Size):
            return lambda values: x
        if x.op == "name":
            i = place[x.args[0]]
            return lambda values: values[i]
        f, g, op = make(x.args[0]), make(x.args[1]), _BINARY[x.op][0]
        return lambda values: op(f(values), g(values))

    return make(value)


def c_text(x, spell) -> str:
    """A size as a C++ integer expression, each name as spell(name) writes it (an
    element of the kernel's array of sizes, a scalar parameter); sizes are never
    negative, so // is C's division."""
    if not isinstance(x, Size):
        return str(int(x))
    if x.op == "name":
        return spell(x.args[0])
    if x.op == "/":
        raise ValueError(f"the size {x} is no integer; a kernel's sizes are")
    a, b = (c_text(y, spell) for y in x.args)
    return f"({a} {'/' if x.op == '//' else x.op} {b})"


def count(shape: tuple):
    """The number of elements of a shape: an int, or a Size where the shape holds one."""
    total = 1
    for n in shape:
        total = combine("*", total, n)
    return total


# =============================================================================
# Binding: the sizes of one call, read from its arrays' shapes
# =============================================================================


def bind(patterns, shapes, labels=None):
    """(bindings, None) for the names in patterns (the shapes a graph takes) read from
    shapes (a call's arrays), or (None, why not): a rank, a static size or a relation
    (two places of one name, an expression) that this call breaks."""
    bindings: dict = {}
    later = []
    for i, (pattern, shape) in enumerate(zip(patterns, shapes)):
        label = labels[i] if labels else f"input {i}"
        if len(pattern) != len(shape):
            return None, f"{label} has {len(shape)} axes, the graph takes {len(pattern)} " \
                         f"({_shape_text(pattern)})"
        for axis, (want, got) in enumerate(zip(pattern, shape)):
            if isinstance(want, Size) and want.op == "name":
                bound = bindings.setdefault(want.args[0], got)
                if bound != got:
                    return None, f"{label} axis {axis} is {got}, but {want} is {bound} " \
                                 f"(the graph takes {_shape_text(pattern)})"
            elif isinstance(want, Size):
                later.append((label, axis, want, got, pattern))
            elif want != got:
                return None, f"{label} axis {axis} is {got}, the graph takes {want} " \
                             f"({_shape_text(pattern)})"
    for label, axis, want, got, pattern in later:
        try:
            value = evaluate(want, bindings)
        except KeyError:
            return None, f"{label} axis {axis} is {want}, whose names no axis gives alone"
        if value != got:
            return None, f"{label} axis {axis} is {got}, but {want} is {value} " \
                         f"(the graph takes {_shape_text(pattern)})"
    return bindings, None


def _shape_text(shape) -> str:
    return f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"


# =============================================================================
# Guards: what a recording decided on its sizes, checked at every replay
# =============================================================================

_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}


class Relation:
    """left op right held when the graph was recorded (B >= 2, B*T == 640 ...)."""

    __slots__ = ("left", "op", "right", "why")

    def __init__(self, left, op: str, right, why: str = ""):
        self.left, self.op, self.right, self.why = left, op, right, why

    def holds(self, bindings: dict) -> bool:
        return _COMPARE[self.op](evaluate(self.left, bindings), evaluate(self.right, bindings))

    def __eq__(self, other):
        return isinstance(other, Relation) and (self.left, self.op, self.right) == \
            (other.left, other.op, other.right)

    def __hash__(self):
        return hash((self.left, self.op, self.right))

    def __str__(self):
        return f"{self.left} {self.op} {self.right}"

    __repr__ = __str__


def settle(relations):
    """(replacements, relations left): a relation that fixes a name (B == 32) or makes
    two names one (T == B) becomes a replacement of that name, applied to the others;
    those left that hold no name any more are dropped (the recording saw them hold),
    and each is kept once."""
    replacements: dict = {}
    pending = list(relations)
    changed = True
    while changed:
        changed = False
        left = []
        for r in pending:
            a, b = substitute(r.left, replacements), substitute(r.right, replacements)
            if r.op == "==" and isinstance(a, Size) and a.op == "name" and a != b:
                replacements = {k: substitute(v, {a.args[0]: b}) for k, v in
                                replacements.items()} | {a.args[0]: b}
                changed = True
            elif r.op == "==" and isinstance(b, Size) and b.op == "name" and a != b:
                replacements = {k: substitute(v, {b.args[0]: a}) for k, v in
                                replacements.items()} | {b.args[0]: a}
                changed = True
            elif names((a, b)):
                left.append(Relation(a, r.op, b, r.why))
        pending = left
    kept = list(dict.fromkeys(pending))
    # A name's least value where the recording said so (B >= 2): then B != 1 and
    # B != 0 say no more.
    least: dict = {}
    for r in kept:
        if r.op == ">=" and type(r.right) is int and isinstance(r.left, Size) and \
                r.left.op == "name":
            least[r.left] = max(least.get(r.left, r.right), r.right)
    kept = [r for r in kept if not _implied(r, least)]
    return replacements, kept


def _lower_bound(x, least: dict | None):
    """The least value x takes where each name is least[name] or more (None: every
    name is 1 or more); None where no bound is known (a difference, a quotient)."""
    if type(x) is int:
        return x
    if not isinstance(x, Size) or x.op not in ("name", "+", "*"):
        return None
    if x.op == "name":
        return 1 if least is None else least.get(x)
    a, b = (_lower_bound(y, least) for y in x.args)
    if a is None or b is None or x.op == "*" and (a < 0 or b < 0):
        return None
    return a + b if x.op == "+" else a * b


def _polynomial(x) -> dict | None:
    """x as a sum of products of names, {(names...): coefficient} (None where it
    divides): two expressions of + - * are equal at every size exactly when these are."""
    if type(x) is int:
        return {(): x} if x else {}
    if not isinstance(x, Size) or x.op not in ("name", "+", "-", "*"):
        return None
    if x.op == "name":
        return {(x.args[0],): 1}
    a, b = (_polynomial(y) for y in x.args)
    if a is None or b is None:
        return None
    terms: dict = {}
    pairs = [(ma + mb, ca * cb) for ma, ca in a.items() for mb, cb in b.items()] \
        if x.op == "*" else [*a.items(), *((m, -c if x.op == "-" else c) for m, c in b.items())]
    for names_, c in pairs:
        key = tuple(sorted(names_))
        terms[key] = terms.get(key, 0) + c
    return {m: c for m, c in terms.items() if c}


def _implied(r: Relation, least: dict) -> bool:
    """B*T != 1, B != 0, B + 1 > 2, B*T*2*4 == B*T*8: true at every size the names'
    bounds allow (the bounds themselves are kept)."""
    if r.op in ("==", "<=", ">=") and (left := _polynomial(r.left)) is not None and \
            left == _polynomial(r.right):
        return True
    if r.op not in ("!=", ">", ">=") or type(r.right) is not int or (
            r.op == ">=" and least.get(r.left) == r.right):
        return False
    bound = _lower_bound(r.left, least)
    return bound is not None and (bound > r.right or r.op == ">=" and bound >= r.right)


def positive(x) -> bool:
    """Whether a size is 1 or more at every call a graph takes (each name is; a
    trace's are 2 or more): a positive int, a name, sums and products of them; not
    T - 1, which may be 0."""
    bound = _lower_bound(x, None)
    return bound is not None and bound >= 1


def broken(relations, bindings: dict) -> Relation | None:
    """The first relation these sizes break, or None."""
    return next((r for r in relations if not r.holds(bindings)), None)


# =============================================================================
# Text: parse (what str writes, read back without eval)
# =============================================================================

_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)|(\d+)|([A-Za-z_]\w*)|"
                    r"(//|[-+*/()]))")


def parse(text: str):
    """The Size (or number) that str() wrote as text; anything else raises ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"a size is written as text, got {type(text).__name__}")
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"not a size: {text!r} (at {text[pos:]!r})")
        real, integer, name, op = match.groups()
        tokens.append(float(real) if real else int(integer) if integer else
                      Size.name(name) if name else op)
        pos = match.end()
    value, rest = _parse_sum(tokens, text)
    if rest:
        raise ValueError(f"not a size: {text!r}")
    return value


def _parse_sum(tokens, text):
    value, tokens = _parse_product(tokens, text)
    while tokens and tokens[0] in ("+", "-"):
        op, (right, tokens) = tokens[0], _parse_product(tokens[1:], text)
        value = combine(op, value, right)
    return value, tokens


def _parse_product(tokens, text):
    value, tokens = _parse_atom(tokens, text)
    while tokens and tokens[0] in ("*", "//", "/"):
        op, (right, tokens) = tokens[0], _parse_atom(tokens[1:], text)
        if op != "*" and type(right) is int and right == 0:
            raise ValueError(f"not a size: {text!r} (a division by 0)")
        value = combine(op, value, right)
    return value, tokens


def _parse_atom(tokens, text):
    if not tokens:
        raise ValueError(f"not a size: {text!r} (it ends early)")
    head, tokens = tokens[0], tokens[1:]
    if head == "(":
        value, tokens = _parse_sum(tokens, text)
        if not tokens or tokens[0] != ")":
            raise ValueError(f"not a size: {text!r} (a '(' is not closed)")
        return value, tokens[1:]
    if head == "-":
        value, tokens = _parse_atom(tokens, text)
        return combine("-", 0, value), tokens
    if isinstance(head, str):
        raise ValueError(f"not a size: {text!r} (unexpected {head!r})")
    return head, tokens


_RELATION = re.compile(r"\s(==|!=|<=|>=|<|>)\s")


def parse_relation(text: str) -> Relation:
    """The Relation that str() wrote as text ('B*T == 640'); anything else raises
    ValueError."""
    parts = _RELATION.split(text) if isinstance(text, str) else []
    if len(parts) != 3:
        raise ValueError(f"not a relation of sizes: {text!r} (a size, one of "
                         f"{', '.join(_COMPARE)} between spaces, a size)")
    return Relation(parse(parts[0]), parts[1], parse(parts[2]))
