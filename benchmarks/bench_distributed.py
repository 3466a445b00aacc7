"""Data-parallel training: one training step of a 784-1000-10 ReLU MLP with Adam on
1, 2 and 4 ranks (mpiexec, one thread per rank), each rank on its own batch of
--batch samples (weak scaling: the global batch grows with the ranks).

Four forms of the step take turns: "hook" averages the gradients with
dist.AllreduceGrads (ranks on one machine exchange through memory they share),
"hook-mpi" does the same through MPI's allreduce (as DEZERO_MPI_SHARED_MEMORY=0
does), "sharded" updates with dist.ShardedOptimizer (each rank
its block of the parameters), "none" exchanges nothing (every rank computing on
its own, on the shared cores: the ceiling an exchange that cost nothing would
reach; at one rank, training without dezero.distributed). Prints for each: ms
per step, samples per second of the whole job, ms of the step in the
exchanges (waiting for the slowest rank included), the exchanges timed alone
with every rank ready (packing included), and the speedup and weak-scaling
efficiency over one process training without dezero.distributed.
Run by hand from the repository root:

    python benchmarks/bench_distributed.py [--ranks 1 2 4] [--rounds 5] [--eager]

It starts `mpiexec -n R python -m mpi4py benchmarks/bench_distributed.py --worker`
for each R (the mpich wheel of `pip install 'dezero[distributed]'` brings
mpiexec). Each form is timed in rounds of --steps steps; the fastest round
counts. Results: see benchmarks/README.md.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                     "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}

# =============================================================================
# One rank: the worker
# =============================================================================


def worker(args):
    import dezero
    import dezero.distributed as dist
    import dezero.functions as F
    from dezero import optimizers
    from dezero.models import MLP

    comm = dist.init()
    rng = np.random.default_rng(comm.rank)
    x = rng.random((args.batch, 784), dtype=np.float32)
    t = rng.integers(0, 10, args.batch)

    def training_step(exchange):
        model = MLP((1000, 10), activation=F.relu)
        model(x[:1])
        comm.broadcast_params(model)
        optimizer = optimizers.Adam()
        if exchange == "sharded":
            optimizer = dist.ShardedOptimizer(optimizer, comm)
        elif exchange in ("hook", "hook-mpi"):
            optimizer.add_hook(dist.AllreduceGrads(comm))
        optimizer.setup(model)

        def step(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss

        return (step if args.eager else dezero.trace(step)), model

    # The step with either exchange, and the same step with none (each rank alone, on
    # cores shared with the others): the most that R ranks could reach with an
    # exchange that cost nothing; at one rank, training without dezero.distributed.
    steps = {kind: training_step(kind) for kind in KINDS}

    exchange = [0.0]  # seconds spent in the exchanges
    mpi_exchange = comm._mpi_exchange

    def timed(*args, **kwargs):
        start = time.perf_counter()
        mpi_exchange(*args, **kwargs)
        exchange[0] += time.perf_counter() - start

    comm._mpi_exchange = timed

    shared = comm._shared  # the exchange through shared memory (None: plain MPI)

    def plain_mpi(kind):
        comm._shared = None if kind == "hook-mpi" else shared

    def round_time(step):
        comm.barrier()
        exchange[0] = 0.0
        start = time.perf_counter()
        for _ in range(args.steps):
            step(x, t)
        comm.barrier()
        seconds = comm.mpi.bcast(time.perf_counter() - start)  # rank 0's clock
        return seconds / args.steps, exchange[0] / args.steps

    for _ in range(args.warmup):  # the traces, their kernels' compilation, the caches
        for kind, (step, _) in steps.items():
            plain_mpi(kind)
            step(x, t)
    # The fastest round of each (others' load slows some rounds), the steps taking
    # turns so that all meet the same load.
    best = {kind: (float("inf"), 0.0) for kind in KINDS}
    for _ in range(args.rounds):
        for kind, (step, _) in steps.items():
            plain_mpi(kind)
            best[kind] = min(best[kind], round_time(step))
    plain_mpi("hook")
    result = {"ranks": comm.size}
    for kind in KINDS:
        exchanges = comm.mpi.gather(best[kind][1], root=0)  # None off rank 0
        result[kind] = {"step_s": best[kind][0],
                        "exchange_s": float(np.mean(exchanges)) if comm.rank == 0 else 0}
    grads = [p.grad.data for p in steps["hook"][1].params()]
    comm._mpi_exchange = mpi_exchange
    result["hook"]["alone_s"] = exchange_alone(comm, args.rounds, lambda: comm._reduce_arrays(
        grads, "mean"))
    plain_mpi("hook-mpi")
    result["hook-mpi"]["alone_s"] = exchange_alone(comm, args.rounds, lambda: comm._reduce_arrays(
        grads, "mean"))
    plain_mpi("hook")
    result["sharded"]["alone_s"] = exchange_alone(comm, args.rounds, lambda: comm._allgather(
        [comm._reduce_scatter(grads, "mean")], [g.shape for g in grads]))
    if comm.rank == 0:
        print(json.dumps(result))


# The steps timed: gradients averaged by AllreduceGrads (through the memory the ranks
# share, and through MPI's allreduce), the update sharded by ShardedOptimizer, no
# exchange.
KINDS = ("hook", "hook-mpi", "sharded", "none")


def exchange_alone(comm, rounds, exchange):
    """Seconds of an exchange of the gradients with every rank ready (after a
    barrier): the exchange itself, packing included, without waiting for a slower
    rank (best of rounds)."""
    best = float("inf")
    for _ in range(rounds * 4):
        comm.barrier()
        start = time.perf_counter()
        exchange()
        best = min(best, comm.mpi.bcast(time.perf_counter() - start))
    return best


# =============================================================================
# The driver: one mpiexec per rank count, then the table
# =============================================================================


def launch(ranks, args):
    mpiexec = Path(sys.executable).with_name("mpiexec")
    command = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks),
               sys.executable, "-m", "mpi4py", __file__, "--worker",
               "--batch", str(args.batch), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--rounds", str(args.rounds)]
    command += ["--eager"] if args.eager else []
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise SystemExit(f"mpiexec -n {ranks} failed:\n{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batch", type=int, default=100, help="samples per rank and step")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (best kept)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--eager", action="store_true", help="eager steps, not traced")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    print(f"784-1000-10 ReLU MLP, Adam, {args.batch} samples per rank and step, "
          f"{'eager' if args.eager else 'traced'}, one thread per rank, "
          f"{os.cpu_count()} cores")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > 0.5:  # the ranks then share the cores with others, and wait for each other
        print(f"the machine is busy (load average {load:.1f} before the run): the "
              f"figures measure that load as much as the steps")
    print(f"{'ranks':>5} {'step':>8} {'ms/step':>8} {'samples/s':>10} {'exchange ms':>12} "
          f"{'alone ms':>9} {'vs 1 process':>13} {'efficiency':>10}")
    one_process = None
    for ranks in args.ranks:
        result = launch(ranks, args)
        if ranks == 1:  # training without dezero.distributed
            one_process = args.batch / result["none"]["step_s"]
        for kind in KINDS:
            row = result[kind]
            rate = ranks * args.batch / row["step_s"]
            exchanged = "-" if kind == "none" else f"{row['exchange_s'] * 1e3:.2f}"
            alone = "-" if kind == "none" else f"{row['alone_s'] * 1e3:.2f}"
            speedup = f"{rate / one_process:.2f}x" if one_process else "-"
            efficiency = f"{rate / (ranks * one_process):.0%}" if one_process else "-"
            print(f"{ranks:>5} {kind:>8} {row['step_s'] * 1e3:>8.2f} {rate:>10.0f} "
                  f"{exchanged:>12} {alone:>9} {speedup:>13} {efficiency:>10}")


if __name__ == "__main__":
    main()
