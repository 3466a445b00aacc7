"""cupy.cuda.nccl of the double: NCCL's communicator as a stand-in over MPI (mpi4py).

Like NCCL it works on device pointers (`array.data.ptr`), counts and NCCL's dtype and
op codes, and every rank of a communicator must join it with the same unique id, made
by one rank and sent to the others (over MPI, as dezero.distributed does). The
exchanges read and write the memory behind the pointers, through MPI's world.

Its names are those cupy's own cupyx.distributed calls on cupy.cuda.nccl (the wheel's
module does not load without libnccl, so write_names.py cannot list it). What it
cannot show: NCCL's own speed, its rings and trees, its refusal of two ranks on one
GPU (the double has no devices to tell apart), asynchrony on the stream.
"""
import ctypes
import os

import numpy

available = True

NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32, NCCL_INT64, NCCL_UINT64 = range(6)
NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64 = 6, 7, 8
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = range(4)

_DTYPES = {NCCL_INT8: numpy.int8, NCCL_UINT8: numpy.uint8, NCCL_INT32: numpy.int32,
           NCCL_UINT32: numpy.uint32, NCCL_INT64: numpy.int64, NCCL_UINT64: numpy.uint64,
           NCCL_FLOAT16: numpy.float16, NCCL_FLOAT32: numpy.float32,
           NCCL_FLOAT64: numpy.float64}


def get_unique_id():
    """A new communicator id: 128 bytes, as a tuple of ints (cupy's form)."""
    return tuple(b - 128 for b in os.urandom(128))


class NcclError(RuntimeError):
    pass


class NcclCommunicator:
    """rank `rank` of a communicator of `ndev` ranks, joined with id `commId`."""

    def __init__(self, ndev, commId, rank):
        from mpi4py import MPI
        self._mpi = MPI.COMM_WORLD
        if ndev != self._mpi.Get_size() or rank != self._mpi.Get_rank():
            raise NcclError(f"the stand-in spans MPI's world of {self._mpi.Get_size()}: "
                            f"rank {rank} of {ndev} does not match it")
        ids = self._mpi.allgather(tuple(commId))
        if any(i != ids[0] for i in ids):
            raise NcclError("ranks joined with different unique ids (ncclInvalidUsage)")
        self._rank, self._size = rank, ndev

    def rank_id(self):
        return self._rank

    def size(self):
        return self._size

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        from mpi4py import MPI
        send, recv = _view(sendbuf, count, datatype), _view(recvbuf, count, datatype)
        mpi_op = {NCCL_SUM: MPI.SUM, NCCL_PROD: MPI.PROD, NCCL_MAX: MPI.MAX,
                  NCCL_MIN: MPI.MIN}[op]
        self._mpi.Allreduce(MPI.IN_PLACE if sendbuf == recvbuf else send, recv, op=mpi_op)

    def reduceScatter(self, sendbuf, recvbuf, recvcount, datatype, op, stream):
        from mpi4py import MPI
        send = _view(sendbuf, recvcount * self._size, datatype)
        mpi_op = {NCCL_SUM: MPI.SUM, NCCL_PROD: MPI.PROD, NCCL_MAX: MPI.MAX,
                  NCCL_MIN: MPI.MIN}[op]
        self._mpi.Reduce_scatter_block(send, _view(recvbuf, recvcount, datatype), op=mpi_op)

    def allGather(self, sendbuf, recvbuf, count, datatype, stream):
        from mpi4py import MPI
        recv = _view(recvbuf, count * self._size, datatype)
        in_place = sendbuf == recvbuf + self._rank * count * recv.itemsize
        self._mpi.Allgather(MPI.IN_PLACE if in_place else _view(sendbuf, count, datatype),
                            recv)

    def broadcast(self, sendbuff, recvbuff, count, datatype, root, stream):
        recv = _view(recvbuff, count, datatype)
        if self._rank == root and sendbuff != recvbuff:
            recv[...] = _view(sendbuff, count, datatype)
        self._mpi.Bcast(recv, root=root)

    def destroy(self):
        pass


def _view(ptr, count, datatype):
    """The `count` elements of type `datatype` at device pointer ptr (host memory here)."""
    dtype = numpy.dtype(_DTYPES[datatype])
    memory = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return numpy.frombuffer(memory, dtype=dtype)


def __getattr__(name):
    raise AttributeError(f"the cupy test double's cupy.cuda.nccl has no {name!r} (it "
                         f"provides what dezero.distributed calls; add it here)")
