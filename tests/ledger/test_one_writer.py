"""One set of writers per ledger file, whatever name it is reached by.

SQLite keeps a file's write-ahead log beside the name it was opened by, so writers through
two names of one file (a hard link, a bind mount, a file moved while open) would each append
at the same ids and the ledger would fork. The writers' rule is keyed on the file itself:
a second name is refused while a writer holds the file, a hard-linked file is refused,
symlinks are followed; writers through one name (the workers of one service) share it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 4

# Opens the ledger at argv[1], says so, appends one entry whenever a line arrives, and
# closes at end of input.
_CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ocrr.ledger.sqlite.store import DurableLedger
    with DurableLedger.open(sys.argv[1], dim=4) as led:
        print("open", len(led), flush=True)
        for line in sys.stdin:
            print("appended", led.append(np.full(4, 0.5, np.float32), "child"), flush=True)  # a unit row
    """
)


class Writer:
    """A writer of the ledger ``path`` in another process."""

    def __init__(self, path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().startswith("open"), "the child could not open the ledger"

    def append(self) -> int:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def _made(path, n: int = 3):
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(np.full((n, DIM), DIM**-0.5, np.float32), ["seed"] * n)  # a durable ledger takes unit rows only
    return path


def test_a_file_with_two_hard_links_is_refused_naming_the_fix(tmp_path):
    path = _made(tmp_path / "l.db")
    os.link(path, tmp_path / "other.db")
    for name in (path, tmp_path / "other.db"):
        with pytest.raises(OcrrError, match=r"has 2 names \(hard links\).*remove the other names"):
            DurableLedger.open(name)
    os.unlink(tmp_path / "other.db")
    with DurableLedger.open(path) as led:  # one name again: served
        assert len(led) == 3


def test_a_writer_through_another_name_in_another_process_is_refused(tmp_path):
    """The file moved to another folder while a writer holds it (one link, a new name)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old, new = _made(tmp_path / "a" / "l.db"), tmp_path / "b" / "l.db"
    child = Writer(old)
    try:
        assert child.append() == 3
        os.link(old, new)
        os.unlink(old)  # the file now has one name, in another folder than its writer's log
        with pytest.raises(OcrrError, match="is open for writing through another name"):
            DurableLedger.open(new)
        assert child.append() == 4  # the writer that holds it goes on
    finally:
        child.close()
    with DurableLedger.open(new):  # its writer gone: the new name is the file's only one now
        pass


def test_a_writer_through_a_bind_mount_of_the_file_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    real, mounted = _made(tmp_path / "a" / "l.db"), tmp_path / "b" / "l.db"
    mounted.touch()
    if subprocess.run(["mount", "--bind", str(real), str(mounted)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts need privileges this test does not have")
    try:
        assert os.stat(real).st_ino == os.stat(mounted).st_ino and os.stat(mounted).st_nlink == 1
        child = Writer(real)
        try:
            with pytest.raises(OcrrError, match="is open for writing through another name"):
                DurableLedger.open(mounted)
        finally:
            child.close()
        child = Writer(mounted)  # and the other way round
        try:
            with pytest.raises(OcrrError, match="is open for writing through another name"):
                DurableLedger.open(real)
        finally:
            child.close()
    finally:
        subprocess.run(["umount", "--lazy", str(mounted)], check=True)


def test_two_names_in_one_process_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old, new = _made(tmp_path / "a" / "l.db"), tmp_path / "b" / "l.db"
    with DurableLedger.open(old) as led:
        os.link(old, new)
        os.unlink(old)
        with pytest.raises(OcrrError, match="is open for writing through another name"):
            DurableLedger.open(new)
        led.append(np.full(DIM, DIM**-0.5, np.float32), "still")
    with DurableLedger.open(new):
        pass


def test_a_symlink_is_followed_to_the_one_name_of_the_file(tmp_path):
    (tmp_path / "real").mkdir()
    path = _made(tmp_path / "real" / "l.db")
    link = tmp_path / "link.db"
    link.symlink_to(path)
    child = Writer(path)
    try:
        with DurableLedger.open(link) as led:  # the same name underneath: shared with the child
            assert led.path == path
            assert child.append() == 3
            led.refresh()
            assert led.append(np.full(DIM, DIM**-0.5, np.float32), "here") == 4
            assert child.append() == 5
        assert not (tmp_path / "link.db-writer").exists() and (tmp_path / "real" / "l.db-writer").exists()
    finally:
        child.close()


def test_writers_through_one_name_share_the_file(tmp_path):
    path = _made(tmp_path / "l.db")
    child = Writer(path)
    try:
        with DurableLedger.open(path) as led:
            assert child.append() == 3
            led.refresh()
            assert led.append(np.full(DIM, DIM**-0.5, np.float32), "here") == 4
            assert child.append() == 5
    finally:
        child.close()
