"""Data parallelism over MPI: a communicator, averaged gradients, shards of a dataset.

distributed.py sits beside the optimizers. Every process (a rank) holds the whole
model and trains on its own shard of the data; an optimizer hook averages the
gradients over the ranks before each update, so the ranks stay equal. MPI comes from
mpi4py (imported by init(), never by `import dezero`); on GPUs the arrays travel
through NCCL. Launch with `mpiexec -n 2 python -m mpi4py train.py`.

    comm = dist.init(); model(x[:1]); comm.broadcast_params(model)
    optimizer.add_hook(dist.AllreduceGrads(comm))
"""
import os
import sys
import time
import traceback
import warnings

import numpy as np

from dezero import cuda
from dezero.core import Function, TracedArray, Variable, no_grad

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
        _COMMUNICATORS[name] = self

    def __repr__(self):
        return f"<Communicator {self.name}: rank {self.rank} of {self.size}>"

    # ---- plain collectives ---------------------------------------------------
    def barrier(self):
        """Wait until every rank has come here."""
        self.mpi.Barrier()

    def allreduce(self, x, op="sum"):
        """x summed (op="mean": averaged; "max", "min") over the ranks, every rank
        getting the result. An array gives a new array of its module; a Variable gives
        a Variable made by an allreduce op (recorded by a trace, differentiable), as
        does an array inside a traced function."""
        if isinstance(x, (Variable, TracedArray)):  # an array that a trace records
            return Allreduce(self.name, op)(x)
        return self._reduce_arrays([_plain_array(x, "allreduce")], op)[0]

    def broadcast(self, x, root=0):
        """Rank root's array, on every rank (each passes an array of the same shape
        and dtype; numpy or cupy)."""
        x = _plain_array(x, "broadcast")
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
        if self.size > 1:
            from mpi4py import MPI
            self.mpi.Allreduce(MPI.IN_PLACE, flags, op=MPI.MAX)
        return flags.astype(bool).tolist()

    # ---- rank 0 alone --------------------------------------------------------
    def print(self, *args, **kwargs):
        """print() on rank 0 only (one line of progress, not one per rank)."""
        if self.rank == 0:
            print(*args, **kwargs, flush=True)

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
        if op not in _REDUCE_OPS:
            raise ValueError(f"allreduce: op must be one of {sorted(_REDUCE_OPS)}, "
                             f"got {op!r}")
        results = [None] * len(arrays)
        by_dtype = {}
        for i, a in enumerate(arrays):
            by_dtype.setdefault((a.dtype, cuda.get_array_module(a)), []).append(i)
        for (dtype, xp), positions in by_dtype.items():
            if dtype.kind == "b":  # MPI and NCCL reduce no booleans
                raise TypeError(f"allreduce: a bool array (shape "
                                f"{arrays[positions[0]].shape}) cannot be reduced over "
                                "ranks; cast it first, x.astype(np.int32) (op='sum' then "
                                "counts the ranks where an element is true, 'max' is "
                                "any, 'min' is all)")
            if dtype.kind == "c" and op in ("max", "min"):
                raise TypeError(f"allreduce: op={op!r} of {dtype} arrays has no order; "
                                f"reduce abs(x) or x.real instead")
            if op == "mean" and dtype.kind not in "fc":
                raise TypeError(f"allreduce: op='mean' of {dtype} arrays would round; "
                                f"reduce with op='sum' or cast to a float dtype first")
            # Pack into one buffer. A mean divides each array by the number of ranks as
            # it is packed, so the exchange's sum is the mean: no second pass over it.
            flat = xp.empty(sum(arrays[i].size for i in positions), dtype)
            start = 0
            for i in positions:
                a = arrays[i]
                results[i] = flat[start:start + a.size].reshape(a.shape)
                start += a.size
                if op == "mean" and self.size > 1:
                    xp.divide(a, dtype.type(self.size), out=results[i])
                else:
                    results[i][...] = a
            self._exchange(flat, "allreduce", op)  # also alone: the same path at any size
        return results

    def _exchange(self, flat, what, op="sum", root=0):
        """Reduce (what="allreduce") or broadcast the contiguous array flat in place,
        on every rank: NCCL for cupy arrays where it exists, else through the host."""
        if isinstance(flat, np.ndarray):
            self._mpi_exchange(flat, what, op, root)
            return
        nccl = self._nccl_communicator()
        if nccl is None or not _nccl_exchange(nccl, flat, what, op, root):
            host = cuda.as_numpy(flat)  # host staging: copy to numpy, exchange, copy back
            self._mpi_exchange(host, what, op, root)
            flat[...] = cuda.as_cupy(host)

    def _mpi_exchange(self, flat, what, op, root):
        from mpi4py import MPI
        if what == "broadcast":
            self.mpi.Bcast(flat, root=root)
        else:
            mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
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
                warnings.warn("dezero.distributed: NCCL is missing, so cupy arrays are "
                              "exchanged through host memory (slower); install "
                              "nvidia-nccl-cu12 for direct GPU transfers", stacklevel=3)
                self._nccl = False
            else:
                unique_id = self.mpi.bcast(nccl.get_unique_id() if self.rank == 0 else None)
                self._nccl = nccl.NcclCommunicator(self.size, unique_id, self.rank)
        return self._nccl or None


_REDUCE_OPS = {"sum", "mean", "max", "min"}


def _nccl_exchange(comm, flat, what, op, root):
    """Exchange flat through NCCL; False where NCCL has no reduction of its dtype."""
    from cupy.cuda import nccl
    if what == "broadcast":  # any dtype, as its bytes
        flat = flat.view(np.uint8)
    elif flat.dtype.kind == "c":  # a complex sum: the sums of its two parts
        flat = flat.view(flat.dtype.type(0).real.dtype)
    kind = getattr(nccl, f"NCCL_{flat.dtype.name.upper()}", None)  # NCCL_INT8 ...
    if kind is None:
        return False
    stream = cuda.cupy.cuda.get_current_stream().ptr
    if what == "broadcast":
        comm.broadcast(flat.data.ptr, flat.data.ptr, flat.size, kind, root, stream)
    else:
        reduce = {"sum": nccl.NCCL_SUM, "mean": nccl.NCCL_SUM, "max": nccl.NCCL_MAX,
                  "min": nccl.NCCL_MIN}[op]
        comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, kind, reduce, stream)
    return True


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

    def __init__(self, comm="world", op="sum"):
        self.comm = comm
        self.op = op

    def forward(self, *xs):
        communicator = _COMMUNICATORS.get(self.comm)
        if communicator is None:
            raise RuntimeError(f"allreduce: no communicator named {self.comm!r} in this "
                               f"process; call dezero.distributed.init() first")
        ys = communicator._reduce_arrays(list(xs), self.op)
        return tuple(ys) if len(ys) > 1 else ys[0]

    def backward(self, *gys):
        if self.op not in ("sum", "mean"):
            raise NotImplementedError(f"allreduce: op={self.op!r} has no backward")
        # Each rank's result depends on every rank's input alike: the gradient of a
        # sum (or mean) over ranks is the sum (or mean) of the gradients.
        return Allreduce(self.comm, self.op)(*gys)


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
