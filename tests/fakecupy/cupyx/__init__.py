"""cupyx of the double: scatter_add, which dezero's gather backwards call on the GPU."""
import numpy
from cupy import _array, _names


def scatter_add(a, slices, value):
    """a[slices] += value, adding once per repeated index (numpy.add.at)."""
    if not isinstance(a, _array.ndarray):
        raise TypeError(f"Unsupported type {type(a)}")
    numpy.add.at(a._a, _array.unwrap(slices, allow_numpy=True),
                 _array.unwrap(value, allow_numpy=True))


def __getattr__(name):
    raise _names.missing("cupyx", name)
