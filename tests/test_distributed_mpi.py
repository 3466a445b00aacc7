"""Data parallelism across processes: `mpiexec -n R` runs tests/distributed_worker.py
(one thread per rank, oversubscribed on small machines) and its parameters are
compared with one process trained on the whole batch. Slow: each run starts R
Python processes."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "distributed_worker.py")
# One thread per rank: R ranks of several BLAS threads each would fight for the cores.
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                     "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}


def mpiexec():
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel's, in this env
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec: pip install 'dezero[distributed]' brings mpich's")
    return found


def launch(ranks, *args, runner=("-m", "mpi4py"), timeout=120, threads=ONE_THREAD, env=()):
    """Run the worker on `ranks` processes (None: one plain process, no mpiexec)."""
    env = {**{name: value for name, value in os.environ.items() if name not in ONE_THREAD
              and name != "DEZERO_MPI_SHARED_MEMORY"}, **dict(env)}
    env.update(threads, PYTHONPATH=str(ROOT))
    command = [sys.executable, *runner, WORKER, *args]
    if ranks is not None:
        command = [mpiexec(), "-n", str(ranks), *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """The parameters of one process trained on the whole batch."""
    out = tmp_path_factory.mktemp("alone") / "params.npz"
    run = launch(None, "train", str(out), runner=())
    assert run.returncode == 0, run.stderr
    return dict(np.load(out))


@pytest.mark.parametrize("ranks", [2, 4])
def test_ranks_on_shards_end_as_one_process_on_the_whole_batch(ranks, alone, tmp_path):
    out = tmp_path / "params.npz"
    run = launch(ranks, "train", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    together = dict(np.load(out))
    assert together.keys() == alone.keys()
    # the ranks, all on this machine, exchanged through the memory they share
    assert together["shared_exchanges"] > 0
    # the traced step exchanged in one node; sharded, in one each way
    assert together["traced_nodes"].tolist() == [1, 0, 0]
    assert together["sharded_traced_nodes"].tolist() == [0, 1, 1]
    for key, expected in alone.items():
        if key.startswith("adam"):  # float32 MLP after 5 Adam steps, eager and traced
            np.testing.assert_allclose(together[key], expected, rtol=1e-5, atol=1e-7,
                                       err_msg=key)
        elif key.startswith("exact"):  # integer data, power-of-two shards: to the bit
            assert np.array_equal(together[key], expected), key
    # Sharded, each element is updated as by the hook, to the bit: on two ranks the
    # sum of two halves is the same whichever exchange adds them.
    for i in range(4):
        sharded, hooked = together[f"adam_sharded_eager_{i}"], together[f"adam_eager_{i}"]
        if ranks == 2:
            assert np.array_equal(sharded, hooked), i
        else:
            np.testing.assert_allclose(sharded, hooked, rtol=1e-6, atol=1e-8)
    # The worker itself checked that broadcast_params made differently seeded ranks
    # equal (it exits non-zero otherwise); the runs differ from training alone only
    # through the hook: shards trained apart would not end equal.
    assert not np.array_equal(together["exact_eager_0"], np.arange(-4, 4).reshape(4, 2))


@pytest.mark.parametrize("ranks", [2, 4])
def test_shared_memory_exchanges_end_as_plain_mpi_s(ranks, tmp_path):
    runs = {}
    for switch in ("1", "0"):
        out = tmp_path / f"shared_{switch}.npz"
        run = launch(ranks, "train", str(out), env={"DEZERO_MPI_SHARED_MEMORY": switch})
        assert run.returncode == 0, run.stdout + run.stderr
        runs[switch] = dict(np.load(out))
    shared, plain = runs["1"], runs["0"]
    assert shared["shared_exchanges"] > 0 and plain["shared_exchanges"] == -1
    for key, expected in plain.items():
        if key.startswith("exact"):  # integer-valued sums: the same whatever the order
            assert np.array_equal(shared[key], expected), key
        elif key.startswith("adam"):  # float32 sums of 4 ranks may be added in another order
            if ranks == 2:
                assert np.array_equal(shared[key], expected), key
            np.testing.assert_allclose(shared[key], expected, rtol=1e-6, atol=1e-8,
                                       err_msg=key)


@pytest.mark.parametrize("ranks", [2, 4])
def test_parameters_without_a_gradient_on_some_or_all_ranks(ranks):
    # The worker checks that the ranks end equal and as one process on the whole
    # batch, and that a parameter no rank has a gradient for is never updated.
    run = launch(ranks, "unused")
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_traced_sharded_step_with_fewer_elements_than_ranks(ranks):
    # Ranks with an empty block kept their first recording and replayed it while the
    # others recorded again: each waited for the other in a different exchange, forever.
    run = launch(ranks, "tiny", timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("runner", [("-m", "mpi4py"), ()], ids=["python -m mpi4py",
                                                                  "python"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_a_rank_that_raises_ends_the_whole_job_within_seconds(ranks, runner):
    start = time.perf_counter()
    run = launch(ranks, "fail", runner=runner, timeout=60)
    elapsed = time.perf_counter() - start
    assert run.returncode != 0
    assert f"rank {ranks - 1} fails on purpose" in run.stderr
    assert elapsed < 30, f"the job took {elapsed:.1f} s to end"


def test_ranks_sharing_the_cores_get_their_share_of_threads_unless_told():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max(1, cores // 2)
    run = launch(2, "threads", threads={}, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in (0, 1):
        assert f"rank {rank}: blas [{share}] omp {share}" in run.stdout, run.stdout
    assert run.stderr.count(f"2 ranks share this machine's {cores} cores") == 1, run.stderr
    # A thread count the user chose is left alone, and nothing is said.
    run = launch(2, "threads", threads={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
                 timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rank 1: blas [1] omp 1" in run.stdout and "share this machine" not in run.stderr


def test_ranks_with_different_models_are_refused_by_broadcast_params():
    run = launch(2, "mismatch", timeout=60)
    assert run.returncode != 0
    assert "broadcast_params: rank 1's parameters" in run.stderr
    assert "build the same model on every rank" in run.stderr


def test_ranks_passing_arrays_of_different_sizes_end_the_job_with_an_error():
    # MPI's allreduce says "message truncated"; the shared window gave a wrong sum.
    run = launch(2, "sizes", timeout=60)
    assert run.returncode != 0
    assert "rank 0: allreduce of 3 float64, rank 1: allreduce of 5 float64" in run.stderr


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_traced_evaluation_over_parts_of_different_sizes(ranks):
    # A rank that records a function again while the others replay it makes the same
    # exchanges where the function's only ones are its collective ops.
    run = launch(ranks, "evaluate", timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("mode", ["shapes", "sharded_shapes"])
def test_a_rank_recording_a_traced_step_the_others_replay_ends_the_job(mode):
    # Its exchange of gradient flags met the others' exchange of gradients: the ranks
    # waited for each other forever.
    start = time.perf_counter()
    run = launch(2, mode, timeout=60)
    assert run.returncode != 0
    assert "a traced step with the same shapes on every rank" in run.stderr
    assert time.perf_counter() - start < 30


def test_import_dezero_does_not_import_mpi4py():
    code = "import sys, dezero, dezero.optimizers; print('mpi4py' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert run.stdout.strip() == "False", run.stderr


def test_step71_trains_the_spiral_on_two_ranks(tmp_path):
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py",
                          str(ROOT / "steps" / "step71.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert out.count("a world of 2 rank(s)") == 1  # printed by rank 0 alone
    assert "ranks hold equal parameters: True" in out
    assert "trace train_step(x: f32[15,2], t: i64[15])" in out  # 15 examples per rank
    assert out.count("= allreduce(") == 1
    loss = float(out.split("epoch 300: loss ")[1].split()[0])
    assert loss < 0.2
