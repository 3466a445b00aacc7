"""dezero.distributed with cupy arrays: exchanges through NCCL (cupy.cuda.nccl), or
through the host where NCCL is missing; a training run on two ranks, one GPU each,
ends as one process on the whole batch. Runs on GPUs or under the cupy test double,
whose NCCL is a stand-in over MPI (tests/fakecupy/cupy/cuda/nccl.py)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
pytest.importorskip("mpi4py")
from train_helpers import training_step  # noqa: E402

import dezero  # noqa: E402
import dezero.distributed as dist  # noqa: E402
from dezero import optimizers  # noqa: E402
from dezero.models import MLP  # noqa: E402

if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def comm():
    comm = dist.init()
    comm._nccl = None  # each test makes its own NCCL communicator (or finds none)
    yield comm
    comm._nccl = None


def test_exchanges_of_cupy_arrays_go_through_nccl(comm):
    x = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    y = comm.allreduce(x, op="mean")
    assert isinstance(y, cp.ndarray) and y.shape == (2, 3)
    np.testing.assert_array_equal(cp.asnumpy(y), cp.asnumpy(x))
    assert type(comm._nccl).__name__ == "NcclCommunicator"
    b = comm.broadcast(cp.ones(4, dtype=cp.int64))
    assert isinstance(b, cp.ndarray) and b.dtype == cp.int64
    assert comm.use_gpu() == 0


def test_cupy_arrays_of_any_dtype_exchange_as_numpy_arrays_do(comm):
    # NCCL reduces (u)int8/32/64 and floats, a complex sum is one of its real and
    # imaginary parts, and a broadcast moves bytes: the dtypes numpy arrays take.
    for dtype in (np.int8, np.uint32, np.uint64, np.float16, np.complex64):
        x = np.arange(1, 4).astype(dtype)
        y = comm.allreduce(cp.asarray(x))
        assert isinstance(y, cp.ndarray) and y.dtype == dtype
        np.testing.assert_array_equal(cp.asnumpy(y), comm.allreduce(x))
    z = np.array([1 + 2j, -3j])
    np.testing.assert_array_equal(cp.asnumpy(comm.allreduce(cp.asarray(z), op="mean")), z)
    for x in (np.array([True, False]), np.array([1 + 2j]), np.arange(3, dtype=np.int16)):
        np.testing.assert_array_equal(cp.asnumpy(comm.broadcast(cp.asarray(x))), x)
    assert type(comm._nccl).__name__ == "NcclCommunicator"  # not through the host


def test_without_nccl_cupy_arrays_are_exchanged_through_the_host(comm, monkeypatch):
    from cupy.cuda import nccl
    monkeypatch.setattr(nccl, "available", False)
    x = cp.asarray(np.array([1.5, -2.0]))
    with pytest.warns(UserWarning, match="NCCL is missing"):
        y = comm.allreduce(x)
    assert isinstance(y, cp.ndarray) and comm._nccl is False
    np.testing.assert_array_equal(cp.asnumpy(y), [1.5, -2.0])


def test_a_traced_gpu_step_with_the_hook_equals_eager(comm):
    x, t = dezero.datasets.get_spiral(train=True)
    x, t = cp.asarray(x[:30]), cp.asarray(t[:30])
    runs = []
    for traced in (False, True):
        np.random.seed(0)
        model = MLP((10, 3))
        model(cp.asnumpy(x[:1]))
        model.to_gpu()
        comm.broadcast_params(model)
        optimizer = optimizers.Adam(alpha=0.01).setup(model)
        optimizer.add_hook(dist.AllreduceGrads(comm))
        step = training_step(model, optimizer, traced)
        for _ in range(3):
            step(x, t)
        runs.append([cp.asnumpy(p.data) for p in model.params()])
    ops = [n.op for n in step.graph.nodes if n.kind == "op"]
    assert ops.count("allreduce") == 1
    for a, b in zip(*runs):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("nccl", ["1", "0"], ids=["nccl", "through the host"])
def test_two_ranks_on_two_gpus_end_as_one_process(tmp_path, nccl):
    # Without NCCL the ranks copy the buffers to the host, where (on one machine) the
    # window they share exchanges them: an all-gather in place raised AttributeError.
    mpiexec = Path(sys.executable).with_name("mpiexec")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "DEZERO_WORKER_GPU": "1", "FAKECUPY_DEVICES": "2", "DEZERO_WORKER_NCCL": nccl}
    worker = str(ROOT / "tests" / "distributed_worker.py")
    alone = subprocess.run([sys.executable, worker, "train", str(tmp_path / "one.npz")],
                           env=env, capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr
    together = subprocess.run(
        [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", "2", sys.executable, "-m",
         "mpi4py", worker, "train", str(tmp_path / "two.npz")],
        env=env, capture_output=True, text=True, timeout=300)
    assert together.returncode == 0, together.stdout + together.stderr
    # said once for the job (by rank 0), not once per rank
    assert together.stderr.count("NCCL is missing") == int(nccl == "0"), together.stderr
    one, two = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert bool(two["nccl"]) == (nccl == "1") and two["traced_nodes"].tolist() == [1, 0, 0]
    assert two["sharded_traced_nodes"].tolist() == [0, 1, 1]
    for key in one.files:
        if key.startswith("adam"):
            np.testing.assert_allclose(two[key], one[key], rtol=1e-5, atol=1e-7, err_msg=key)
        elif key.startswith("exact"):
            assert np.array_equal(two[key], one[key]), key
