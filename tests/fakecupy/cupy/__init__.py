"""A cupy test double: cupy's interface over numpy, for running tests/gpu without a GPU.

Put tests/fakecupy first on sys.path (PYTHONPATH=tests/fakecupy:.) and `import cupy`
gives this package. It keeps cupy's contract where dezero can break it:
- its ndarray is a type of its own (numpy inside): mixing it with numpy arrays fails
  as on cupy, np.asarray of it raises, `.data` is a pointer, not the values;
- it has only names cupy 14.2.0 has (_names.py), so a call real cupy lacks fails here;
- ElementwiseKernel compiles the CUDA body it is given with the host C++ compiler and
  runs it over the broadcast arrays, with cupy's rules for params and dtypes;
  ReductionKernel so too, folding in the order of cupy's own reduction kernel;
- cupy.cuda and cupy.random are plain stand-ins: one device, streams that are
  synchronous, cupy's own random state (numpy's global one is never touched).

What it cannot show: CUDA's math rounding, a*b+c contracted into FMA, flush-to-zero,
64-bit indexing, asynchrony, speed (see tests/gpu/README.md).
"""
import types

import numpy

from cupy import _array, _names
from cupy._array import ndarray
from cupy._kernel import ElementwiseKernel  # noqa: F401 - cupy.ElementwiseKernel
from cupy._reduction import ReductionKernel  # noqa: F401 - cupy.ReductionKernel

__version__ = _names.VERSION


def asarray(a, dtype=None, order=None, *, blocking=False):
    """a as the double's array: a copy of a numpy array or a list (the host-to-device
    copy), the same ndarray when it already is one of the dtype."""
    if isinstance(a, ndarray):
        return a if dtype is None or numpy.dtype(dtype) == a.dtype else a.astype(dtype)
    return _array.wrap(numpy.array(_array.unwrap(a, allow_numpy=True), dtype, order=order))


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    """A new array from obj (numpy arrays and lists allowed)."""
    return _array.wrap(numpy.array(_array.unwrap(obj, allow_numpy=True), dtype, copy=True,
                                   order=order, ndmin=ndmin))


asanyarray = asarray


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    """A numpy copy of a (numpy inputs pass through)."""
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return numpy.asarray(a, order=order)


def get_array_module(*args):
    """This module if any argument is one of its arrays, else numpy."""
    import cupy
    return cupy if any(isinstance(a, ndarray) for a in args) else numpy


def fuse(*args, **kwargs):
    """cupy.fuse: here the decorated function runs as written, one call per op (the
    double fuses nothing; speed is not what it checks)."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


def is_available():
    from cupy import cuda
    return cuda.is_available()


def get_default_memory_pool():
    from cupy import cuda
    return cuda._DEFAULT_POOL


def get_default_pinned_memory_pool():
    from cupy import cuda
    return cuda._DEFAULT_PINNED_POOL


def __getattr__(name):
    """numpy's functions, ufuncs, types and constants under cupy's names, made on
    first use; a name real cupy lacks raises AttributeError."""
    if name in ("cuda", "random", "linalg"):  # submodules
        import importlib
        return importlib.import_module(f"cupy.{name}")
    if not _names.has("cupy", name) or not hasattr(numpy, name) or name.startswith("_"):
        raise _names.missing("cupy", name)
    value = getattr(numpy, name)
    if isinstance(value, types.ModuleType):  # numpy.fft and others: not numpy's here
        raise _names.missing("cupy", name)
    if callable(value) and not isinstance(value, type):
        value = _array.function(value)
    globals()[name] = value
    return value
