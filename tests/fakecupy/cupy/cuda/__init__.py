"""cupy.cuda of the double: a device, streams, events and memory pools as plain stand-ins.

Launches of the double finish before they return, so streams and events have nothing
to wait for; an Event records the host's clock, so get_elapsed_time measures the host.
"""
import time

from cupy import _names
from cupy._array import MemoryPointer
from cupy.cuda import compiler, runtime  # noqa: F401 - cupy.cuda.runtime, .compiler


def is_available():
    try:
        return runtime.getDeviceCount() > 0
    except runtime.CUDARuntimeError:
        return False


def get_device_id():
    return 0


class Device:
    """A CUDA device: the one device of the double."""

    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)
        runtime.setDevice(self.id)

    compute_capability = property(lambda self: "90")
    mem_info = property(lambda self: runtime.memGetInfo())

    def use(self):
        pass

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("Device", self.id))

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


class Stream:
    """A CUDA stream; the double's launches are synchronous, so it only keeps its place."""

    null = None  # the null stream, set below

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.ptr = 0 if null else id(self)
        self.done = True

    def synchronize(self):
        pass

    def use(self):
        global _CURRENT
        _CURRENT = self
        return self

    def __enter__(self):
        self._previous = _CURRENT
        return self.use()

    def __exit__(self, *exc):
        self._previous.use()
        return False


Stream.null = Stream(null=True)
_CURRENT = Stream.null


def get_current_stream(device_id=-1):
    return _CURRENT


class Event:
    """A CUDA event: the host's clock when it is recorded."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.done, self._time = True, None

    def record(self, stream=None):
        self._time = time.perf_counter()

    def synchronize(self):
        pass


def get_elapsed_time(start_event, end_event):
    """Milliseconds between two recorded events."""
    return (end_event._time - start_event._time) * 1e3


class MemoryPool:
    """A device memory pool: numpy allocates, so there is nothing to hold or free."""

    def __init__(self, allocator=None):
        self._limit = 0

    def used_bytes(self):
        return 0

    def free_bytes(self):
        return 0

    def total_bytes(self):
        return 0

    def n_free_blocks(self):
        return 0

    def free_all_blocks(self, stream=None):
        pass

    def set_limit(self, size=None, fraction=None):
        self._limit = size or 0

    def get_limit(self):
        return self._limit


class PinnedMemoryPool:
    """A pinned host memory pool: nothing to hold or free."""

    def __init__(self, allocator=None):
        pass

    def n_free_blocks(self):
        return 0

    def free_all_blocks(self):
        pass


_DEFAULT_POOL, _DEFAULT_PINNED_POOL = MemoryPool(), PinnedMemoryPool()
__all__ = ["Device", "Event", "MemoryPointer", "MemoryPool", "PinnedMemoryPool", "Stream",
           "compiler", "get_current_stream", "get_device_id", "get_elapsed_time",
           "is_available", "runtime"]


def __getattr__(name):
    raise _names.missing("cupy.cuda", name)
