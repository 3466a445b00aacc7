"""Compiled or not, by measurement: each kernel of a loaded library is timed against
its group's numpy calls (a few calls each, on arrays of its inputs' types); a group
runs as numpy calls where they are clearly faster. The times are kept beside the
library in the kernel cache (<library>.json), so a later process decides alike
without timing again, and DEZERO_DEBUG=3 prints each decision with both times.

backends/ stage, used by cpu.py once a library is loaded.

    groups = measure.decide(library, groups)   # the groups that run compiled
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from dezero.op_record import as_result_array
from dezero.static import debugging

CALLS = 20         # timed calls each way at most (3 at least), the best counts
BUDGET_S = 0.05    # ... unless a group's calls took this long already
MARGIN = 1.1       # numpy calls must be this much faster to replace a kernel


def decide(library, groups: list) -> list:
    """The groups that run compiled; sets each group's `compiled` to its decision."""
    path = library.path.with_suffix(".json")
    times, where = _read(path, groups), "stored in the kernel cache"
    if times is None:
        times, where = {g.name: _time_both(library, g) for g in groups}, "measured"
        _write(path, times)
    for group in groups:
        kernel_us, numpy_us = times[group.name]
        group.compiled = kernel_us <= numpy_us * MARGIN
        how = "compiled" if group.compiled else "as numpy calls"
        debugging.log(3, f"kernel {group.name} runs {how}: {kernel_us:.1f} us a call, its "
                         f"{len(group.nodes)} numpy calls {numpy_us:.1f} us ({where})")
    return [g for g in groups if g.compiled]


def _time_both(library, group) -> tuple:
    """(kernel, numpy calls) best microseconds a call, on arrays in [0.5, 1)."""
    rng = np.random.default_rng(0)
    arrays = [np.asarray(rng.random(v.shape) * 0.5 + 0.5, v.dtype) for v in group.inputs]
    kernel = library.kernel(library.specs[group.name])
    functions = [n.record.function(n.attrs) for n in group.nodes]

    def numpy_calls():
        env = {id(v): a for v, a in zip(group.inputs, arrays)}
        for node, f in zip(group.nodes, functions):
            env[id(node.outputs[0])] = as_result_array(
                f.forward(*(env[id(v)] for v in node.inputs)))

    best, began = [float("inf")] * 2, time.perf_counter()
    with np.errstate(all="ignore"):
        for calls in range(CALLS):  # taking turns; the first calls warm up
            for k, fn in enumerate((lambda: kernel(*arrays), numpy_calls)):
                start = time.perf_counter()
                fn()
                best[k] = min(best[k], (time.perf_counter() - start) * 1e6)
            if calls >= 2 and time.perf_counter() - began > BUDGET_S:
                break
    return tuple(best)


def _read(path, groups) -> dict | None:
    """The stored times, or None where there are none for exactly these groups (a
    damaged file is measured again: the cache holds data, not instructions)."""
    try:
        times = json.loads(path.read_text())
        if set(times) == {g.name for g in groups} and all(
                len(t) == 2 and all(isinstance(x, (int, float)) for x in t)
                for t in times.values()):
            return {name: tuple(float(x) for x in t) for name, t in times.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return None


def _write(path, times: dict) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        temporary.write_text(json.dumps(times, sort_keys=True))
        os.replace(temporary, path)
    except OSError:  # a read-only cache: decided again next time
        pass
