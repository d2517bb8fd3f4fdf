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


def test_write_at_writes_every_byte_when_the_system_writes_part_of_them(tmp_path, monkeypatch):
    import os

    from ocrr.utils import files

    pwrite = os.pwrite
    calls: list[int] = []

    def short(fd, data, offset):  # as a kernel may: at most 5 bytes a call
        calls.append(offset)
        return pwrite(fd, bytes(data[:5]), offset)

    monkeypatch.setattr(files.os, "pwrite", short)
    path = tmp_path / "f"
    path.write_bytes(b"-" * 40)
    fd = os.open(path, os.O_RDWR)
    try:
        files.write_at(fd, b"0123456789abcdefghij", 7)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"-" * 7 + b"0123456789abcdefghij" + b"-" * 13
    assert calls == [7, 12, 17, 22]


def test_read_into_fills_the_array_a_piece_at_a_time_and_says_when_the_file_ends(tmp_path, monkeypatch):
    import os

    import numpy as np

    from ocrr.utils import files

    monkeypatch.setattr(files, "READ_PIECE", 12)  # several calls for one array
    rows = np.arange(40, dtype="<f4").reshape(10, 4)
    path = tmp_path / "rows.f32"
    path.write_bytes(rows.tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        out = np.empty((3, 4), "<f4")
        files.read_into(fd, out, 5 * 16)
        assert np.array_equal(out, rows[5:8])
        with pytest.raises(OSError, match="the file ended after 48 of 64 bytes"):
            files.read_into(fd, np.empty((4, 4), "<f4"), 7 * 16)
    finally:
        os.close(fd)
