"""Shared pytest set-up: the `slow` marker, the `torch` fixture.

Whole-program tests (steps, notebooks, the docs build, the demo and other
subprocess runs) and comparisons with PyTorch are marked slow. `python -m pytest
-q` runs everything; `python -m pytest -q -m "not slow"` is the quick inner loop.
"""
import gc
import os

import pytest

# The replay backend of the suite: the python backend's results are bit-exact
# with eager numpy, which many trace tests assert; `DEZERO_BACKEND=cpu pytest`
# runs them all with fused kernels (a few-ulp difference fails those asserts).
os.environ.setdefault("DEZERO_BACKEND", "python")
# Whether a kernel runs compiled, and on how many threads, is measured on the CPU
# (backends/measure.py): on arrays of a few elements, where both ways take
# microseconds, a loaded machine decides either way, and a test that says which
# kernels run would pass or fail by chance. So every kernel the fusion pass forms
# runs compiled, on one thread (DEZERO_KERNELS=always); the tests marked
# `measures` time them for real.
os.environ.setdefault("DEZERO_KERNELS", "always")

# Modules whose every test runs a program end to end, or an external compiler
# (g++ on every op's kernel, NVRTC on every CUDA kernel).
SLOW_MODULES = {"test_steps", "test_notebooks", "test_docs", "test_demo",
                "test_backend_cpu_ops", "test_gpu_compile"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        # Comparisons with PyTorch are slow too: importing it takes 2-3 s.
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES or \
                "torch" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def torch():
    """PyTorch, the reference of the comparisons that ask for it (installed by the
    `reference` extra); their tests are skipped without it."""
    return pytest.importorskip("torch")


def pytest_collection_finish(session):
    # What the imports and collection made (numpy, the test modules) lives to the
    # end: moved out of the collector's generations, it is not traversed again by
    # each full collection (pytest's five at the end, trace mode's escape check,
    # the tests that collect), which took over a second of the quick loop.
    gc.collect()
    gc.freeze()


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


@pytest.fixture(autouse=True, scope="session")
def notebook_cache(tmp_path_factory):
    """Executed notebooks, kept for this run only: the docs build executes each
    notebook once, and tests/test_notebooks.py reads the same copies."""
    if "DEZERO_NOTEBOOK_CACHE" in os.environ:  # the caller chose one
        yield os.environ["DEZERO_NOTEBOOK_CACHE"]
        return
    folder = tmp_path_factory.mktemp("notebooks")
    os.environ["DEZERO_NOTEBOOK_CACHE"] = str(folder)
    yield str(folder)
    del os.environ["DEZERO_NOTEBOOK_CACHE"]


@pytest.fixture(autouse=True)
def kernels_measured_where_asked(request, monkeypatch):
    """The tests marked `measures` time kernels against numpy calls for real
    (DEZERO_KERNELS=measure); the others run every kernel compiled (see above)."""
    if request.node.get_closest_marker("measures"):
        monkeypatch.setenv("DEZERO_KERNELS", "measure")
