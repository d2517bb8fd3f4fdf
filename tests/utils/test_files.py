"""Atomic writes: all or nothing, with the permissions the umask gives any new file."""

import os
import stat

import pytest

from ocrr.utils.files import atomic_write, atomic_write_text


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_written_file_honours_the_umask(tmp_path, umask, mode):
    before = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "results.csv", "a,b\n")
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_text() == "a,b\n"


def test_a_failed_write_leaves_nothing(tmp_path):
    def fail(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "x.csv", fail)
    assert list(tmp_path.iterdir()) == []


def test_a_rewrite_replaces_the_old_file_whole(tmp_path):
    atomic_write_text(tmp_path / "x.txt", "old")
    atomic_write_text(tmp_path / "x.txt", "new")
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]
    assert (tmp_path / "x.txt").read_text() == "new"
