"""Rules for the test suite itself."""
import re
from pathlib import Path

import numpy as np
import pytest
from backend_helpers import assert_within_ulps, product_scale

TESTS = Path(__file__).resolve().parent
SKIPPED_DEZERO_IMPORT = re.compile(r"""importorskip\(\s*["']dezero\b""")


def test_no_test_skips_when_a_dezero_module_fails_to_import():
    # importorskip turns a broken import of dezero's own code into a quiet skip;
    # only optional third-party packages (torch, nbformat, ...) may be skipped.
    offenders = [f"{path.relative_to(TESTS)}:{number}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if SKIPPED_DEZERO_IMPORT.search(line)]
    assert offenders == [], f"import dezero modules plainly, not with importorskip: {offenders}"


def test_a_result_that_cancels_is_compared_by_the_ulps_of_its_products():
    a = np.array([[100.0, -100.0, 0.01], [1.0, 2.0, 3.0]], np.float32)
    b = np.ones((3, 1), np.float32)
    want, scale = a @ b, product_scale(a, b)
    assert scale.ravel().tolist() == pytest.approx([200.01, 6.0])
    eps = np.finfo(np.float32).eps
    two_ulps = (want + 2 * eps * scale).astype(np.float32)  # another BLAS's order of adding
    assert_within_ulps(two_ulps, want, scale)
    with pytest.raises(AssertionError):  # 0.5% of the first result, 2 ulp of its products
        np.testing.assert_allclose(two_ulps, want, rtol=1e-4)
    for wrong in ((want + 9 * eps * scale).astype(np.float32), want * np.float32(1.5)):
        with pytest.raises(AssertionError, match=r"of 2 elements differ by more than 8 ulp "
                                                 r"of their scale x\n  first at \(0, 0\): "):
            assert_within_ulps(wrong, want, scale, err_msg="x")


def test_ulps_of_a_scale_take_nan_for_nan_and_an_infinity_for_itself_only():
    nan_inf = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert_within_ulps(nan_inf, nan_inf.copy(), 1.0)
    for got in ([1.0, np.inf, -np.inf, 1.0], [np.nan, -np.inf, -np.inf, 1.0],
                [np.nan, np.inf, -np.inf, np.nan]):
        with pytest.raises(AssertionError, match="1 of 4 elements"):
            assert_within_ulps(np.array(got, np.float32), nan_inf, 1.0)
    with pytest.raises(AssertionError, match="float64 is not .* float32"):
        assert_within_ulps(nan_inf.astype(np.float64), nan_inf, 1.0)
