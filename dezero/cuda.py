"""Array-module selection: numpy on the CPU, cupy on a GPU when it is installed.

Every part of dezero that allocates arrays asks `get_array_module(x)` which module
owns `x`, so the same code runs on both devices. cupy counts only where it finds a
GPU: it also imports on machines without one (its compiler works there, see
backends/gpu.py), and there dezero runs on numpy as if it were absent.

    xp = dezero.cuda.get_array_module(x)   # numpy or cupy
"""
import numpy as np

_NO_CUPY = ("CuPy is not installed, so dezero cannot use a GPU. "
            "Install the extra: pip install 'dezero[gpu]' (needs CUDA).")


def _find_gpu():
    """(the cupy module, None) where cupy finds a GPU, else (None, why not)."""
    try:
        import cupy
    except ImportError:
        return None, _NO_CUPY
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # noqa: BLE001 - no driver raises cupy's CUDARuntimeError
        return None, f"CuPy is installed but finds no GPU ({error}), so dezero runs on numpy."
    if count == 0:
        return None, "CuPy is installed but finds no GPU, so dezero runs on numpy."
    return cupy, None


cp, no_gpu_reason = _find_gpu()
cupy = cp
gpu_enable = cp is not None

# The array types a Variable may hold.
array_types = (np.ndarray,) if cp is None else (np.ndarray, cp.ndarray)


def get_array_module(x):
    """The module (numpy or cupy) that owns x's array; x may be a Variable."""
    if cp is None:
        return np  # every op's forward asks: answer at once on a CPU-only install
    from dezero.core import Variable
    if isinstance(x, Variable):
        x = x._data  # the module only: no need to go through a trace's guard
    return cp.get_array_module(getattr(x, "array", x))


def as_numpy(x):
    """x as a numpy array (copying from the GPU when needed)."""
    from dezero.core import Variable
    if isinstance(x, Variable):
        x = x.data
    if np.isscalar(x):
        return np.array(x)
    if isinstance(x, np.ndarray):
        return x
    return cp.asnumpy(x)


def as_cupy(x):
    """x as a cupy array; raises a clear error when cupy is missing."""
    from dezero.core import Variable
    if isinstance(x, Variable):
        x = x.data
    if cp is None:
        raise RuntimeError(no_gpu_reason)
    return cp.asarray(x)
