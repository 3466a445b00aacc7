"""Shared pytest set-up: the `slow` marker.

Whole-program tests (steps, notebooks, the docs build, the demo and other
subprocess runs) are marked slow. `python -m pytest -q` runs everything;
`python -m pytest -q -m "not slow"` is the quick inner loop.
"""
import os

import pytest

# The replay backend of the suite: the python backend's results are bit-exact
# with eager numpy, which many trace tests assert; `DEZERO_BACKEND=cpu pytest`
# runs them all with fused kernels (a few-ulp difference fails those asserts).
os.environ.setdefault("DEZERO_BACKEND", "python")

# Modules whose every test runs a program end to end, or an external compiler
# (g++ on every op's kernel, NVRTC on every CUDA kernel).
SLOW_MODULES = {"test_steps", "test_notebooks", "test_docs", "test_demo",
                "test_backend_cpu_ops", "test_gpu_compile"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="session")
def kernel_cache(request, tmp_path_factory):
    """One compiled-kernel cache for the whole test run, kept between runs in
    pytest's cache folder (a test that checks caching itself uses its own)."""
    if "DEZERO_CACHE_DIR" in os.environ:  # the caller chose one
        yield os.environ["DEZERO_CACHE_DIR"]
        return
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = cache.mkdir("dezero_kernels") if cache else tmp_path_factory.mktemp("kernels")
    os.environ["DEZERO_CACHE_DIR"] = str(folder)
    yield str(folder)
    del os.environ["DEZERO_CACHE_DIR"]
