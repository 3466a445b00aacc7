"""Array-module selection: numpy on the CPU, cupy on a GPU when it is installed.

Every part of dezero that allocates arrays asks `get_array_module(x)` which module
owns `x`, so the same code runs on both devices. cupy counts only where it finds a
GPU: it also imports on machines without one (its compiler works there, see
kernels/gpu.py), and there dezero runs on numpy as if it were absent.

    xp = dezero.cuda.get_array_module(x)   # numpy or cupy
"""
import os
import sys

import numpy as np

_INSTALL = ("pip install 'dezero[gpu]' (the cupy-cuda12x wheel; for CUDA 13 drivers "
            "pip install cupy-cuda13x)")


def _find_gpu():
    """(the cupy module, None) where cupy finds a GPU, else (None, why not). Never
    raises: `import dezero` must not fail because of the GPU (cupy's import itself
    raises OSErrors, making ~/.cupy in a home that cannot be written)."""
    try:
        import cupy
    except ImportError:
        return None, f"CuPy is not installed ({_INSTALL})"
    except Exception as error:  # noqa: BLE001 - whatever the import raises, numpy serves
        return None, f"CuPy is installed but cannot be imported ({type(error).__name__}: " \
                     f"{error})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # noqa: BLE001 - no driver raises cupy's CUDARuntimeError
        # Without any NVIDIA driver CUDA reports an "insufficient" one: say which it is.
        if "InsufficientDriver" in str(error) and sys.platform.startswith("linux") and \
                not os.path.exists("/proc/driver/nvidia/version"):
            return None, f"CuPy is installed but this machine has no NVIDIA driver ({error})"
        return None, f"CuPy is installed but finds no usable GPU ({error})"
    if count == 0:
        return None, "CuPy is installed but finds no GPU"
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


# What an op says when given numpy and cupy arrays together (trace.py looks for it).
TWO_DEVICES = "arrays on two devices"


def where(x) -> str:
    """Where array x lives, in words."""
    return "the CPU (numpy)" if isinstance(x, np.ndarray) else "the GPU (cupy)"


def two_devices_error(op: str, xs) -> TypeError | None:
    """The error for op given numpy and cupy arrays together (cupy's own says only
    "Unsupported type"), or None if they are on one device."""
    places = [where(x) if isinstance(x, array_types) else None for x in xs]
    if len({p for p in places if p}) < 2:
        return None
    listing = ", ".join(f"x{i} on {p}" for i, p in enumerate(places) if p)
    error = TypeError(f"{op}: {TWO_DEVICES} ({listing}); one op's arrays must be on one "
                      f"device\n  fix: move them to one: model.to_gpu() and "
                      f"dezero.cuda.as_cupy(x), or model.to_cpu() and dezero.cuda.as_numpy(x)")
    error.arrays = list(xs)  # a traced call tells its arguments from its state by these
    return error


def argument_error(tracer, labels, leaves, error) -> TypeError:
    """The error for a traced call (the tracer of its recording) whose arrays were on
    two devices: the argument that is not where the state it meets is, or, before any
    state was read, the arguments on each device."""
    arrays = [getattr(leaf, "_data", leaf) for leaf in leaves]
    places = {label: where(array) for label, array in zip(labels, arrays)}
    # The state's device: of what the run read before it failed, else of the failing
    # op's inputs that are not arguments.
    state = {where(c.before_data) for c in tracer.captures if c.before_data is not None} or \
        {where(a) for a in getattr(error, "arrays", ()) if isinstance(a, array_types)
         and not any(a is b for b in arrays)}
    cpu, gpu = "the CPU (numpy)", "the GPU (cupy)"
    if len(state) != 1 and len(set(places.values())) > 1:
        listing = ", ".join(f"{label} on {place}" for label, place in places.items())
        what, fix = f"its arguments are on two devices ({listing})", \
            "pass them all on one device (dezero.cuda.as_cupy, dezero.cuda.as_numpy)"
    else:
        there = state.pop() if state else {cpu: gpu, gpu: cpu}[next(iter(places.values()))]
        label = next(label for label, place in places.items() if place != there)
        what = f"argument {label} is on {places[label]} but the state it meets is on {there}"
        fix = f"model.to_gpu() (or dezero.cuda.as_numpy({label}))" if there == cpu else \
            f"dezero.cuda.as_cupy({label}) (or DataLoader(..., gpu=True)), or model.to_cpu()"
    return TypeError(f"{tracer.name}: {what}; the arrays of one call must be on one device"
                     f"\n  fix: {fix}\n  (while recording: {str(error).splitlines()[0]})")


_random_ready = set()  # the GPUs whose cupy generator is made


def gpu_random_used():
    """Whether a random op has drawn from cupy's generator in this process."""
    return bool(_random_ready)


def random_of(xp):
    """xp.random, ready to draw. cupy makes each GPU's generator at its first draw,
    seeded from os.urandom, which a traced run refuses as fresh entropy; that draw
    belongs to a random op (drawn afresh at every replay), so the generator is made
    here with the thread's tracer out of sight."""
    if xp is np or xp.cuda.get_device_id() in _random_ready:
        return xp.random
    from dezero import core
    tracer, core._thread.tracer = core._thread.tracer, None
    try:
        xp.random.get_random_state()
    finally:
        core._thread.tracer = tracer
    _random_ready.add(xp.cuda.get_device_id())
    return xp.random


def require_gpu(caller: str) -> None:
    """Raise a RuntimeError naming `caller` (the call that needs a GPU) and what is
    missing, where dezero runs on numpy."""
    if cp is None:
        raise RuntimeError(f"{caller} needs a GPU, and dezero has none: {no_gpu_reason}\n"
                           f"  fix: run where cupy finds a GPU, or stay on the CPU (numpy)")


def as_cupy(x):
    """x as a cupy array; raises a clear error when there is no GPU."""
    from dezero.core import Variable
    if isinstance(x, Variable):
        x = x.data
    require_gpu("dezero.cuda.as_cupy()")
    return cp.asarray(x)
