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


def test_writing_through_a_symlink_keeps_the_link_and_replaces_its_target(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "weights.npz"
    target.write_bytes(b"old")
    link = tmp_path / "latest.npz"
    link.symlink_to(os.path.join("runs", "weights.npz"))   # a relative link
    chain = tmp_path / "best.npz"
    chain.symlink_to(link)                                  # a link to a link
    with atomic_file(chain) as f:
        f.write(b"new")
    assert chain.is_symlink() and link.is_symlink()
    assert os.readlink(chain) == str(link)
    assert target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path / "runs")) == ["weights.npz"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "real.json")
    with atomic_file(link, "w") as f:
        f.write("{}")
    assert link.is_symlink() and (tmp_path / "real.json").read_text() == "{}"


@pytest.mark.parametrize("bits", [0o600, 0o640, 0o755])
def test_an_existing_file_keeps_its_permission_bits(tmp_path, bits):
    path = tmp_path / "weights.npz"
    path.write_bytes(b"old")
    path.chmod(bits)
    with atomic_file(path) as f:
        f.write(b"new")
    assert stat.S_IMODE(path.stat().st_mode) == bits
    link = tmp_path / "link.npz"
    link.symlink_to(path)
    with atomic_file(link) as f:
        f.write(b"newer")
    assert stat.S_IMODE(path.stat().st_mode) == bits and path.read_bytes() == b"newer"
