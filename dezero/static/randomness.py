"""Random numbers a recording would freeze: RandomWatch and the sources of fresh entropy.

Part of the tracer stage (tracer.py gives each recording a RandomWatch). Numbers
drawn outside a dezero random op would be frozen into the graph in silence: the
watch sees numpy's and Python's global generators move. A generator made without
a seed (np.random.default_rng(), RandomState(), random.Random()), time.time() and
secrets move no global state: install() wraps the few places they draw from,
once; a wrapper passes through unless its own thread is recording, and otherwise
refuses, naming the user's line. A seeded generator made in the run is fine.

    watch = RandomWatch(); ...; watch.look(name); ...; watch.finish(name)
"""
from __future__ import annotations

import ctypes
import functools
import os
import random
import sys
import threading
import time

import numpy as np

from dezero.core import current_tracer
from dezero.errors import TraceError, user_frame, where

_STDLIB = os.path.dirname(os.__file__) + os.sep
_local = threading.local()  # .seeding: inside numpy's draw of a seed
_installed, _install_lock = False, threading.Lock()


# =============================================================================
# RandomWatch: draws from the global generators outside a dezero random op
# =============================================================================


class RandomWatch:
    """Sees numpy's or Python's global random state move during a recording: numbers
    drawn outside a dezero random op would be frozen into the graph.

    At each recorded op it compares a cheap mark of numpy's generator (MT19937's
    first key word and position, read in place), which names the line; at the end
    it compares the full states, which catches what the mark misses.
    """

    def __init__(self):
        try:
            address = np.random.mtrand._rand._bit_generator.ctypes.state_address
            self._mt = (ctypes.c_uint32 * 625).from_address(address)  # key[624], pos
        except AttributeError:  # another numpy layout: the full check at the end only
            self._mt = None
        self.drew = False
        # Lines that made a generator without a seed: one it dropped, one it keeps.
        self.fresh, self.unseeded = None, {}
        install()
        self.restart()

    def restart(self) -> None:
        """Forget earlier draws (made while the tracer was paused, e.g. layer init)."""
        self.start = (np.random.get_state(), random.getstate())
        self.mark = self._mark()

    def _mark(self):
        return None if self._mt is None else (self._mt[0], self._mt[624])

    def look(self, name: str, drawing_op: bool = False) -> None:
        """At a recorded op; `drawing_op`: a dezero random op has just drawn."""
        mark = self._mark()
        if self.fresh:
            refuse(name, "made a random generator without a seed", self.fresh)
        if mark != self.mark and not drawing_op:
            self._refuse(name, f"seen before {where()}")
        self.mark, self.drew = mark, self.drew or drawing_op

    def finish(self, name: str) -> None:
        if self.fresh or self.unseeded:
            refuse(name, "made a random generator without a seed",
                           self.fresh or next(iter(self.unseeded.values())))
        if self._mark() != self.mark:  # the user's line has returned: say when instead
            self._refuse(name, "seen after the last recorded op")
        numpy_state, python_state = self.start
        now = np.random.get_state()
        moved = not self.drew and not (numpy_state[2:] == now[2:] and
                                       np.array_equal(numpy_state[1], now[1]))
        if moved or random.getstate() != python_state:
            self._refuse(name, "seen at the end of the run")

    @staticmethod
    def _refuse(name, seen):
        raise TraceError(
            f"{name} drew random numbers from np.random or Python's random module while "
            f"it was traced, outside a dezero random op ({seen}); every replay would "
            f"reuse the numbers drawn\n  fix: use dezero's random ops (F.dropout), or "
            f"draw outside the traced function and pass the array in")


# =============================================================================
# Fresh entropy: install, refuse, and the wrappers
# =============================================================================


def install() -> None:
    """Wrap the sources of fresh entropy (once per process)."""
    global _installed
    with _install_lock:  # two threads tracing for the first time wrap once
        if _installed:
            return
        _installed = True
    bits = np.random.bit_generator
    if callable(getattr(bits, "randbits", None)):  # what numpy seeds generators from
        bits.randbits = _seeding(bits.randbits)
    secret = "drew fresh random bytes (secrets, random.SystemRandom, os.urandom)"
    random._urandom = _refusing(random._urandom, secret)
    os.urandom = _refusing(os.urandom, secret)
    time.time = _refusing(time.time, "read the clock (time.time())")
    time.time_ns = _refusing(time.time_ns, "read the clock (time.time_ns())")
    random.Random.seed = _refusing(random.Random.seed, "made a random.Random without a seed",
                                   unseeded=lambda self, a=None, *args, **kwargs: a is None)


def refuse(name: str, what: str, line: str):
    raise TraceError(
        f"{name} {what} while it was traced ({line}); a replay runs no Python, so every "
        f"replay would reuse what it gave\n  fix: give a generator a seed "
        f"(np.random.default_rng(0)) or use dezero's random ops (F.dropout); read clocks "
        f"and secrets outside the traced function and pass what they give in")


def _watch():
    """The RandomWatch of this thread's recording, or None."""
    if getattr(_local, "seeding", False):
        return None
    return getattr(current_tracer(), "random", None)


def _line() -> str:
    frame = user_frame()  # past dezero's frames, then past the standard library's
    while frame is not None and frame.f_code.co_filename.startswith(_STDLIB):
        frame = frame.f_back
    return where(frame)


def _refusing(draw, what, unseeded=None):
    """draw, refusing while this thread records (where unseeded(args) says so)."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        if _watch() is not None and (unseeded is None or unseeded(*args, **kwargs)):
            refuse(current_tracer().name, what, _line())
        return draw(*args, **kwargs)
    return wrapper


class _Entropy(int):
    """The seed numpy drew for a generator made in a recording. Seeding as the
    legacy RandomState(0) does draws one and drops it within the same call; a
    generator made without a seed keeps it for longer."""

    def __del__(self):
        frame = sys._getframe(0).f_back  # None if freed with no Python frame running
        self.watch.unseeded.pop(id(self), None)
        if frame is None or (id(frame), frame.f_lasti) != self.call:
            self.watch.fresh = self.watch.fresh or self.line


def _seeding(randbits):
    @functools.wraps(randbits)
    def wrapper(bits):
        watch = _watch()
        _local.seeding = True
        try:
            value = randbits(bits)
        finally:
            _local.seeding = False
        if watch is None:
            return value
        frame, value = sys._getframe(1), _Entropy(value)
        value.watch, value.call, value.line = watch, (id(frame), frame.f_lasti), _line()
        watch.unseeded[id(value)] = value.line
        return value
    return wrapper
