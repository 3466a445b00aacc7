"""cupy.cuda.runtime of the double: one device (FAKECUPY_DEVICES=0: none, as a machine
with cupy installed and no GPU)."""
import os

from cupy import _names

_MEMORY = 16 << 30  # the memory the stand-in device claims


class CUDARuntimeError(RuntimeError):
    """A CUDA runtime error, as cupy raises it (a RuntimeError)."""

    def __init__(self, status, message="no CUDA-capable device is detected"):
        self.status = status
        super().__init__(f"cudaErrorNoDevice: {message}")


def getDeviceCount():
    count = int(os.environ.get("FAKECUPY_DEVICES", "1"))
    if count == 0:
        raise CUDARuntimeError(100)
    return count


def getDevice():
    return 0


def setDevice(device):
    if not 0 <= device < getDeviceCount():
        raise CUDARuntimeError(101, "invalid device ordinal")


def deviceSynchronize():
    """Nothing to wait for: every launch of the double has finished when it returns."""


def runtimeGetVersion():
    return 12080


def driverGetVersion():
    return 12080


def memGetInfo():
    return _MEMORY, _MEMORY


def getDeviceProperties(device):
    setDevice(device)
    return {"name": b"cupy test double (numpy on the host)", "totalGlobalMem": _MEMORY,
            "major": 9, "minor": 0, "multiProcessorCount": 1, "warpSize": 32,
            "memoryClockRate": 0, "memoryBusWidth": 0}


def __getattr__(name):
    raise _names.missing("cupy.cuda.runtime", name)
