"""The public names of the real cupy this double stands in for, and the refusal of others.

cupy-14.2.0-names.txt (beside this package) lists `module.name` for cupy's modules and
classes that dezero touches, as dir() of cupy-cuda12x 14.2.0 shows them, written by
tests/fakecupy/write_names.py on a machine with that wheel (no GPU needed).

A name the double does not define is looked up here: one real cupy lacks is an
AttributeError as on cupy; one it has but the double does not provide is an
AttributeError that says so, so that a call the double cannot run never passes.
"""
from pathlib import Path

VERSION = "14.2.0"
_FILE = Path(__file__).resolve().parents[1] / f"cupy-{VERSION}-names.txt"


def _read() -> dict:
    names: dict = {}
    for line in _FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            owner, _, name = line.rpartition(".")
            names.setdefault(owner, set()).add(name)
    return names


NAMES = _read()


def has(owner: str, name: str) -> bool:
    """True if real cupy's `owner` (a module or class, as "cupy.cuda") has `name`."""
    return name in NAMES.get(owner, ())


def missing(owner: str, name: str) -> AttributeError:
    """The error for a name the double does not define."""
    if has(owner, name):
        return AttributeError(f"{owner}.{name} exists in cupy {VERSION} but the cupy test "
                              f"double (tests/fakecupy) does not provide it; add it there")
    return AttributeError(f"{owner!r} has no attribute {name!r} (cupy {VERSION} has no such "
                          f"name)")
