"""The cupy test double's list of names against the real cupy installed here.

tests/fakecupy answers only to names its list holds (tests/gpu runs under it); the
list must be what the pinned cupy really has, so a call real cupy lacks cannot pass.
"""
import importlib.util
from pathlib import Path

import pytest

DOUBLE = Path(__file__).parent / "fakecupy"


def test_the_doubles_names_are_those_of_the_pinned_cupy():
    cupy = pytest.importorskip("cupy")
    import cupyx
    if Path(cupy.__file__).parents[1] == DOUBLE:
        pytest.skip("this process runs under the double")
    listed = DOUBLE / f"cupy-{cupy.__version__}-names.txt"
    if not listed.exists():
        pytest.skip(f"the double follows another cupy than {cupy.__version__}")
    spec = importlib.util.spec_from_file_location("write_names", DOUBLE / "write_names.py")
    write_names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(write_names)
    lines = [line for line in listed.read_text().splitlines() if not line.startswith("#")]
    assert lines == write_names.listing(cupy, cupyx)
