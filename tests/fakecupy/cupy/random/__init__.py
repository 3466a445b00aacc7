"""cupy.random of the double: its own random state, never numpy's global one.

On a GPU, cupy's generators are apart from numpy's: seeding one leaves the other,
and drawing on the GPU does not move numpy's global state. Here a numpy RandomState
of the double's own stands in; the functions take cupy's `dtype` argument.
"""
import inspect
import os

import numpy

from cupy import _array, _names


class RandomState:
    """cupy.random.RandomState: numpy's draws as the double's arrays, in `dtype`."""

    def __init__(self, seed=None, method=None):
        # Seeded here, as cupy seeds its own: numpy's seeding from entropy would count
        # as a numpy generator made inside a traced run.
        self._state = numpy.random.RandomState(_entropy() if seed is None else seed)

    def seed(self, seed=None):
        self._state.seed(_entropy() if seed is None else seed)

    def __getattr__(self, name):
        if not _names.has("cupy.random", name) or not hasattr(self._state, name):
            raise _names.missing("cupy.random.RandomState", name)
        draw = getattr(self._state, name)
        takes_dtype = "dtype" in (inspect.signature(draw).parameters
                                  if _has_signature(draw) else ())

        def run(*args, dtype=None, **kwargs):
            if takes_dtype and dtype is not None:
                kwargs["dtype"] = dtype
            result = _array.call(draw, *args, **kwargs)
            if not isinstance(result, _array.ndarray):  # cupy draws arrays, 0-d too
                result = _array.wrap(numpy.asarray(result))
            if dtype is not None and not takes_dtype and isinstance(result, _array.ndarray):
                result = result.astype(dtype, copy=False)
            return result
        run.__name__ = name
        return run


def _entropy():
    return int.from_bytes(os.urandom(4), "little")


def _has_signature(fn):
    try:
        inspect.signature(fn)
        return True
    except (TypeError, ValueError):
        return False


# Made on first use, as cupy makes its generator (seeded from os.urandom then).
_STATE = None


def get_random_state():
    global _STATE
    if _STATE is None:
        _STATE = RandomState()
    return _STATE


def reset_states():
    """Forget the generator: the next draw makes a new one, as on cupy."""
    global _STATE
    _STATE = None


def seed(seed=None):
    """Seeds the double's random state (numpy's global state is left alone)."""
    get_random_state().seed(seed)


def randn(*size, dtype=float):
    return get_random_state().randn(*size).astype(dtype, copy=False)


def rand(*size, dtype=float):
    return get_random_state().rand(*size).astype(dtype, copy=False)


def __getattr__(name):
    if not _names.has("cupy.random", name) or name[0].isupper():
        raise _names.missing("cupy.random", name)
    return getattr(get_random_state(), name)
