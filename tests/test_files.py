"""atomic_file: every file dezero writes is complete or absent, never half written."""
import os
import stat

import pytest

from dezero.files import atomic_file


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "weights.npz"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_file(path) as f:
            f.write(b"new, but only ha")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["weights.npz"]


def test_a_complete_write_replaces_the_file_with_an_ordinary_mode(tmp_path):
    path = tmp_path / "graph.json"
    path.write_text("old")
    with atomic_file(path, "w") as f:
        f.write("{}\n")
    assert path.read_text() == "{}\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["graph.json"]
