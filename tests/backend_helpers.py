"""Comparing a replay with eager code or the interpreter, by the backend under test.

The python backend and the interpreter run the ops' own forwards, so their results
equal eager numpy's bit for bit, and the trace tests assert that. Fused kernels
(DEZERO_BACKEND=cpu) compute tanh, exp ... with the C library's vector math, a few
ulp away from numpy's; these helpers assert equality where no kernel runs and
closeness where one does, and read the python backend's code where a test checks
its text. A fused result compared with a reference is off by ulps of what it was
computed from, not of itself: assert_within_ulps takes that scale (product_scale for
a matmul's), which BLAS and vector math libraries of any CPU meet.
"""
import numpy as np

from dezero.static import backends

FUSED = backends.DEFAULT not in ("python", "interpreter")


def assert_replay_equal(got, want, err_msg=""):
    if FUSED:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=err_msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)


def assert_within_ulps(got, want, scale, ulps=8, err_msg=""):
    """|got - want| <= ulps * eps * scale, elementwise (NaN where both are NaN, equal
    infinities). `scale` (an array broadcasting to want's shape, or a number) is the
    size of what each result was computed from, not of the result: for a matmul the
    sum of |products| (product_scale), for a chain the largest of its terms. Another
    order of adding (BLAS kernels differ between CPUs and versions) or a vector exp a
    few ulp from numpy's moves a result by ulps of that scale, which cancellation can
    make as large as the result: a tolerance relative to the result passes on one
    machine and fails on another."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{got.shape} {got.dtype} is not {want.shape} {want.dtype} {err_msg}"
    bound = ulps * np.finfo(want.dtype).eps * np.broadcast_to(scale, want.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        off = ~same & ~(np.abs(got.astype(np.float64) - want) <= bound)
    if off.any():
        at = tuple(int(i[0]) for i in np.nonzero(off)) if want.ndim else ()
        raise AssertionError(
            f"{int(off.sum())} of {want.size} elements differ by more than {ulps} ulp of "
            f"their scale {err_msg}\n  first at {at}: got {got[at]!r}, want {want[at]!r}, "
            f"difference {abs(float(got[at]) - float(want[at])):.3g}, bound "
            f"{float(bound[at]):.3g}")


def product_scale(a, b):
    """The sum of |products| that each element of a @ b adds: |a| @ |b|, in float64."""
    return np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64))


def python_code(graph) -> str:
    """The python backend's replay code of a graph (graph.code is the default's)."""
    return graph.compile("python").source
