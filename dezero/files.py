"""Writing files without ever leaving half of one: atomic_file, save_npz.

Every file dezero writes (weights, rendered graphs, saved static graphs, dataset
caches, downloads) goes through here: the bytes land in a temporary file beside
the target, which is renamed onto it only when complete.

    with atomic_file("model.npz") as f: np.savez(f, **arrays)
"""
import contextlib
import os
import stat
import tempfile

import numpy as np


@contextlib.contextmanager
def atomic_file(path, mode="wb"):
    """A file object for `path`: written beside it under a temporary name and
    renamed onto it when the block ends; on any error the temporary file is
    removed and an existing `path` is left as it was.

    A symlink stays a link: the file it points to is the one replaced. An
    existing file keeps its permission bits; a new one gets open()'s default.
    """
    # realpath follows every link in the chain (a dangling one names the file
    # to create), so the rename lands on the target, not on the link.
    path = os.path.realpath(os.fspath(path))
    directory, name = os.path.split(path)
    try:
        file_mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        file_mode = _default_file_mode()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".part")
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
        os.chmod(tmp, file_mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def save_npz(path, arrays, caller, compress=True):
    """Write `arrays` to the npz file `path` through atomic_file and return the path
    written; as np.savez, ".npz" is appended to a path without it. `caller` names
    the call in the error for a missing directory."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{caller}({path!r}): the directory {directory!r} does "
                                f"not exist; create it first")
    with atomic_file(path) as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    return path


def _default_file_mode():
    # mkstemp makes files readable by the owner only; give the file the mode an
    # ordinary open() would (0o666 less the umask).
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
