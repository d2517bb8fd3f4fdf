"""One ``ocrr serve`` per ledger file, whatever name it is reached by: a second service on the
same file through another name (a bind mount, the file moved) is refused with the fix, and a
file with two hard links is refused before anything is served."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")

from ocrr.errors import OcrrError  # noqa: E402
from ocrr.ledger.sqlite.store import DurableLedger  # noqa: E402
from ocrr.service.supervisor import claim  # noqa: E402

_HOLDER = textwrap.dedent(
    """
    import sys
    from ocrr.service.supervisor import claim
    with claim(sys.argv[1], "127.0.0.1", 0):
        print("claimed", flush=True)
        sys.stdin.read()
    """
)


def _ledger(path):
    path.parent.mkdir(exist_ok=True)
    with DurableLedger.open(path, dim=4) as led:
        led.extend(np.full((2, 4), 0.5, np.float32), ["a", "b"])  # unit rows: a durable ledger takes no other
    return path


def test_a_second_service_through_another_name_is_refused(tmp_path):
    old, new = _ledger(tmp_path / "a" / "l.db"), tmp_path / "b" / "l.db"
    new.parent.mkdir()
    with claim(old, "127.0.0.1", 0):
        os.link(old, new)
        os.unlink(old)  # moved to another folder while served: one link, another name
        with pytest.raises(OcrrError, match="already served by another `ocrr serve` through another name"):
            claim(new, "127.0.0.1", 0)
    with claim(new, "127.0.0.1", 0):  # let go: served through its new name
        pass


def test_a_second_service_through_a_bind_mount_in_another_process_is_refused(tmp_path):
    real, mounted = _ledger(tmp_path / "a" / "l.db"), tmp_path / "b" / "l.db"
    mounted.parent.mkdir()
    mounted.touch()
    if subprocess.run(["mount", "--bind", str(real), str(mounted)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts need privileges this test does not have")
    try:
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(real)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline().strip() == "claimed"
            with pytest.raises(OcrrError, match="already served by another `ocrr serve` through another name"):
                claim(mounted, "127.0.0.1", 0)
        finally:
            holder.stdin.close()
            assert holder.wait(timeout=30) == 0
        with claim(mounted, "127.0.0.1", 0):  # its service gone: this name may serve it
            pass
    finally:
        subprocess.run(["umount", "--lazy", str(mounted)], check=True)


def test_a_ledger_with_two_hard_links_is_refused_before_it_is_served(tmp_path):
    path = _ledger(tmp_path / "l.db")
    os.link(path, tmp_path / "again.db")
    with pytest.raises(OcrrError, match=r"has 2 names \(hard links\)"):
        claim(path, "127.0.0.1", 0)
    assert sorted(os.listdir(tmp_path)) == ["again.db", "l.db", "l.db-writer"]  # no lock file left
