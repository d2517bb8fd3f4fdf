"""``ocrr ledger import`` is atomic and checkable.

Killed at any moment, an import leaves the target either absent or complete and verified
(and the next import succeeds); a refused import leaves nothing; an export can be checked
against a head the caller holds (``--expect-size/--expect-root``) or a signed checkpoint,
so a forged export whose chain was recomputed is refused.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, TreeHead
from ocrr.ledger.location import export_jsonl, import_jsonl
from ocrr.ledger.sqlite.scan import scan_file
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 8


def _make(path, n: int, forge_at: int | None = None, dim: int = DIM) -> tuple[int, bytes]:
    rng = np.random.default_rng(7)
    labels = [f"label-{i % 5}" for i in range(n)]
    if forge_at is not None:
        labels[forge_at] = "forged"
    with DurableLedger.open(path, dim=dim) as led:
        vecs = rng.normal(size=(n, dim)).astype(np.float32)
        led.extend(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), labels, [f"text {i}" for i in range(n)])
        return len(led), led.root()


@pytest.fixture
def exports(tmp_path):
    """A genuine export, and a forged one: entry 3's label changed, the chain and tree recomputed."""
    src = tmp_path / "src"
    src.mkdir()
    size, root = _make(src / "real.db", 12)
    _make(src / "forged.db", 12, forge_at=3)
    export_jsonl(src / "real.db", tmp_path / "real.jsonl")
    export_jsonl(src / "forged.db", tmp_path / "forged.jsonl")
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path / "real.jsonl", tmp_path / "forged.jsonl", out, size, root


def _left(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_refused_import_leaves_nothing(exports):
    real, _, out, size, root = exports
    lines = real.read_text().splitlines()
    entry = json.loads(lines[4])
    entry["label"] = "edited"  # chain not recomputed: the entry's hash no longer matches
    lines[4] = json.dumps(entry)
    edited = real.with_name("edited.jsonl")
    edited.write_text("\n".join(lines) + "\n")
    with pytest.raises(OcrrError, match="entry 3 does not hash"):
        import_jsonl(edited, out / "a.db")
    with pytest.raises(OcrrError, match="holds 12 entries but the expected head"):
        import_jsonl(real, out / "a.db", expect_size=size + 1)
    truncated = real.with_name("cut.jsonl")
    truncated.write_text("\n".join(real.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(OcrrError, match="header records"):
        import_jsonl(truncated, out / "a.db")
    assert _left(out) == []  # no file, no -wal/-shm/-writer, no temporary folder


def test_a_forged_export_is_refused_against_the_held_head(exports, capsys):
    real, forged, out, size, root = exports
    for expect in (root.hex(), base64.b64encode(root).decode()):
        with pytest.raises(OcrrError, match="root of its 12 entries is .* but the expected head"):
            import_jsonl(forged, out / "f.db", expect_size=size, expect_root=expect)
    assert _left(out) == []
    assert main(["ledger", "import", str(forged), str(out / "f.db"), "--expect-root", root.hex()]) == 2
    assert "forged" in capsys.readouterr().err and _left(out) == []
    # The genuine export is accepted, by the API and the command.
    import_jsonl(real, out / "a.db", expect_size=size, expect_root=root).close()
    assert (
        main(["ledger", "import", str(real), str(out / "b.db"), "--expect-size", "12", "--expect-root", root.hex()])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["size"] == 12
    for name in ("a.db", "b.db"):
        report, _ = scan_file(out / name)
        assert report and report.size == size and report.root == base64.b64encode(root).decode()


def test_a_forged_export_is_refused_against_a_signed_checkpoint(exports, tmp_path, capsys):
    real, forged, out, size, root = exports
    signer = Signer.generate("example.com/ledger")
    note = signer.checkpoint(size, root)
    with pytest.raises(OcrrError, match="checkpoint signed by example.com/ledger"):
        import_jsonl(forged, out / "f.db", checkpoint=note, verifier_key=signer.vkey)
    other = Signer.generate("example.com/ledger")  # the right name, another key: the note does not verify
    with pytest.raises(OcrrError):
        import_jsonl(real, out / "f.db", checkpoint=note, verifier_key=other.vkey)
    with pytest.raises(OcrrError, match="go together"):
        import_jsonl(real, out / "f.db", checkpoint=note)
    assert _left(out) == []
    # The command reads the note, or the JSON of a signed head (/head), and the key or a file holding it.
    cp, head, vk = tmp_path / "cp.txt", tmp_path / "head.json", tmp_path / "vkey"
    cp.write_text(note)
    head.write_text(json.dumps(signer.sign_head(TreeHead.now(size, root, b"\0" * 32))))
    vk.write_text(signer.vkey + "\n")
    args = ["--checkpoint", str(cp), "--verifier-key", signer.vkey]
    assert main(["ledger", "import", str(forged), str(out / "f.db"), *args]) == 2
    assert "differ" in capsys.readouterr().err and _left(out) == []
    assert main(["ledger", "import", str(real), str(out / "a.db"), *args]) == 0
    assert json.loads(capsys.readouterr().out)["size"] == 12
    assert (
        main(["ledger", "import", str(real), str(out / "b.db"), "--checkpoint", str(head), "--verifier-key", str(vk)])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["size"] == 12
    assert {"a.db", "b.db"} <= set(_left(out)) and not [n for n in _left(out) if "import" in n]


def test_the_next_import_removes_a_killed_imports_folder_and_spares_a_running_one(exports):
    real, _, out, size, _ = exports
    stale = out / ".a.db.import-dead"
    stale.mkdir()
    (stale / "ledger.db").write_bytes(b"partial")
    (stale / "ledger.db-wal").write_bytes(b"partial")
    running = out / ".a.db.import-live"
    running.mkdir()
    fd = os.open(running, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        import_jsonl(real, out / "a.db").close()
        assert not stale.exists() and running.exists()
    finally:
        os.close(fd)
    with DurableLedger.open(out / "a.db", verify="full") as led:
        assert len(led) == size


def test_stale_sqlite_journals_at_the_target_are_refused_not_replayed(exports):
    real, _, out, _, _ = exports
    (out / "a.db-wal").write_bytes(b"old")
    with pytest.raises(OcrrError, match="a.db-wal is left from a ledger"):
        import_jsonl(real, out / "a.db")
    assert _left(out) == ["a.db-wal"]


def test_the_placed_file_is_already_in_wal_mode(exports, monkeypatch):
    """Opening the placed file changes nothing in its header: were its journal mode switched
    there, a kill during the switch would leave a hot rollback journal beside a complete
    ledger, and read-only checks could not read it."""
    from ocrr.ledger.sqlite import transfer

    real, _, out, _, _ = exports
    seen: list[bytes] = []
    place = transfer._place

    def placing(built, path):
        place(built, path)
        seen.append(path.read_bytes()[18:20])  # SQLite's write and read format versions: 2 is WAL
        seen.append(b"".join(n.encode() for n in _left(out) if n.startswith("a.db-")))

    monkeypatch.setattr(transfer, "_place", placing)
    import_jsonl(real, out / "a.db").close()
    assert seen == [b"\x02\x02", b""]  # WAL, and no -wal/-shm/-journal travelled with it


def test_a_hot_rollback_journal_is_named_with_its_fix(tmp_path):
    """A rollback journal left by a killed writer is beyond a read-only check; it says what to do."""
    path = tmp_path / "old.db"
    _make(path, 5)
    child = subprocess.Popen([sys.executable, "-c", _HOT_JOURNAL, str(path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "mid-write\n"
    child.kill()
    child.wait()
    child.stdout.close()
    assert (tmp_path / "old.db-journal").exists()
    with pytest.raises(OcrrError, match="rollback journal a killed writer left.*open the ledger once with a writer"):
        scan_file(path)
    with DurableLedger.open(path, verify="full") as led:  # the fix named: a writer rolls it back
        assert len(led) == 5
    assert scan_file(path)[0]


_HOT_JOURNAL = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA cache_size=1")  # spill to the file before the commit: the journal is hot
conn.execute("BEGIN")
conn.execute("CREATE TABLE pad (x BLOB)")
conn.execute("INSERT INTO pad VALUES (zeroblob(200000))")
print("mid-write", flush=True)
input()
"""


_CHILD = """
import sys
from ocrr.ledger.location import import_jsonl
print("ready", flush=True)
import_jsonl(sys.argv[1], sys.argv[2]).close()
print("done", flush=True)
"""


def test_killed_mid_import_the_target_is_absent_or_complete(tmp_path):
    """SIGKILL an importing process at moments spread over its run; the target is never a
    partial ledger."""
    n = 20_000
    size, root = _make(tmp_path / "big.db", n, dim=16)
    src = tmp_path / "big.jsonl"
    export_jsonl(tmp_path / "big.db", src)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "t.db"
    t0 = time.perf_counter()
    import_jsonl(src, out / "calibrate.db").close()
    took = time.perf_counter() - t0
    for name in os.listdir(out):
        os.unlink(out / name)
    outcomes = []
    # Kill moments spread over the import (and one past it), not drawn at random: early ones
    # land mid-import even when the child imports faster than the calibration did.
    for share in (0.02, 0.15, 0.3, 0.5, 0.75, 1.1):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(src), str(target)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        time.sleep(share * took)
        child.kill()
        child.wait()
        child.stdout.close()
        if target.exists():
            outcomes.append("complete")
            report, _ = scan_file(target)
            assert report and report.size == size and report.root == base64.b64encode(root).decode()
        else:
            outcomes.append("absent")
            assert not [n for n in _left(out) if n.startswith("t.db")]  # no -wal/-shm/-writer alone
            import_jsonl(src, target).close()  # the next import succeeds, and cleans up the killed one
            assert not [n for n in _left(out) if "import" in n]
        with DurableLedger.open(target, verify="full") as led:
            assert len(led) == size
        shutil.rmtree(out)  # the next round starts afresh
        out.mkdir()
    assert "absent" in outcomes, outcomes  # the kills did land mid-import


def test_a_failed_export_leaves_no_temporary_file(tmp_path):
    """An export that cannot finish (here: the ledger file is not a ledger) leaves nothing beside ``out``."""
    bad = tmp_path / "not-a-ledger.db"
    bad.write_bytes(b"this is not SQLite")
    out = tmp_path / "backup.jsonl"
    with pytest.raises(Exception):  # noqa: B017 - whatever refuses it, nothing may be left
        export_jsonl(bad, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-ledger.db"]
