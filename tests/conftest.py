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
