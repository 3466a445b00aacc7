"""Data-parallel training: one training step of a 784-1000-10 ReLU MLP with Adam on
1, 2 and 4 ranks (mpiexec, one thread per rank), each rank on its own batch of
--batch samples (weak scaling: the global batch grows with the ranks).

Prints per rank count: samples per second of the whole job, milliseconds per
step, milliseconds per step of the same step without the exchange (every rank
computing on its own, on the shared cores: the ceiling an exchange that cost
nothing would reach), milliseconds of the step in the allreduce (the gradients'
exchange, including the wait for the slowest rank), the same exchange timed alone
with every rank ready, and weak-scaling efficiency, samples/s at R ranks over R
times samples/s at one.
Run by hand from the repository root:

    python benchmarks/bench_distributed.py [--ranks 1 2 4] [--rounds 5] [--eager]

It starts `mpiexec -n R python -m mpi4py benchmarks/bench_distributed.py --worker`
for each R (the mpich wheel of `pip install 'dezero[distributed]'` brings
mpiexec). Each rank count is timed in rounds of --steps steps; the fastest round
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
        if exchange and args.sharded:
            optimizer = dist.ShardedOptimizer(optimizer, comm)
        elif exchange:
            optimizer.add_hook(dist.AllreduceGrads(comm))
        optimizer.setup(model)

        def step(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss

        return (step if args.eager else dezero.trace(step)), model

    # The step as trained, and the same step with no exchange (each rank alone, on
    # cores shared with the others): the most that R ranks could reach with an
    # exchange that cost nothing.
    step, model = training_step(exchange=True)
    no_exchange_step, _ = training_step(exchange=False)

    exchange = [0.0]  # seconds spent in the exchanges
    mpi_exchange = comm._mpi_exchange

    def timed(*args):
        start = time.perf_counter()
        mpi_exchange(*args)
        exchange[0] += time.perf_counter() - start

    comm._mpi_exchange = timed

    def round_time(step):
        comm.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step(x, t)
        comm.barrier()
        return comm.mpi.bcast(time.perf_counter() - start) / args.steps  # rank 0's clock

    for _ in range(args.warmup):  # the traces, their kernels' compilation, the caches
        step(x, t)
        no_exchange_step(x, t)
    # The fastest round of each (others' load slows some rounds), the two steps taking
    # turns so that both meet the same load.
    best, best_no_exchange = (float("inf"), 0.0), float("inf")
    for _ in range(args.rounds):
        exchange[0] = 0.0
        seconds = round_time(step)
        best = min(best, (seconds, exchange[0] / args.steps))
        best_no_exchange = min(best_no_exchange, round_time(no_exchange_step))
    exchanges = comm.mpi.gather(best[1], root=0)  # None off rank 0
    alone = exchange_alone(comm, [p.grad.data for p in model.params()], args.rounds)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "step_s": best[0], "alone_s": alone,
                          "allreduce_s": float(np.mean(exchanges)),
                          "no_exchange_s": best_no_exchange}))


def exchange_alone(comm, grads, rounds):
    """Seconds of the gradients' allreduce with every rank ready (after a barrier):
    the exchange itself, without waiting for a slower rank (best of rounds)."""
    best = float("inf")
    for _ in range(rounds * 4):
        comm.barrier()
        start = time.perf_counter()
        comm._reduce_arrays(grads, "mean")
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
    command += ["--sharded"] if args.sharded else []
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
    parser.add_argument("--sharded", action="store_true",
                        help="dist.ShardedOptimizer instead of the AllreduceGrads hook")
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
    print(f"{'ranks':>5} {'samples/s':>10} {'ms/step':>8} {'no exchange':>12} "
          f"{'allreduce ms':>13} {'alone ms':>9} {'vs 1 rank':>10} {'efficiency':>10}")
    base = None
    for ranks in args.ranks:
        result = launch(ranks, args)
        rate = ranks * args.batch / result["step_s"]
        base = base or (rate if ranks == 1 else None)
        speedup = f"{rate / base:.2f}x" if base else "-"
        efficiency = f"{rate / (ranks * base):.0%}" if base else "-"
        print(f"{ranks:>5} {rate:>10.0f} {result['step_s'] * 1e3:>8.2f} "
              f"{result['no_exchange_s'] * 1e3:>12.2f} "
              f"{result['allreduce_s'] * 1e3:>13.2f} {result['alone_s'] * 1e3:>9.2f} "
              f"{speedup:>10} {efficiency:>10}")


if __name__ == "__main__":
    main()
