"""A training run that test_distributed_mpi.py starts under `mpiexec -n R` (or as one
plain process): R ranks, each on its shard of a fixed batch, or one process on the
whole batch. Rank 0 writes the final parameters to the .npz file named by argv[2].
With DEZERO_WORKER_GPU=1 the models and batches live on the GPU (each rank on its
local rank's), and the exchanges go through NCCL (DEZERO_WORKER_NCCL=0: through the
host, as where NCCL is missing).

    python -m mpi4py tests/distributed_worker.py train out.npz
    python -m mpi4py tests/distributed_worker.py fail       # (or mismatch, unused)
"""
import os
import sys

import numpy as np

import dezero
import dezero.distributed as dist
import dezero.functions as F
import dezero.layers as L
from dezero import cuda, optimizers
from dezero.models import MLP

STEPS = 5
GPU = os.environ.get("DEZERO_WORKER_GPU") == "1"


def on_device(array):
    return cuda.as_cupy(array) if GPU else array


def step_of(model, optimizer, loss_of):
    def step(x, t):
        loss = loss_of(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def adam_mlp(comm, x, t, traced, sharded=False):
    """An MLP seeded differently on every rank, made equal by broadcast_params; the
    gradients averaged by AllreduceGrads, or the update sharded."""
    np.random.seed(100 + comm.rank)
    model = MLP((16, 3))
    model(x[:1])
    if GPU:
        model.to_gpu()
    before = comm.mpi.allgather(cuda.as_numpy(model.l0.W.data))
    comm.broadcast_params(model)
    after = comm.mpi.allgather(cuda.as_numpy(model.l0.W.data))
    if comm.size > 1:
        assert not all(np.array_equal(before[0], w) for w in before[1:])
        assert all(np.array_equal(after[0], w) for w in after[1:])
    optimizer = optimizers.Adam(alpha=0.01)
    if sharded:
        optimizer = dist.ShardedOptimizer(optimizer, comm).setup(model)
    else:
        optimizer.setup(model).add_hook(dist.AllreduceGrads(comm))
    step = step_of(model, optimizer, F.softmax_cross_entropy)
    return model, dezero.trace(step) if traced else step


def exact_linear(comm, traced, sharded=False):
    """A linear layer with integer weights: on integer data, every gradient and update
    is exact in float64 (powers of two as batch sizes and step size)."""
    model = L.Linear(2, in_size=4, dtype=np.float64)
    model.W.data = np.arange(-4, 4, dtype=np.float64).reshape(4, 2)
    model.b.data = np.array([1.0, -1.0])
    if GPU:
        model.to_gpu()
    optimizer = optimizers.SGD(lr=1 / 64)
    if sharded:
        optimizer = dist.ShardedOptimizer(optimizer, comm).setup(model)
    else:
        optimizer.setup(model).add_hook(dist.AllreduceGrads(comm))
    step = step_of(model, optimizer, F.mean_squared_error)
    return model, dezero.trace(step) if traced else step


def train(out):
    comm = dist.init()
    if GPU:
        comm.use_gpu()
        if os.environ.get("DEZERO_WORKER_NCCL") == "0":
            from cupy.cuda import nccl
            nccl.available = False
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    t = rng.integers(0, 3, 32)
    xi = rng.integers(-2, 3, (16, 4)).astype(np.float64)
    ti = rng.integers(-3, 4, (16, 2)).astype(np.float64)
    mine = dist.shard_indices(32, comm.rank, comm.size, shuffle=False)
    mine_i = dist.shard_indices(16, comm.rank, comm.size, shuffle=False)
    results = {}
    for mode in ("eager", "traced", "sharded_eager", "sharded_traced"):
        traced, sharded = mode.endswith("traced"), mode.startswith("sharded")
        model, step = adam_mlp(comm, x, t, traced, sharded)
        exact, exact_step = exact_linear(comm, traced, sharded)
        for _ in range(STEPS):
            step(on_device(x[mine]), on_device(t[mine]))
            exact_step(on_device(xi[mine_i]), on_device(ti[mine_i]))
        for i, p in enumerate(model.params()):
            results[f"adam_{mode}_{i}"] = cuda.as_numpy(p.data)
        for i, p in enumerate(exact.params()):
            results[f"exact_{mode}_{i}"] = cuda.as_numpy(p.data)
        if traced:
            ops = [n.op for n in step.graph.nodes if n.kind == "op"]
            results[f"{mode}_nodes"] = np.array([ops.count(op) for op in (
                "allreduce", "reduce_scatter", "allgather")])
    results["nccl"] = np.array(bool(comm._nccl))  # the exchanges went through NCCL
    # how many exchanges went through the window the ranks share (None: plain MPI)
    results["shared_exchanges"] = np.array(comm._shared.exchanges if comm._shared else -1)
    if comm.rank == 0:
        np.savez(out, **results)


def unused():
    """A parameter only rank 0's loss reaches (the others exchange zeros for it) and one
    no loss reaches (it keeps no gradient and stays as it was), eager and traced: the
    ranks end equal, and as one process whose loss weighs the first by 1 / size."""
    comm = dist.init()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    t = rng.integers(0, 3, 16)
    mine = dist.shard_indices(16, comm.rank, comm.size, shuffle=False)

    def run(parallel, traced):
        np.random.seed(0)
        model = MLP((8, 3))
        model(x[:1])
        model.extra = dezero.Parameter(np.ones(3, np.float32))
        model.spare = dezero.Parameter(np.ones(2, np.float32))
        optimizer = optimizers.Adam(alpha=0.01).setup(model)
        optimizer.add_hook(optimizers.WeightDecay(0.1))
        if parallel:
            optimizer.add_hook(dist.AllreduceGrads(comm))
        weight = 1.0 if parallel else 1.0 / comm.size

        def step(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            if not parallel or comm.rank == 0:
                loss = loss + weight * F.sum(model.extra * model.extra)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        step = dezero.trace(step) if traced else step
        for _ in range(STEPS):
            step(x[mine], t[mine]) if parallel else step(x, t)
        assert model.spare.grad is None, "a parameter no rank has a gradient for got one"
        return [p.data for p in model.params()]

    for traced in (False, True):
        together = run(True, traced)
        for i, mine_p in enumerate(together):
            ranks = comm.mpi.allgather(mine_p)
            assert all(np.array_equal(ranks[0], p) for p in ranks[1:]), f"parameter {i}"
        for i, (a, b) in enumerate(zip(together, run(False, traced))):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=f"parameter {i}")
        np.testing.assert_array_equal(together[-1], 1.0)  # spare, the last added


def tiny():
    """A model of fewer elements than ranks (a scalar weight and an empty one), sharded
    and traced: ranks whose block is empty keep their first recording where the others
    initialise their blocks' state in it, and every rank ends as one process."""
    comm = dist.init()
    x = np.arange(8, dtype=np.float32).reshape(8, 1)
    mine = dist.shard_indices(8, comm.rank, comm.size, shuffle=False)

    def run(parallel):
        model = dezero.Layer()
        model.w = dezero.Parameter(np.array([0.5], np.float32))
        model.empty = dezero.Parameter(np.zeros(0, np.float32))
        optimizer = optimizers.Adam(alpha=0.1)
        if parallel:
            optimizer = dist.ShardedOptimizer(optimizer, comm)
        optimizer.setup(model)

        def step(x):
            loss = F.sum((x * model.w - 1.0) ** 2) / len(x) + F.sum(model.empty)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        step = dezero.trace(step)
        for _ in range(STEPS):
            step(x[mine]) if parallel else step(x)
        return model.w.data

    together, alone = run(True), run(False)
    assert all(np.array_equal(together, w) for w in comm.mpi.allgather(together))
    np.testing.assert_allclose(together, alone, rtol=1e-6)


def fail():
    comm = dist.init()
    if comm.rank == comm.size - 1:
        raise ValueError(f"rank {comm.rank} fails on purpose")
    comm.barrier()  # the others wait here for a rank that never comes


def sizes():
    """Rank 1 passes a longer array than the others to an allreduce."""
    comm = dist.init()
    comm.allreduce(np.ones(100))  # the window has room for both
    comm.allreduce(np.arange(3.0 + 2 * (comm.rank == 1)))


def shapes(sharded):
    """Rank 1 gets a shorter batch once, in the fourth traced step: it records the step
    again while the others replay it."""
    comm = dist.init()
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    model = MLP((8, 3))
    model(x[:1])
    optimizer = optimizers.Adam()
    if sharded:
        optimizer = dist.ShardedOptimizer(optimizer, comm).setup(model)
    else:
        optimizer.setup(model).add_hook(dist.AllreduceGrads(comm))
    step = dezero.trace(step_of(model, optimizer, F.softmax_cross_entropy))
    for i in range(5):
        n = 3 if i == 3 and comm.rank == 1 else 4
        step(x[:n], np.zeros(n, np.int64))


def evaluate():
    """A traced evaluation whose only exchange is its allreduce, over parts of a test
    set of different sizes: the rank with the shorter last part records the function
    again while the others replay it, and both make the same exchange."""
    comm = dist.init()
    x = np.arange(6 * comm.size - 1, dtype=np.float32)  # 6 each, 5 for the last rank
    parts = np.array_split(x, comm.size)[comm.rank]
    total = dezero.trace(lambda batch: comm.allreduce(F.sum(batch * 2.0)))
    sums = [float(total(parts[i:i + 3]).data) for i in range(0, 6, 3)]
    assert sums == [float(sum(2 * p[i:i + 3].sum() for p in np.array_split(x, comm.size)))
                    for i in range(0, 6, 3)], sums


def mismatch():
    """The last rank builds a wider model: broadcast_params refuses it there."""
    comm = dist.init()
    model = MLP((17 if comm.rank == comm.size - 1 else 16, 3))
    model(np.zeros((1, 6), np.float32))
    comm.broadcast_params(model)


def threads():
    """Each rank's thread counts after init: its BLAS's and OMP_NUM_THREADS, one line."""
    from threadpoolctl import threadpool_info
    comm = dist.init()
    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    print(f"rank {comm.rank}: blas {blas} omp {os.environ.get('OMP_NUM_THREADS')}",
          flush=True)


if __name__ == "__main__":
    {"train": lambda: train(sys.argv[2]), "fail": fail, "mismatch": mismatch,
     "unused": unused, "threads": threads, "tiny": tiny,
     "sizes": sizes, "evaluate": evaluate, "shapes": lambda: shapes(False),
     "sharded_shapes": lambda: shapes(True)}[sys.argv[1]]()
