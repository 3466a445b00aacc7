"""cupy.linalg of the double: numpy.linalg's functions on the double's arrays."""
import numpy

from cupy import _array, _names


def __getattr__(name):
    if not _names.has("cupy.linalg", name) or not hasattr(numpy.linalg, name):
        raise _names.missing("cupy.linalg", name)
    value = getattr(numpy.linalg, name)
    value = _array.function(value) if callable(value) and not isinstance(value, type) else value
    globals()[name] = value
    return value
