"""Data parallelism over MPI: a communicator, averaged gradients, shards of a dataset.

distributed.py sits beside the optimizers. Every process (a rank) holds the whole
model and trains on its own shard of the data; an optimizer hook averages the
gradients over the ranks before each update, so the ranks stay equal. MPI comes from
mpi4py (imported by init(), never by `import dezero`); on GPUs the arrays travel
through NCCL. Launch with `mpiexec -n 2 python -m mpi4py train.py`.

    comm = dist.init(); model(x[:1]); comm.broadcast_params(model)
    optimizer.add_hook(dist.AllreduceGrads(comm))
"""
import math
import os
import sys
import time
import traceback
import warnings

import numpy as np

from dezero import cuda, layers, optimizers
from dezero.core import Function, Parameter, TracedArray, Variable, current_tracer, no_grad
from dezero.errors import TraceError, where

# =============================================================================
# The world: init, Communicator
# =============================================================================

# name -> Communicator: an allreduce node names its communicator (attrs are plain
# values), and a replay finds it here.
_COMMUNICATORS = {}

_NO_MPI = ("dezero.distributed needs mpi4py and an MPI runtime: "
           "pip install 'dezero[distributed]' (mpi4py, and MPICH's wheel or Intel MPI's "
           "impi-rt on Windows)")


def init():
    """The communicator of all ranks started together (MPI's world); a plain `python
    script.py` is a world of size 1. Calling it again returns the same one.

    In a world of more than one rank, an exception that reaches the top of a rank
    aborts the whole job (the others would otherwise wait for it forever); a
    sys.exit(1) does so only under `python -m mpi4py` (no hook sees a SystemExit).
    """
    if "world" in _COMMUNICATORS:
        return _COMMUNICATORS["world"]
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ImportError(f"{_NO_MPI} ({error})") from error
    comm = Communicator(MPI.COMM_WORLD, "world")
    if comm.size > 1:
        _abort_on_uncaught_exception(comm.mpi)
        _share_the_cores(comm)
    return comm


# Variables that set how many threads BLAS and OpenMP start (the user's choice, if any).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _share_the_cores(comm):
    """Ranks on one machine split its cores, unless a thread count was chosen: each
    rank's BLAS and OpenMP would start one thread per core, ranks x cores threads in
    all, and the threads of one parallel matmul wait for each other, so one of them
    off its core stalls the rest. torchrun does the same for its ranks."""
    if comm.local_size == 1 or any(name in os.environ for name in _THREAD_VARIABLES):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, cores // comm.local_size)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # an OpenMP loaded later (the kernels')
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        uses = (f"each rank's OpenMP now uses {threads} thread(s), but its BLAS one per "
                f"core (pip install threadpoolctl, or set OMP_NUM_THREADS={threads} "
                f"before starting)")
    else:
        threadpool_limits(threads)  # the BLAS and OpenMP loaded already (numpy's BLAS)
        uses = (f"each rank now uses {threads} thread(s) (BLAS, OpenMP); set "
                f"OMP_NUM_THREADS to choose")
    if comm.local_rank == 0:
        warnings.warn(f"dezero.distributed: {comm.local_size} ranks share this machine's "
                      f"{cores} cores: {uses}", stacklevel=3)


def _abort_on_uncaught_exception(mpi_comm):
    # `python -m mpi4py script.py` does the same; this covers a plain `python script.py`.
    previous = sys.excepthook

    def abort(kind, value, tb):
        # The report in one write, then a moment for mpiexec to pass it on: written in
        # pieces, its end was sometimes lost when the abort stopped the job's output.
        if previous is sys.__excepthook__:
            sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))
        else:
            previous(kind, value, tb)
        sys.stderr.flush()
        time.sleep(0.2)
        mpi_comm.Abort(1)

    sys.excepthook = abort


class Communicator:
    """A group of ranks that exchange arrays (numpy or cupy).

    rank, size     this process's number in the group, and the group's size
    local_rank     its number among the ranks on the same machine (which GPU it uses)
    local_size     how many ranks share this machine
    mpi            the mpi4py communicator underneath
    """

    def __init__(self, mpi_comm, name):
        from mpi4py import MPI
        self.mpi, self.name = mpi_comm, name
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        local = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks on this machine
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        self._nccl = None  # made on the first exchange of cupy arrays
        # Ranks all on one machine exchange host arrays through a window of memory
        # they share (see _SharedExchange), unless DEZERO_MPI_SHARED_MEMORY=0.
        self._shared = None
        if (self.size > 1 and self.local_size == self.size
                and os.environ.get("DEZERO_MPI_SHARED_MEMORY", "1") != "0"):
            self._shared = _SharedExchange(mpi_comm)
        _COMMUNICATORS[name] = self

    def __repr__(self):
        return f"<Communicator {self.name}: rank {self.rank} of {self.size}>"

    # ---- plain collectives ---------------------------------------------------
    def barrier(self):
        """Wait until every rank has come here."""
        _refuse_while_tracing("comm.barrier()")
        self.mpi.Barrier()

    def allreduce(self, x, op="sum"):
        """x summed (op="mean": averaged; "max", "min") over the ranks, every rank
        getting the result. An array gives a new array of its module; a Variable gives
        a Variable made by an allreduce op (recorded by a trace, differentiable), as
        does an array inside a traced function."""
        if isinstance(x, (Variable, TracedArray)):  # an array that a trace records
            return Allreduce(self.name, op)(x)
        x = _plain_array(x, "allreduce")
        if current_tracer() is not None:  # recorded, not exchanged once while recording
            return Allreduce(self.name, op)(x)
        return self._reduce_arrays([x], op)[0]

    def broadcast(self, x, root=0):
        """Rank root's array, on every rank (each passes an array of the same shape
        and dtype; numpy or cupy)."""
        x = _plain_array(x, "broadcast")
        _refuse_while_tracing("comm.broadcast()")
        flat = x.reshape(-1).copy()
        self._exchange(flat, "broadcast", root=root)
        return flat.reshape(x.shape)

    def broadcast_params(self, model, root=0):
        """Give every parameter of model rank root's values (after lazy init: run the
        model once first), so that ranks seeded differently start equal."""
        params = list(model.params())
        missing = [p.name or f"parameter {i}" for i, p in enumerate(params) if p.data is None]
        if missing:
            raise ValueError(f"broadcast_params: {', '.join(missing)} not initialised yet "
                             f"(lazy init); call the model once first, e.g. model(x[:1])")
        mine = [f"{p.name}: {p.data.dtype}{list(p.data.shape)}" for p in params]
        theirs = self.mpi.bcast(mine, root=root)
        if mine != theirs:
            i = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b),
                     min(len(mine), len(theirs)))
            raise ValueError(
                f"broadcast_params: rank {self.rank}'s parameters differ from rank "
                f"{root}'s: {len(mine)} against {len(theirs)}, parameter {i} is "
                f"{mine[i] if i < len(mine) else 'missing'} against "
                f"{theirs[i] if i < len(theirs) else 'missing'}; build the same model "
                f"on every rank")
        with no_grad():
            for p in params:
                p.data = self.broadcast(p.data, root)

    def _any_rank(self, flags):
        """For each of the booleans flags (the same number on every rank), whether it
        is true on some rank."""
        flags = np.array(flags, dtype=np.uint8)
        if self.size > 1:  # (through the shared window where there is one, which tells
            self._exchange(flags, "allreduce", "max")  # a replay's exchanges from it)
        return flags.astype(bool).tolist()

    # ---- rank 0 alone --------------------------------------------------------
    def print(self, *args, **kwargs):
        """print() on rank 0 only (one line of progress, not one per rank)."""
        if self.rank == 0:
            print(*args, **{"flush": True, **kwargs})

    def save_weights(self, model, path):
        """model.save_weights(path) on rank 0 only; every rank returns once it is
        written (the ranks hold equal parameters, so one copy is enough)."""
        if self.rank == 0:
            model.save_weights(path)
        self.barrier()

    # ---- arrays in flat buffers ----------------------------------------------
    def _reduce_arrays(self, arrays, op):
        """The arrays reduced over the ranks, packed into one flat buffer per dtype
        (one exchange per dtype, however many arrays)."""
        results = [None] * len(arrays)
        by_dtype = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault((a.dtype, cuda.get_array_module(a)), []).append(i)
        for (dtype, xp), positions in by_dtype.items():
            _check_reducible(dtype, op, arrays[positions[0]].shape, "allreduce")
            group = [arrays[i] for i in positions]
            total = sum(a.size for a in group)
            slot = self._shared.slot(dtype, total) if self._shared and xp is np else None
            if slot is not None:  # packed straight into the window, this rank's block
                out = np.empty(total, dtype)  # into its place in the result
                _, start, stop = self._block(total)
                self._pack(group, slot, op, own=(start, stop, out[start:stop]))
                self._exchange(slot, "allreduce", op, out=out)
                views = _places(group, out)
            else:
                flat = xp.empty(total, dtype)
                views = self._pack(group, flat, op)
                self._exchange(flat, "allreduce", op)  # also alone: the same path at any size
            for i, view in zip(positions, views):
                results[i] = view
        return results

    def _pack(self, arrays, flat, op, own=None):
        """Copy arrays end to end into flat; return their places in it, shaped as they
        are. A mean divides each array by the number of ranks as it is packed, so the
        exchange's sum is the mean: no second pass over the buffer. With own=(start,
        stop, mine), elements start to stop of the arrays joined end to end (this
        rank's own block of an exchange through shared memory, which no other rank
        reads) go into mine instead of flat."""
        views = _places(arrays, flat)
        divisor = self.size if op == "mean" and self.size > 1 else None
        if own is None:
            for a, view in zip(arrays, views):
                _put(a, view, divisor)
            return views
        start, stop, mine = own
        at = 0
        for a in arrays:
            a = a.reshape(-1)
            low = min(max(start - at, 0), a.size)  # a[low:high] falls in the own block
            high = min(max(stop - at, 0), a.size)
            _put(a[:low], flat[at:at + low], divisor)
            if high > low:
                _put(a[low:high], mine[at + low - start:at + high - start], divisor)
            _put(a[high:], flat[at + high:at + a.size], divisor)
            at += a.size
        return views

    def _block(self, total):
        """The block of `total` elements (arrays joined end to end) this rank holds in
        a sharded exchange: every rank ceil(total / size) of them, the last ones fewer
        where that overshoots. Returns (block length, start, stop)."""
        block = -(-total // self.size)
        start = min(total, self.rank * block)
        return block, start, min(total, start + block)

    def _reduce_scatter(self, arrays, op):
        """This rank's block of the arrays (of one dtype and module), flattened and
        joined end to end, reduced over the ranks: rank r gets elements r * block to
        (r + 1) * block of the whole reduction (see _block), in a new array."""
        a = arrays[0]
        _check_reducible(a.dtype, op, a.shape, "reduce_scatter")
        xp = cuda.get_array_module(a)
        total = sum(x.size for x in arrays)
        block, start, stop = self._block(total)
        slot = self._shared.slot(a.dtype, block * self.size) if self._shared and xp is np \
            else None
        mine = xp.empty(block, a.dtype)
        if slot is None:
            flat = xp.empty(block * self.size, a.dtype)
            self._pack(arrays, flat, op)
            if self.size == 1:  # the block is the whole: nothing to exchange
                return flat
        else:  # packed straight into the window, this rank's own block into mine
            flat = slot
            self._pack(arrays, flat, op, own=(start, stop, mine))
            mine[stop - start:] = 0  # (the padding of the last block)
        flat[total:] = 0  # the padding of the last block
        self._exchange(flat, "reduce_scatter", op, out=mine)
        return mine[:stop - start]

    def _allgather(self, pieces, shapes):
        """Arrays of `shapes`, joined end to end, from every rank's block of them: this
        rank's block is its pieces (1-D, of one dtype and module) end to end."""
        total = sum(math.prod(shape) for shape in shapes)
        block, start, stop = self._block(total)
        mine = sum(p.size for p in pieces)
        if mine != stop - start:
            raise ValueError(f"allgather: rank {self.rank} of {self.size} holds elements "
                             f"{start} to {stop} of {total}, but its pieces have {mine}")
        if self.size == 1 and [p.size for p in pieces] == [math.prod(s) for s in shapes]:
            # Each piece is a whole array: returned as it is, as a reshape returns its
            # input's memory (no copy in a step).
            return [piece.reshape(shape) for piece, shape in zip(pieces, shapes)]
        xp = cuda.get_array_module(pieces[0])
        flat = xp.empty(block * self.size, pieces[0].dtype)
        # This rank's block: written straight into its slot of the shared window where
        # there is one (then gathered into flat), else into its place in flat.
        slot = self._shared.slot(flat.dtype, block) if self._shared and xp is np else None
        mine = flat[self.rank * block:(self.rank + 1) * block] if slot is None else slot
        at = 0
        for piece in pieces:
            mine[at:at + piece.size] = piece
            at += piece.size
        if slot is not None:
            self._exchange(slot, "allgather", out=flat)
        elif self.size > 1:
            self._exchange(flat, "allgather")
        results, at = [], 0
        for shape in shapes:
            size = math.prod(shape)
            results.append(flat[at:at + size].reshape(shape))
            at += size
        return results

    def _exchange(self, flat, what, op="sum", root=0, out=None):
        """Exchange the contiguous array flat on every rank: NCCL for cupy arrays where
        it exists, else through the host. what="allreduce" reduces it and "broadcast"
        sends root's, in place; "reduce_scatter" writes this rank's block of the
        reduction into out; "allgather" fills every rank's block of flat with that
        rank's own, in place (blocks of len(flat) / size), or, given out, flat is this
        rank's block and out receives every rank's (numpy arrays only)."""
        if isinstance(flat, np.ndarray):
            self._mpi_exchange(flat, what, op, root, out)
            return
        nccl = self._nccl_communicator()
        if nccl is None or not _nccl_exchange(nccl, flat, what, op, root, out, self.rank):
            # host staging: copy to numpy, exchange, copy back
            host, host_out = cuda.as_numpy(flat), None if out is None else cuda.as_numpy(out)
            self._mpi_exchange(host, what, op, root, host_out)
            if out is None:
                flat[...] = cuda.as_cupy(host)
            else:
                out[...] = cuda.as_cupy(host_out)

    def _mpi_exchange(self, flat, what, op, root, out=None):
        from mpi4py import MPI
        if what != "broadcast" and self._shared and self._shared.exchange(flat, what, op, out):
            return  # through the memory the ranks share
        if what == "broadcast":
            self.mpi.Bcast(flat, root=root)
        elif what == "allgather":
            self.mpi.Allgather(MPI.IN_PLACE if out is None else flat,
                               flat if out is None else out)
        else:
            mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
            if what == "reduce_scatter":
                self.mpi.Reduce_scatter_block(flat, out, op=mpi_op)
            else:
                self.mpi.Allreduce(MPI.IN_PLACE, flat, op=mpi_op)

    # ---- GPUs ----------------------------------------------------------------
    def use_gpu(self):
        """Make the GPU of this rank's local rank the current one (one GPU per rank on
        each machine) and return its id; call it before moving the model."""
        count = cuda.cupy.cuda.runtime.getDeviceCount() if cuda.gpu_enable else 0
        if self.local_rank >= count:
            raise RuntimeError(f"rank {self.rank} is local rank {self.local_rank} but this "
                               f"machine has {count} GPUs; start at most {count} ranks "
                               f"per machine")
        cuda.cupy.cuda.Device(self.local_rank).use()
        return self.local_rank

    def _nccl_communicator(self):
        """The NCCL communicator (made once, together by all ranks), or None where
        NCCL is missing on any rank: every rank then stages through the host."""
        if self._nccl is None:
            from cupy.cuda import nccl
            from mpi4py import MPI
            everywhere = self.mpi.allreduce(bool(nccl.available), op=MPI.LAND)
            if not everywhere:
                if self.rank == 0:  # (once for the job)
                    warnings.warn("dezero.distributed: NCCL is missing, so cupy arrays are "
                                  "exchanged through host memory (slower); install "
                                  "nvidia-nccl-cu12 for direct GPU transfers", stacklevel=3)
                self._nccl = False
            else:
                unique_id = self.mpi.bcast(nccl.get_unique_id() if self.rank == 0 else None)
                self._nccl = nccl.NcclCommunicator(self.size, unique_id, self.rank)
        return self._nccl or None


class _SharedExchange:
    """Exchanges of numpy arrays between ranks that share one machine, through an MPI
    window of memory all of them map (MPI-3 shared memory): each rank packs its array
    into its own slot, except its own block (the part of the result it reduces), which
    it packs straight into its result; it then adds every other rank's part of its
    block (in rank order) to that, puts it in the result area, and copies the others'
    blocks of the result out. That is one pass of packing, one of reduction and one
    copy out per rank, and only what other ranks read goes through the shared memory;
    MPI's own allreduce moves the data through its shared-memory queues in more
    passes. The window is kept from one
    exchange to the next and grown when an exchange needs more. Communicator makes one
    where every rank runs on one machine, unless DEZERO_MPI_SHARED_MEMORY=0.

    Window layout, regions of `capacity` bytes: the result area, then two sets of
    slots, one per rank in each, which exchanges use in turn; after them, what each
    rank passed in each set (which exchange, how many bytes, the dtype), so that ranks
    that reached different exchanges are told, where MPI's may wait for each other.
    An exchange writes its set of slots before its first barrier and reads them
    after; the result area is written only after a first barrier and read after the
    second. So a rank may begin the next exchange, in the other set, while another
    still reads this one's slots or result, and no exchange ends with a barrier: the
    set is used again only after the next exchange's first barrier, which every rank
    passes once done reading. A rank that raises aborts the job (init's excepthook),
    so no barrier waits for it forever."""

    # No __dict__: a traced step's survey of the Python state it changes passes this
    # by. The exchange changes it as much in a replay as in the recorded run.
    __slots__ = ("mpi", "window", "capacity", "memory", "passed", "rank", "size",
                 "exchanges")

    def __init__(self, mpi_comm):
        self.mpi, self.window, self.capacity = mpi_comm, None, 0
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.exchanges = 0  # how many went through the window (tests read it)

    def _regions(self, nbytes):
        """The result area and the slots of this exchange's set (every rank's), as
        byte arrays of at least nbytes; None where a window that large would not fit
        in the machine's shared memory (that exchange then goes through MPI)."""
        from mpi4py import MPI
        rows = 1 + 2 * self.size
        if nbytes > self.capacity:  # every rank grows alike: they exchange equal sizes
            capacity = -(-nbytes // 64) * 64  # rows aligned for any dtype
            if not self.mpi.bcast(_shared_memory_holds(capacity * rows)
                                  if self.rank == 0 else None):
                return None
            if self.window is not None:
                self.window.Unlock_all()
                self.window.Free()
            self.capacity = capacity
            mine = capacity * rows + 48 * self.size if self.rank == 0 else 0
            self.window = MPI.Win.Allocate_shared(mine, 1, comm=self.mpi)
            memory, _ = self.window.Shared_query(0)
            self.memory = np.frombuffer(memory, np.uint8, capacity * rows).reshape(rows, -1)
            self.passed = np.frombuffer(memory, np.int64, 6 * self.size,
                                        capacity * rows).reshape(2, self.size, 3)
            self.window.Lock_all(MPI.MODE_NOCHECK)  # held for the window's lifetime
        first = 1 + self.exchanges % 2 * self.size  # (every rank counts alike)
        return self.memory[0, :nbytes], self.memory[first:first + self.size, :nbytes]

    def slot(self, dtype, size):
        """This rank's slot in the next exchange, as a flat array of size elements
        (None where the window cannot hold it): an array packed here is exchanged
        without being copied in."""
        regions = self._regions(size * np.dtype(dtype).itemsize)
        return None if regions is None else regions[1][self.rank].view(dtype)

    def _synchronize(self):
        # The memory model of a shared window: make this rank's stores visible, wait
        # for all ranks, then see theirs.
        self.window.Sync()
        self.mpi.Barrier()
        self.window.Sync()

    def exchange(self, flat, what, op, out=None):
        """As Communicator._exchange, for a numpy array flat (an allreduce writes its
        result into out where given; an allgather takes this rank's block as flat and
        every rank's into out, or without out gathers in place, as MPI's); False where
        the window cannot hold flat, exchanging nothing. flat may be this rank's slot
        (see slot): an allreduce or a reduce_scatter then finds there every block but
        this rank's own, which the caller put into its place in out."""
        if what == "allgather" and out is None:  # (host copies of cupy arrays)
            flat, out = flat.reshape(self.size, -1)[self.rank], flat
        if flat.size == 0:
            return True
        regions = self._regions(flat.nbytes)
        if regions is None:
            return False
        result, slots = regions[0].view(flat.dtype), regions[1].view(flat.dtype)
        block = flat.size // self.size if what == "reduce_scatter" else -(-flat.size // self.size)
        start, stop = min(flat.size, self.rank * block), min(flat.size, (self.rank + 1) * block)
        whole = flat if out is None else out  # (an allreduce's result)
        mine = whole[start:stop] if what == "allreduce" else out
        if flat.__array_interface__["data"][0] != slots[self.rank].__array_interface__["data"][0]:
            slots[self.rank] = flat  # (not packed in the slot already)
            if what != "allgather" and out is not None:
                mine[...] = flat[start:stop]
        passed = self.passed[self.exchanges % 2]
        passed[self.rank] = (_EXCHANGES.index(what), flat.nbytes,  # (int64 and longlong
                             flat.itemsize * 256 + ord(flat.dtype.kind))  # are one dtype)
        self._synchronize()
        self.exchanges += 1  # the next exchange uses the other set of slots
        if (passed != passed[self.rank]).any():
            each = ", ".join(f"rank {rank}: {_EXCHANGES[kind]} of {n // (code // 256)} "
                             f"{np.dtype(f'{chr(code % 256)}{code // 256}')}"
                             for rank, (kind, n, code) in enumerate(passed))
            raise ValueError(
                f"{what}: the {self.size} ranks reached different exchanges ({each}); "
                f"every rank passes arrays of the same shapes and dtypes, in the same "
                f"order, and calls a traced step with the same shapes on every rank (one "
                f"that records it again exchanges what the others' replays do not)")
        if what == "allgather":  # every rank's block, from its slot
            out.reshape(self.size, -1)[...] = slots
            return True
        reduce = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}[op]
        for rank, slot in enumerate(slots):  # its own, then the others' in rank order
            if rank != self.rank:
                reduce(mine, slot[start:stop], out=mine)
        if what == "allreduce":
            result[start:stop] = mine
            self._synchronize()
            whole[:start] = result[:start]
            whole[stop:] = result[stop:]
        return True


_EXCHANGES = ("allreduce", "reduce_scatter", "allgather")  # (codes in the window)


def _shared_memory_holds(nbytes):
    """Whether a shared window of nbytes leaves half of the machine's shared memory
    (/dev/shm, where MPICH maps it) free: a window on a full one would crash the rank
    that touches it (SIGBUS) rather than fail."""
    try:
        disk = os.statvfs("/dev/shm")
    except (OSError, AttributeError):  # no /dev/shm here: MPI maps it elsewhere
        return True
    return nbytes <= disk.f_bavail * disk.f_frsize // 2


def _put(a, into, divisor):
    """into[...] = a, or a / divisor."""
    if a.size and divisor:
        cuda.get_array_module(a).divide(a, a.dtype.type(divisor), out=into)
    elif a.size:
        into[...] = a


def _places(arrays, flat):
    """The places of arrays in flat when they are joined end to end, shaped as they are."""
    views, start = [], 0
    for a in arrays:
        views.append(flat[start:start + a.size].reshape(a.shape))
        start += a.size
    return views


_REDUCE_OPS = {"sum", "mean", "max", "min"}


def _check_reducible(dtype, op, shape, what):
    if op not in _REDUCE_OPS:
        raise ValueError(f"{what}: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if dtype.kind == "b":  # MPI and NCCL reduce no booleans
        raise TypeError(f"{what}: a bool array (shape {shape}) cannot be reduced over "
                        "ranks; cast it first, x.astype(np.int32) (op='sum' then "
                        "counts the ranks where an element is true, 'max' is "
                        "any, 'min' is all)")
    if dtype.kind == "c" and op in ("max", "min"):
        raise TypeError(f"{what}: op={op!r} of {dtype} arrays has no order; "
                        f"reduce abs(x) or x.real instead")
    if op == "mean" and dtype.kind not in "fc":
        raise TypeError(f"{what}: op='mean' of {dtype} arrays would round; "
                        f"reduce with op='sum' or cast to a float dtype first")


def _nccl_exchange(comm, flat, what, op, root, out, rank):
    """Exchange flat through NCCL; False where NCCL has no reduction of its dtype."""
    from cupy.cuda import nccl
    if what in ("broadcast", "allgather"):  # any dtype, as its bytes
        flat = flat.view(np.uint8)
    elif flat.dtype.kind == "c":  # a complex sum: the sums of its two parts
        flat = flat.view(flat.dtype.type(0).real.dtype)
        out = None if out is None else out.view(flat.dtype)
    kind = getattr(nccl, f"NCCL_{flat.dtype.name.upper()}", None)  # NCCL_INT8 ...
    if kind is None:
        return False
    stream = cuda.cupy.cuda.get_current_stream().ptr
    if what == "broadcast":
        comm.broadcast(flat.data.ptr, flat.data.ptr, flat.size, kind, root, stream)
    elif what == "allgather":  # in place: this rank's block is its part of flat
        block = flat.size // comm.size()
        comm.allGather(flat.data.ptr + rank * block, flat.data.ptr, block, kind, stream)
    else:
        reduce = {"sum": nccl.NCCL_SUM, "mean": nccl.NCCL_SUM, "max": nccl.NCCL_MAX,
                  "min": nccl.NCCL_MIN}[op]
        if what == "reduce_scatter":
            comm.reduceScatter(flat.data.ptr, out.data.ptr, out.size, kind, reduce, stream)
        else:
            comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, kind, reduce, stream)
    return True


def _refuse_while_tracing(what):
    if current_tracer() is not None:
        raise TraceError(f"{what} inside a traced function ({where()}) would run only "
                         f"while recording: a replay runs no Python, so it would not wait "
                         f"or exchange again\n  fix: call it before or after the traced "
                         f"function")


def _plain_array(x, what):
    if isinstance(x, TracedArray):
        raise TypeError(f"{what}: a traced array (an array inside a traced function) has "
                        f"no value yet; {what} before the traced call, or use allreduce, "
                        f"which the trace records")
    if isinstance(x, Variable):  # np.asarray would make an object array of it
        raise TypeError(f"{what}: a Variable ({x.name or 'unnamed'}: {x.dtype}"
                        f"{list(x.shape)}); {what} its array, p.data = comm.{what}"
                        f"(p.data), or a model's parameters with broadcast_params(model)")
    if not isinstance(x, cuda.array_types):
        x = np.asarray(x)
    if x.dtype.kind not in "biufc":
        raise TypeError(f"{what}: arrays of numbers only, not {x.dtype}")
    return x


# =============================================================================
# The op: Allreduce (one node of a traced step)
# =============================================================================


class Allreduce(Function):
    """y_i = x_i reduced over the ranks (op: sum, mean, max, min), for every input.

    A collective: every rank must run it, in the same order, so the trace compiler
    keeps it as recorded (one node; nothing is folded, merged, fused or moved
    across it). comm names the communicator (see init).
    """

    collective = True

    @staticmethod
    def types(types, attrs):  # forward would exchange: its results are its inputs' types
        return types

    def __init__(self, comm="world", op="sum"):
        self.comm = comm
        self.op = op

    def forward(self, *xs):
        comm = _communicator(self.comm, "allreduce")
        if comm.size == 1:  # each array is its own reduction: returned as it is, as a
            for x in xs:    # reshape returns its input's memory (no copy in a step)
                _check_reducible(x.dtype, self.op, x.shape, "allreduce")
            return xs if len(xs) > 1 else xs[0]
        ys = comm._reduce_arrays(list(xs), self.op)
        return tuple(ys) if len(ys) > 1 else ys[0]

    def backward(self, *gys):
        if self.op not in ("sum", "mean"):
            raise NotImplementedError(f"allreduce: op={self.op!r} has no backward")
        # Each rank's result depends on every rank's input alike: the gradient of a
        # sum (or mean) over ranks is the sum (or mean) of the gradients.
        return Allreduce(self.comm, self.op)(*gys)


class ReduceScatter(Function):
    """y = this rank's block of the inputs, flattened and joined end to end, reduced
    over the ranks (op: sum, mean, max, min): rank r of R gets elements r * block to
    (r + 1) * block, block = ceil(total / R). A collective, kept as recorded."""

    collective = True

    @staticmethod
    def types(types, attrs):  # this rank's block, whose length needs the communicator
        total = sum(math.prod(shape) for shape, _ in types)
        _, start, stop = _communicator(attrs["comm"], "reduce_scatter")._block(total)
        return [((stop - start,), types[0][1])]

    def __init__(self, comm="world", op="mean"):
        self.comm = comm
        self.op = op

    def forward(self, *xs):
        return _communicator(self.comm, "reduce_scatter")._reduce_scatter(list(xs), self.op)

    def backward(self, gy):
        if self.op not in ("sum", "mean"):
            raise NotImplementedError(f"reduce_scatter: op={self.op!r} has no backward")
        # Every element went to the rank that holds its block: its gradient comes back
        # from there, gathered (and divided as the mean divided it).
        gxs = Allgather(self.comm, tuple(x.shape for x in self.inputs))(gy)
        gxs = tuple(gxs) if isinstance(gxs, list | tuple) else (gxs,)
        if self.op == "mean":
            size = _communicator(self.comm, "reduce_scatter").size
            gxs = tuple(gx / size for gx in gxs)
        return gxs if len(gxs) > 1 else gxs[0]


class Allgather(Function):
    """The arrays of `shapes`, joined end to end, assembled from every rank's block of
    them: the inputs are this rank's block (1-D pieces end to end, see ReduceScatter).
    A collective, kept as recorded."""

    collective = True

    @staticmethod
    def types(types, attrs):  # forward would exchange: its results are of `shapes`
        return [(tuple(shape), types[0][1]) for shape in attrs["shapes"]]

    def __init__(self, comm="world", shapes=()):
        self.comm = comm
        self.shapes = shapes

    def forward(self, *pieces):
        ys = _communicator(self.comm, "allgather")._allgather(list(pieces), self.shapes)
        return tuple(ys) if len(ys) > 1 else ys[0]

    def backward(self, *gys):
        # This rank's block reached every rank: its gradient is the sum of theirs.
        x = self.inputs[0]
        gys = [Variable(cuda.get_array_module(x.data).zeros(shape, x.dtype)) if gy is None
               else gy for gy, shape in zip(gys, self.shapes)]  # outputs left unused
        block = ReduceScatter(self.comm, "sum")(*gys)
        gxs, at = [], 0
        for x in self.inputs:
            gxs.append(block[at:at + x.size].reshape(x.shape))
            at += x.size
        return tuple(gxs) if len(gxs) > 1 else gxs[0]


def _communicator(name, what):
    communicator = _COMMUNICATORS.get(name)
    if communicator is None:
        raise RuntimeError(f"{what}: no communicator named {name!r} in this "
                           f"process; call dezero.distributed.init() first")
    return communicator


# =============================================================================
# The optimizer hook: AllreduceGrads
# =============================================================================


class AllreduceGrads:
    """Average every parameter's gradient over the ranks, before the update.

    It runs before the optimizer's other hooks, whatever order they were added in
    (runs_first): weight decay and gradient clipping then see the averaged gradient,
    as they would in one process on the whole batch. It exchanges one flat buffer per
    dtype (one allreduce node in a traced step). A parameter without a gradient on a
    rank counts as zeros there, so that all ranks exchange the same buffer and end
    with the same gradients; one without a gradient on every rank keeps none and is
    not updated, as in one process (zeros would let weight decay or Adam's moments
    move it). Which ones have a gradient somewhere is a second, small exchange, made
    where the hook runs in Python (eager steps, and a traced step's recording).
    """

    runs_first = True

    def __init__(self, comm):
        self.comm = comm

    def __call__(self, params):
        params = [p for p in params if p.data is not None]  # lazy init not run yet
        somewhere = self.comm._any_rank([p.grad is not None for p in params])
        params = [p for p, held in zip(params, somewhere) if held]
        if not params:
            return
        grads = [p.grad if p.grad is not None else
                 Variable(cuda.get_array_module(p.data).zeros_like(p.data)) for p in params]
        means = Allreduce(self.comm.name, "mean")(*grads)
        for param, mean in zip(params, means if len(params) > 1 else [means]):
            param.grad = mean


# =============================================================================
# The sharded update: ShardedOptimizer (ZeRO stage 1)
# =============================================================================


class ShardedOptimizer:
    """An optimizer whose update every rank does on its own block of the parameters.

        optimizer = dist.ShardedOptimizer(optimizers.Adam(), comm).setup(model)

    The parameters of each dtype are joined end to end and cut into one block per rank.
    An update exchanges the gradients once (reduce_scatter: rank r receives the mean
    over the ranks of block r only), runs the optimizer on that block, and exchanges
    the new values once (allgather: every rank receives every block). That moves the
    bytes AllreduceGrads moves, while the update's work and its state (Adam's m and v)
    are 1/R per rank: ZeRO stage 1, PyTorch's ZeroRedundancyOptimizer.

    The parameters end as under AllreduceGrads, element for element, with optimizers
    that update each element on its own (SGD, MomentumSGD, AdaGrad, AdaDelta, Adam,
    AdamW, which judges each piece by the parameter it is cut from) and WeightDecay, the
    hook that does too. Hooks that read the whole gradient (ClipGrad's norm) or pick
    parameters (FreezeParam) would see one block: they are refused. A parameter
    without a gradient on any rank is not updated, as in one process; the
    parameters' own .grad keep this rank's gradient. The blocks are cut
    at the first update, so the model cannot gain parameters after it. The optimizer's
    hyperparameters read and set through this object (optimizer.alpha = 1e-4).
    """

    def __init__(self, optimizer, comm):
        if not isinstance(optimizer, optimizers.Optimizer):
            raise TypeError(f"ShardedOptimizer: wraps an optimizer, got "
                            f"{type(optimizer).__name__}: "
                            f"dist.ShardedOptimizer(optimizers.Adam(), comm).setup(model)")
        for hook in optimizer.hooks:
            _check_elementwise(hook)
        own = {"optimizer": optimizer, "comm": comm, "target": optimizer.target,
               "_layout": None, "_cuts": None, "pieces": None, "_owners": None}
        self.__dict__.update(own)
        optimizer.target = _Pieces()  # the optimizer itself updates this rank's pieces

    def __getattr__(self, name):  # the optimizer's hyperparameters, t, lr ...
        if name.startswith("__") or "optimizer" not in self.__dict__:
            raise AttributeError(name)  # (copy and pickle ask before __init__ ran)
        return getattr(self.__dict__["optimizer"], name)

    def __setattr__(self, name, value):
        if name in self.__dict__:
            self.__dict__[name] = value
        else:
            setattr(self.optimizer, name, value)

    def setup(self, target):
        self.__dict__["target"] = optimizers._checked_target("ShardedOptimizer", target)
        return self

    def add_hook(self, hook):
        if not isinstance(hook, type):  # (a class: the optimizer's add_hook refuses it)
            _check_elementwise(hook)
        self.optimizer.add_hook(hook)

    def state_dict(self):
        raise NotImplementedError(
            "ShardedOptimizer.state_dict: each rank holds the optimizer's state of its "
            "own block; save the model's weights (comm.save_weights), or train with "
            "optimizer.add_hook(dist.AllreduceGrads(comm)) to save the optimizer too")

    def update(self):
        if self.target is None:
            raise RuntimeError("ShardedOptimizer.update: no target; call "
                               "optimizer.setup(model) first")
        if layers.observer() is not None:
            layers.observer().updating()  # the gradients are read from here on
        for hook in self.optimizer.hooks:  # (some may have been added to it directly)
            _check_elementwise(hook)
        params = [p for p in self.target.params() if p.data is not None]
        somewhere = dict(zip(map(id, params), self.comm._any_rank(
            [p.grad is not None for p in params])))
        exchanged = []
        with no_grad():
            for group, pieces in self._cut(params):
                if not any(somewhere[id(p)] for p in group):
                    continue  # no gradient anywhere: nothing to update, nothing to send
                grads = [p.grad if p.grad is not None else
                         Variable(cuda.get_array_module(p.data).zeros_like(p.data))
                         for p in group]
                block = ReduceScatter(self.comm.name, "mean")(*grads)
                at = 0
                for i, start, stop, piece in pieces:
                    piece.data = group[i].reshape(-1)[start:stop].data
                    piece.grad = block[at:at + stop - start] if somewhere[id(group[i])] \
                        else None
                    at += stop - start
                exchanged.append((group, pieces))
            self.optimizer.target.pieces = [piece for _, pieces in exchanged
                                            for *_, piece in pieces]
            self.optimizer.target.wholes = [(self._owners[piece.name], group[i])
                                            for group, pieces in exchanged
                                            for i, _, _, piece in pieces]
            if exchanged and not any(piece.grad is not None
                                     for piece in self.optimizer.target.pieces):
                # This rank's block has no gradient, another's has: the step counters
                # still count the update, as on the other ranks.
                self.optimizer._count(exchanged[0][0][0])
            self.optimizer.update()
            for group, pieces in exchanged:
                mine = [piece for *_, piece in pieces] or [group[0].reshape(-1)[:0]]
                new = Allgather(self.comm.name, tuple(p.shape for p in group))(*mine)
                for param, value in zip(group, new if len(group) > 1 else [new]):
                    param.data = value.data
                for *_, piece in pieces:
                    piece.grad = None
        self.optimizer.target.pieces = self.optimizer.target.wholes = []

    def _cut(self, params):
        """(parameters of one device and dtype, this rank's pieces of them): each piece
        (index in the group, start, stop within its flattened parameter, a Parameter
        that the optimizer updates and keys its state by)."""
        groups = optimizers._by_kind(params)
        layout = [(id(p), p.shape, p.dtype) for p in params]
        if self._layout is None:
            named = self.target._named() if hasattr(self.target, "_named") else []
            names = {id(p): key for key, p in named}
            for k, p in enumerate(params):  # without a path, its place: names never repeat
                names.setdefault(id(p), f"{k}/{p.name}")
            cuts, pieces, owners = [], {}, {}
            with layers._untraced():  # made once, not a step to replay
                for group in groups:
                    cut = []
                    for i, start, stop in block_pieces([p.size for p in group],
                                                       self.comm.rank, self.comm.size):
                        name = f"{names[id(group[i])]}[{start}:{stop}]"
                        # With its values: a piece without any is state initialised
                        # in the run, so the first traced update would be recorded
                        # again here but kept on a rank whose block is empty.
                        piece = group[i].data.reshape(-1)[start:stop]
                        pieces[name] = Parameter(piece, name=name)
                        owners[name] = names[id(group[i])]
                        cut.append((i, start, stop, name))
                    cuts.append(cut)
            self.__dict__.update(_layout=layout, _cuts=cuts, pieces=pieces, _owners=owners)
        elif layout != self._layout:
            before, after = [*self._layout, None], [*layout, None]  # None: no parameter
            i = next(i for i, (a, b) in enumerate(zip(before, after)) if a != b)
            was, now = (f"{e[2]}{list(e[1])}" if e else "none" for e in (before[i], after[i]))
            change = f"{was} then, {now} now" if was != now else f"another Parameter of {now}"
            raise ValueError(
                f"ShardedOptimizer: the model's parameters changed since the first "
                f"update ({len(self._layout)} then, {len(params)} now; parameter {i}: "
                f"{change}), which cut them into the ranks' blocks; set up a new "
                f"ShardedOptimizer, or use optimizer.add_hook(dist.AllreduceGrads(comm))")
        return [(group, [(i, start, stop, self.pieces[name]) for i, start, stop, name in cut])
                for group, cut in zip(groups, self._cuts)]


class _Pieces:
    """The target of a sharded optimizer's own optimizer: this update's pieces, and
    the (name, Parameter) each is cut from (AdamW decides by them which decay)."""

    pieces = wholes = []

    def params(self):
        return iter(self.pieces)


def _check_elementwise(hook):
    if not isinstance(hook, optimizers.WeightDecay):
        raise TypeError(
            f"ShardedOptimizer: hook {type(hook).__name__} would see only this rank's "
            f"block of the parameters; only WeightDecay, which works element by "
            f"element, runs on blocks. Use optimizer.add_hook(dist.AllreduceGrads(comm)) "
            f"on the unsharded optimizer with this hook")


def block_pieces(sizes, rank, size):
    """The parts of arrays of `sizes` elements, joined end to end, that fall in rank's
    block (ceil(total / size) elements, the last blocks shorter or empty): a list of
    (index of the array, start, stop within it)."""
    total = sum(sizes)
    block = -(-total // size)
    low, high = min(total, rank * block), min(total, (rank + 1) * block)
    pieces, offset = [], 0
    for i, n in enumerate(sizes):
        start, stop = max(low, offset), min(high, offset + n)
        if start < stop:
            pieces.append((i, start - offset, stop - offset))
        offset += n
    return pieces


# =============================================================================
# Data: shard
# =============================================================================


class Shard:
    """This rank's part of a dataset: `indices` into it, read one example at a time."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index):
        return self.dataset[int(self.indices[index])]

    def __len__(self):
        return len(self.indices)


def shard_indices(n, rank, size, shuffle=True, seed=0, drop_last=False):
    """The indices of examples 0..n-1 that rank takes: every rank the same number,
    ceil(n / size) (the first examples of the order again fill the last shards) or
    with drop_last, n // size (the rest is left out)."""
    if shuffle and seed is None:
        raise ValueError("shard: shuffle with seed=None would draw another order on each "
                         "rank (the shards would overlap and leave examples out); pass "
                         "the same int on every rank, e.g. seed=epoch")
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    per_rank = n // size if drop_last else -(-n // size)
    if per_rank == 0:
        raise ValueError(f"shard: {n} examples for {size} ranks leave rank {rank} none")
    order = np.resize(order, per_rank * size)  # repeats the start where n is short
    return order[rank * per_rank:(rank + 1) * per_rank]


def shard(dataset, comm, shuffle=True, seed=0, drop_last=False):
    """This rank's shard of dataset, all ranks getting shards of the same length.

    shuffle orders the examples by a generator seeded with seed, the same on every
    rank (pass the epoch for a new split each epoch); the shards never overlap except
    where ceil(len / size) * size exceeds len: the first examples fill the gap
    (drop_last=True leaves out the remainder instead).
    """
    indices = shard_indices(len(dataset), comm.rank, comm.size, shuffle, seed, drop_last)
    return Shard(dataset, indices)
