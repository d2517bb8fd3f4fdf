"""``move_into_new``: one step, never over an existing file, never two names at once."""

from __future__ import annotations

import os

import pytest

from ocrr.utils.files import move_into_new


def test_moves_a_file_to_a_new_name_leaving_one_link(tmp_path):
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_text("ledger")
    move_into_new(src, dst)
    assert not src.exists() and dst.read_text() == "ledger" and os.stat(dst).st_nlink == 1


def test_refuses_to_replace_an_existing_file(tmp_path):
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_text("new")
    dst.write_text("old")
    with pytest.raises(FileExistsError):
        move_into_new(src, dst)
    assert dst.read_text() == "old" and src.read_text() == "new"
