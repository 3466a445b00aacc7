"""The fast check: whether a call replays the entry that the last one replayed.

Used by trace.py. A traced call goes the general way (the signature of its arguments,
the cache, the structure's and the state's guards: loops and calls that cost a small
step about as much as its arithmetic) until a call has replayed an entry; from then on
a call with the same kinds of arguments asks that entry's fast check first, one
generated Python function that tests the same, one test a line. Where it says no, or
fails (a key gone from a layer), the general way runs and says why.

    check = fast_check(entry, key)   # None where key has parts it does not test
    print(check.source)
"""
from __future__ import annotations

import itertools

import numpy as np

from dezero.core import Config, Variable, current_tracer
from dezero.static import debugging
from dezero.static.ir import type_str
from dezero.static.names import printable
from dezero.static.sizes import Size, has_size, substitute
from dezero.static.sizes import names as names_of
from dezero.static.slots import DataSlot


def fast_check(entry, key: tuple):
    """A function of a call's positional arguments that is true only where the call
    would replay `entry` (trace.Entry): no trace records, the arguments have the
    signature `key`, every guard of the entry holds; false also where a test fails
    (another number of arguments, a key gone from a layer). None where `key` has parts
    it does not test (containers, static values, a .grad, a GPU array, attributes
    carried between calls): those calls take the general way."""
    count = len(key) - 2  # the arguments, then Config's flags and repeated Variables
    if count < 0 or key[-1] is not None or not all(
            type(p) is tuple and p[:1] == ("array",) and p[3] == "cpu" and not p[5]
            for p in key[:count]):
        return None
    env = {"_ndarray": np.ndarray, "_Variable": Variable, "_tracer": current_tracer,
           "_config": Config, "_debugging": debugging}

    def bind(value) -> str:
        """The name of a new global of the check holding value."""
        env[f"_g{len(env)}"] = value
        return f"_g{len(env) - 1}"
    names = [f"a{i}" for i in range(count)]
    tests = [("_tracer() is None", "no trace records"),
             ("_debugging.LEVEL < 2", "level 2 times each replay"),
             (f"(_config.train, _config.enable_backprop) == {bind(key[count])}", "Config")]
    bound: set = set()  # the symbolic sizes read so far (locals named _s_B ...)
    for name, (_, shape, dtype, _, is_variable, _) in zip(names, key):
        if is_variable:
            tests.append((f"type({name}) is _Variable and {name}.grad is None", None))
            name += "._data"
        same = f"{name}.shape == {bind(shape)}" if not has_size(shape) else \
            _sized(f"{name}.shape", shape, bound)
        tests.append((f"type({name}) is _ndarray and {same} and "
                      f"{name}.dtype == {bind(dtype)}", f"{type_str(shape, dtype)}"))
    tests += [(_code(r.left) + f" {r.op} " + _code(r.right), f"{r}")
              for r in entry.graph.relations]
    tests += [(f"{a} is not {b}", "two Variables") for (a, p), (b, q) in
              itertools.combinations(zip(names, key), 2) if p[4] and q[4]]
    tests += entry.structure.tests(bind)
    for t in entry.types:  # a Variable's .data read here, other slots by the guard
        data = f"{bind(t.slot.var)}._data" if type(t.slot) is DataSlot else None
        tests.append((f"{bind(t)}.check()" if data is None else
                      f"type({data}) is {bind(t.kind)} and {data}.shape == {bind(t.shape)} "
                      f"and {data}.dtype == {bind(t.dtype)}", f"state {t.name}"))
    tests += [(f"{bind(g.var)}.grad is None", f"{g.name}.grad") for g in entry.grad_unset]
    if entry.not_shared is not None:
        tests.append((f"{bind(entry.not_shared)}.check(({''.join(n + ', ' for n in names)}))",
                      "state written in place shares no array"))
    lines = [f"{test}{' and' if k < len(tests) - 1 else ')'}" + (
        f"  # {printable(note)}" if note else "") for k, (test, note) in enumerate(tests)]
    source = "\n".join([
        "def check(*args):", "    try:", f"        [{', '.join(names)}] = args",
        "        return (" + "\n                ".join(lines),
        "    except (AttributeError, KeyError, NameError, TypeError, ValueError):  # a key gone",
        "        return False  # the general way says why", ""])
    exec(compile(source, f"<fast check of {entry.graph.name}>", "exec"), env)
    check = env["check"]
    check.source = source
    debugging.log(4, f"fast check of {entry.graph.name}:\n{source}")
    return check


def _code(size) -> str:
    """A size as code over the check's locals: B is _s_B."""
    return str(substitute(size, {n: Size.name(f"_s_{n}") for n in names_of(size)}))


def _sized(shape_code: str, shape: tuple, bound: set) -> str:
    """The test that an array's shape fits a symbolic one: its rank, each static size,
    each name read once (then compared), each expression computed."""
    tests = [f"len({shape_code}) == {len(shape)}"]
    for axis, n in enumerate(shape):
        here = f"{shape_code}[{axis}]"
        if isinstance(n, Size) and n.op == "name" and n.args[0] not in bound:
            bound.add(n.args[0])
            tests.append(f"(_s_{n.args[0]} := {here}) is not None")
        else:
            tests.append(f"{here} == {_code(n) if isinstance(n, Size) else n}")
    return " and ".join(tests)
