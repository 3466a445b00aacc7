"""Writes cupy-<version>-names.txt from the real cupy installed here (no GPU needed).

The double answers only to names this file lists (cupy/_names.py). Run it with the
cupy wheel the double follows installed, then set VERSION in cupy/_names.py:

    python tests/fakecupy/write_names.py
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The modules and classes whose names are listed; ndarray's special methods too,
# since Python looks those up on the type (no __index__ on cupy's ndarray, say).
OWNERS = ["cupy", "cupy.cuda", "cupy.cuda.runtime", "cupy.random", "cupy.linalg", "cupyx",
          "cupy.ndarray", "cupy.cuda.Device", "cupy.cuda.Stream", "cupy.cuda.Event",
          "cupy.cuda.MemoryPool", "cupy.cuda.PinnedMemoryPool", "cupy.cuda.MemoryPointer",
          "cupy.ElementwiseKernel", "cupy.ReductionKernel"]


def listing(cupy, cupyx) -> list:
    """`owner.name` of every public name of OWNERS in the given cupy."""
    lines = []
    for owner in OWNERS:
        obj = cupyx if owner == "cupyx" else cupy
        for part in owner.split(".")[1:]:
            obj = getattr(obj, part)
        for name in sorted(dir(obj)):
            special = owner == "cupy.ndarray" and name.startswith("__") and \
                name != "__pyx_vtable__"
            if special or not name.startswith("_"):
                lines.append(f"{owner}.{name}")
    return lines


def main():
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # not the double
    import cupy
    import cupyx
    path = HERE / f"cupy-{cupy.__version__}-names.txt"
    path.write_text(f"# Public names of cupy {cupy.__version__} (dir() of each module or "
                    f"class below, ndarray's\n# special methods included), written by "
                    f"write_names.py.\n" + "\n".join(listing(cupy, cupyx)) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
