"""Comparing a replay with eager code or the interpreter, by the backend under test.

The python backend and the interpreter run the ops' own forwards, so their results
equal eager numpy's bit for bit, and the trace tests assert that. Fused kernels
(DEZERO_BACKEND=cpu) compute tanh, exp ... with the C library's vector math, a few
ulp away from numpy's; these helpers assert equality where no kernel runs and
closeness where one does, and read the python backend's code where a test checks
its text.
"""
import numpy as np

from dezero.static import backends

FUSED = backends.DEFAULT not in ("python", "interpreter")


def assert_replay_equal(got, want, err_msg=""):
    if FUSED:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=err_msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)


def python_code(graph) -> str:
    """The python backend's replay code of a graph (graph.code is the default's)."""
    return graph.compile("python").source
