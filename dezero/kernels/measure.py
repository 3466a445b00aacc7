"""Compiled or not, and on how many threads, by measurement, not by a rule of sizes:
the fusion pass leaves every group it forms to be compiled (passes.decide), and each
kernel of a loaded library is timed against the numpy statements that the replay code
runs for its group when it is not compiled (pycode.group_function), a few calls each
taking turns, on the same arrays of its inputs' types; a kernel on one thread and on
all the machine's, whatever its size (how many elements pay for waking the other
threads depends on the machine, its load and the kernel's work). A group runs as
numpy statements where they are clearly faster, a kernel on all threads where that
is clearly faster than one. The times are kept beside the library in the kernel
cache (<library>.json), so a later process decides alike without timing again;
print(graph) shows each decision with the times in its kernel's header, and
DEZERO_DEBUG=3 prints it when it is made. DEZERO_KERNELS=always compiles every
kernel on one thread and times nothing (runs that must not depend on the machine's
load: the test suite); never compiles none.

Used by cpu.py once a library is loaded, on the kernel steps of the
graph's program (lowering.py).

    groups = measure.decide(library, graph)   # the groups that run compiled
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from dezero.static import debugging, passes
from dezero.static.backends import pycode
from dezero.static.lowering import lower
from dezero.static.sizes import evaluate

CALLS = 20         # timed calls each way at most (3 at least), the best counts
BUDGET_S = 0.05    # ... unless a group's calls took this long already
clock = time.perf_counter
MARGIN = 1.1       # the faster way must be this much faster to be chosen


def machine_threads() -> int:
    """The threads a parallel kernel may run on: OMP_NUM_THREADS (its first number)
    where set, else the cores this process may run on."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            os.cpu_count() or 1


def decide(library, graph) -> list:
    """The groups of `graph` whose kernels `library` holds that run compiled; sets
    each one's `compiled` and `decision` (which print(graph) shows) and
    library.threads[group.name], the threads its kernel runs on. DEZERO_KERNELS=always
    (passes.kernel_mode) compiles each on one thread and times nothing."""
    steps = [s for s in lower(graph).steps if s.kind == "kernel" and s.group.name in library.specs]
    groups = [step.group for step in steps]
    if passes.kernel_mode() == "always":
        library.threads.update((g.name, 1) for g in groups)
        return groups
    path = library.path.with_suffix(".json")
    times, where = _read(path, groups), "stored in the kernel cache"
    if times is None:
        times, where, timed = {}, "measured", {}
        for s in steps:  # kernels of one loop on arrays of one type time alike: once
            key = (library.loops[s.group.name], tuple((v.shape, v.dtype) for v in s.group.inputs))
            times[s.group.name] = timed.get(key) or _time_both(library, s, graph.hints)
            timed[key] = times[s.group.name]
        _write(path, times)
    for group in groups:
        by_threads, numpy_us = times[group.name]
        many = max(by_threads)  # a cache filled on a larger machine asks for no more
        threads = min(many, machine_threads()) if by_threads[many] * MARGIN < \
            by_threads.get(1, float("inf")) else 1
        kernel_us = by_threads.get(threads, by_threads[many])
        library.threads[group.name] = threads
        group.compiled = kernel_us <= numpy_us * MARGIN
        others = [f"{_on(n)} {us:.1f} us" for n, us in sorted(by_threads.items())
                  if n != threads]
        numpy = f"{len(group.nodes)} numpy calls {numpy_us:.1f} us"
        group.decision = ", ".join(
            [f"compiled {_on(threads)}: {kernel_us:.1f} us a call", *others, numpy]
            if group.compiled else [f"as numpy calls: {numpy}",
                                    f"compiled {_on(threads)} {kernel_us:.1f} us", *others])
        debugging.log(3, f"kernel {group.name} runs {group.decision} ({where})")
    return [g for g in groups if g.compiled]


def _on(threads: int) -> str:
    return f"on {threads} thread{'s' * (threads > 1)}"


# The size a symbolic one is timed at where the recording gave none (a placeholder's).
HINT = 64


def _time_both(library, step, hints: dict) -> tuple:
    """({threads: kernel}, numpy statements) best microseconds a call, on the same
    arrays in [0.5, 1): the kernel on one thread and on machine_threads(). Symbolic
    sizes take the values of the recording (hints), else HINT."""
    group, rng = step.group, np.random.default_rng(0)
    values = [hints.get(name, HINT) for name in group.sizes]
    at = dict(zip(group.sizes, values))
    arrays = [np.asarray(rng.random(evaluate(v.shape, at)) * 0.5 + 0.5, v.dtype)
              for v in group.inputs]
    extra = {"sizes": tuple(values)} if group.sizes else {}
    plain = (tuple(values),) if group.sizes else ()  # the numpy calls take them last
    spec, counts = library.specs[group.name], sorted({1, machine_threads()})
    kernels = [library.kernel(spec, threads=n) for n in counts]
    calls = pycode.group_function(step)
    with debugging.debug(min(debugging.LEVEL, 1)):  # a kernel's line per call is not its time
        best = fastest([lambda fn=fn: fn(*arrays, **extra) for fn in kernels] +
                       [lambda: calls(*arrays, *plain)])
    return dict(zip(counts, best)), best[-1]


def fastest(ways: list) -> list:
    """The best microseconds a call of each function, by `clock`: they take turns,
    CALLS rounds at most, at least 3 (the first calls warm up), fewer once BUDGET_S
    has passed."""
    best, began = [float("inf")] * len(ways), clock()
    with np.errstate(all="ignore"):
        for calls in range(CALLS):
            for k, fn in enumerate(ways):
                start = clock()
                fn()
                best[k] = min(best[k], (clock() - start) * 1e6)
            if calls >= 2 and clock() - began > BUDGET_S:
                break
    return best


def _read(path, groups) -> dict | None:
    """The stored times, or None where there are none for exactly these groups (a
    damaged file is measured again: the cache holds data, not instructions). On
    disk: {group: {"kernel_us": {"<threads>": us, ...}, "numpy_us": us}}."""
    try:
        times = json.loads(path.read_text())
        if set(times) == {g.name for g in groups}:
            read = {name: ({int(n): _number(us) for n, us in t["kernel_us"].items()},
                           _number(t["numpy_us"])) for name, t in times.items()}
            if all(by_threads and min(by_threads) >= 1 for by_threads, _ in read.values()):
                return read
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        pass
    return None


def _number(x) -> float:
    if type(x) not in (int, float):
        raise TypeError(f"{x!r} is no time")
    return float(x)


def _write(path, times: dict) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    stored = {name: {"kernel_us": {str(n): us for n, us in by_threads.items()},
                     "numpy_us": numpy_us} for name, (by_threads, numpy_us) in times.items()}
    try:
        temporary.write_text(json.dumps(stored, sort_keys=True))
        os.replace(temporary, path)
    except OSError:  # a read-only cache: decided again next time
        pass
