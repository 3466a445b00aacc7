"""Which of the arrays the replay code offers a kernel it may write its outputs into.

The replay code passes a kernel, per output, an array to write it into or None
(lowering._into): a matmul's result that only the kernel reads, or the array of a
state (a parameter, an optimizer's moment) that the output replaces. A state's
array is written over only where nobody but the replay holds it. Eager code gives
the state a new array, so an array someone kept (`old = layer.W.data`, a view of
it) keeps its values; an array that is itself a view of other memory is never
written either. The cupy backend asks writable() and, while other threads run, writes
no array over (see alone()); the cpu backend's kernels count the references of the
arrays they are given themselves, as they start (cpu.py: REPLAY_REFS + 2).

    given = outputs.writable(out, pools)   # per output: the array, or None
"""
import sys
import threading

from dezero.kernels import pending


def _refs(out, k) -> int:
    return sys.getrefcount(out[k])


def _replay_refs() -> int:
    """The references to a state's array when only the replay holds it: the state's
    slot, the replay's name for it, the kernel call's arguments and `out` tuple, and
    the check's own. Counted here the way writable() counts, not assumed: an
    interpreter may count references another way (3.14 borrows some)."""
    class Slot:
        pass
    slot = Slot()
    slot.data = object()
    name = slot.data

    def kernel(*arrays, out=None):
        return _refs(out, 0)
    return kernel(name, out=(name,))


REPLAY_REFS = _replay_refs()


def alone() -> bool:
    """Whether no other thread runs (but the background compiler's, which reads no
    arrays): none can take an array between writable() and the kernel writing it,
    which the cupy backend cannot check again and the cpu backend does (run_kernel)."""
    return threading.active_count() <= 1 + pending.workers()


def writable(out, pools=None) -> list:
    """Per array of `out` (a tuple of arrays and None), the array where a kernel may
    write into it, else None. pools[k]: the backend's list of reusable buffers for
    output k, whose reference to the array is nobody else's."""
    given = []
    for k in range(len(out)):
        held = 0 if out[k] is None else _refs(out, k)
        if held > REPLAY_REFS and pools:  # (looked for only then: it takes a while)
            held -= any(b is out[k] for b in pools[k])
        given.append(out[k] if 0 < held <= REPLAY_REFS and out[k].base is None else None)
    return given
