"""Shared pytest set-up: the `slow` marker.

Whole-program tests (steps, notebooks, the docs build, the demo and other
subprocess runs) are marked slow. `python -m pytest -q` runs everything;
`python -m pytest -q -m "not slow"` is the quick inner loop.
"""
import pytest

# Modules whose every test runs a program end to end.
SLOW_MODULES = {"test_steps", "test_notebooks", "test_docs", "test_demo"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="session")
def kernel_cache(request, tmp_path_factory):
    """One compiled-kernel cache for the whole test run, kept between runs in
    pytest's cache folder (a test that checks caching itself uses its own)."""
    import os
    if "DEZERO_CACHE_DIR" in os.environ:  # the caller chose one
        yield os.environ["DEZERO_CACHE_DIR"]
        return
    folder = request.config.cache.mkdir("dezero_kernels") if request.config.cache \
        else tmp_path_factory.mktemp("dezero_kernels")
    os.environ["DEZERO_CACHE_DIR"] = str(folder)
    yield str(folder)
    del os.environ["DEZERO_CACHE_DIR"]
