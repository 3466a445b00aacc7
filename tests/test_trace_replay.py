"""The replay backends: memory, aliasing of what a replay returns, the backend
registry, and the reference interpreter against the replay code and eager."""
import tracemalloc

import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable

# =============================================================================
# Memory: each intermediate is freed after its last use
# =============================================================================


def chain(x):
    y = x
    for _ in range(6):
        y = F.tanh(y * 0.5)
    return y


def peak_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_replay_frees_each_intermediate_after_its_last_use():
    x = Variable(np.random.default_rng(0).standard_normal(10 ** 6).astype(np.float32))
    traced = dezero.trace(chain)
    traced(x)
    for _ in range(3):  # 12 ops: holding every intermediate would peak at 12 arrays
        np.testing.assert_array_equal(traced(x).data, chain(x).data)
        assert peak_bytes(lambda: traced(x)) < 3.5 * x.data.nbytes
    assert "del " in traced.graph.code
