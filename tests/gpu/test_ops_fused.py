"""Every row of the op table, traced on the GPU and replayed fused, against eager numpy.

Forward and backward of each op are recorded on cupy arrays; the replays (fresh
inputs each call) run the graph's fused groups as cupy ElementwiseKernels and must
give what eager numpy gives. Under the cupy test double the kernels are compiled for
the host (README.md here says what that cannot see).

    python -m pytest -q tests/gpu/test_ops_fused.py
"""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
import dezero  # noqa: E402
from dezero import Variable  # noqa: E402

if not dezero.cuda.gpu_enable:
    pytest.skip(dezero.cuda.no_gpu_reason, allow_module_level=True)

sys.path.insert(0, str(Path(__file__).parents[1]))  # the op table lives in tests/
from op_table import ROWS  # noqa: E402

# Relative and absolute: CUDA's math functions and its contraction of a * b + c
# into an fma round differently from numpy's.
TOLERANCE = {np.float32: 2e-5, np.float64: 1e-10}


def _forward_backward(fn):
    def run(*xs):
        y = fn(*xs)
        y.backward()
        return (y, *[x.grad for x in xs])
    return run


def _arrays(result):
    return [None if v is None else cp.asnumpy(v.data) if isinstance(v.data, cp.ndarray)
            else v.data for v in result]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_op_replays_fused_on_the_gpu_as_eager_numpy(row, dtype):
    traced = dezero.trace(_forward_backward(row.fn))
    with warnings.catch_warnings():  # some rows' gradients are constants
        warnings.simplefilter("ignore")
        for seed in range(3):  # records, then replays twice
            arrays = row.inputs(dtype, seed=seed)
            got = traced(*[Variable(cp.asarray(a)) for a in arrays])
            want = _forward_backward(row.fn)(*[Variable(a) for a in arrays])
            for g, w in zip(_arrays(got), _arrays(want)):
                if w is None:
                    assert g is None
                    continue
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    assert traced.graph.device == "gpu"
    if traced.graph.groups:  # elementwise ops: the default plan runs cupy kernels
        assert "kernel k0" in traced.graph.compile().source
