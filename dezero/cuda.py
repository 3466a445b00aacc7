"""Array-module selection: numpy on the CPU, cupy on a GPU when it is installed.

Every part of dezero that allocates arrays asks `get_array_module(x)` which module
owns `x`, so the same code runs on both devices.

    xp = dezero.cuda.get_array_module(x)   # numpy or cupy
"""
import numpy as np

try:
    import cupy as cp
    cupy = cp
    gpu_enable = True
except ImportError:
    cp = None
    cupy = None
    gpu_enable = False

# The array types a Variable may hold.
array_types = (np.ndarray,) if cp is None else (np.ndarray, cp.ndarray)

_NO_CUPY = ("CuPy is not installed, so dezero cannot use a GPU. "
            "Install the extra: pip install 'dezero[gpu]' (needs CUDA).")


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
        raise RuntimeError(_NO_CUPY)
    return cp.asarray(x)
