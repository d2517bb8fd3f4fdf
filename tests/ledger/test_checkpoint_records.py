# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""Checkpoint records kept in the ledger's storage are signed notes, verified on read: an
unsigned, foreign or edited one is reported and ignored (never blamed on the entries,
never trusted to skip rehashing); an authenticated one that disagrees with the entries is
damage. SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.checkpoint_records import record_note
from ocrr.ledger.heads import Signer
from ocrr.ledger.location import open_store, scan_location
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 4
ORIGIN = "example.com/records-test"


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate(ORIGIN)


def _entries(lo: int, hi: int):
    rng = np.random.default_rng(lo)
    vecs = rng.standard_normal((hi - lo, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # a durable ledger takes unit rows only
    return vecs, [f"label-{i % 3}" for i in range(lo, hi)], [f"text {i}" for i in range(lo, hi)]


class Storage:
    """A ledger location and raw write access to its storage: what an attacker holds."""

    def __init__(self, location, kind: str):
        self.location, self.kind = location, kind

    def run(self, sql: str, params: tuple = ()) -> None:
        """Run one statement as the storage's owner, the database's triggers off."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.location)
            with conn:
                conn.execute(sql, params)
            conn.close()
            return
        import psycopg

        with psycopg.connect(self.location, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # what a superuser can do
            conn.execute(sql.replace("?", "%s"), params)

    @property
    def checkpoints(self) -> str:
        return "checkpoints" if self.kind == "sqlite" else "ocrr_checkpoints"

    def edit_label(self, entry: int) -> None:
        """Change an entry's label, leaving its stored hash: only rehashing finds it."""
        if self.kind == "sqlite":
            self.run("UPDATE entries SET label = 'forged' WHERE id = ?", (entry,))
        else:
            self.run("UPDATE ocrr_entries SET label = 'forged' WHERE seq = ?", (entry,))

    def add_checkpoint(self, size: int, chain_head: bytes, root: bytes, note: str | None = None) -> None:
        self.run(
            f"INSERT INTO {self.checkpoints} (size, chain_head, root, time, note) VALUES (?, ?, ?, ?, ?)",
            (size, chain_head, root, 0.0, note),
        )


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request, tmp_path) -> Storage:
    if request.param == "sqlite":
        return Storage(str(tmp_path / "l.db"), "sqlite")
    return Storage(request.getfixturevalue("pg_url"), "postgres")


def _ledger_with_record(storage: Storage, signer: Signer, checked: int, more: int = 0):
    """A ledger of ``checked`` entries with a signed checkpoint record, then ``more`` entries;
    returns its (size, root, chain head) at every size."""
    with open_store(storage.location, dim=DIM, signer=signer) as led:
        led.extend(*_entries(0, checked))
        assert led.verify("full").ok  # records the signed checkpoint at `checked`
        if more:
            led.extend(*_entries(checked, checked + more))
        return {n: (led.root(n), led.entry_hash(n - 1)) for n in range(1, len(led) + 1)}


def test_a_bogus_row_is_reported_and_ignored_not_blamed_on_the_entries(storage, signer):
    _ledger_with_record(storage, signer, 12)
    storage.add_checkpoint(5, b"\x01" * 32, b"\x02" * 32)  # no note: anyone with write access
    storage.add_checkpoint(7, b"\x03" * 32, b"\x04" * 32, "not a note")

    report, _ = scan_location(storage.location)  # no key: nothing is trusted, nothing is blamed
    assert report.ok and report.ignored_checkpoints == 3 and report.checked_from == 0, report
    assert "no verifier key" in report.ignored_why[0]

    report, _ = scan_location(storage.location, "checkpoint", (signer.vkey,))
    assert report.ok and report.checked_from == 12 and report.ignored_checkpoints == 2, report
    assert any("size 5" in why and "no signed note" in why for why in report.ignored_why)
    with open_store(storage.location, verify="checkpoint", signer=signer) as led:
        assert led.report.ok and led.report.checked_from == 12 and len(led) == 12


def test_a_forged_checkpoint_past_an_edit_does_not_skip_rehashing(storage, signer, tmp_path):
    heads = _ledger_with_record(storage, signer, 10, more=5)
    storage.edit_label(12)  # after the signed checkpoint at 10: found only by rehashing
    root, chain_head = heads[15]  # the values a forger reads from the stored nodes and hashes
    storage.add_checkpoint(15, chain_head, root)  # unsigned
    with pytest.raises(OcrrError, match="damaged at entry 12"):
        open_store(storage.location, verify="checkpoint")  # no key: rehashes everything
    with pytest.raises(OcrrError, match="damaged at entry 12"):
        open_store(storage.location, verify="checkpoint", signer=signer)  # trusts 10, rehashes on


def test_a_checkpoint_signed_by_another_key_or_edited_is_ignored(storage, signer):
    heads = _ledger_with_record(storage, signer, 10, more=5)
    root, chain_head = heads[15]
    forger = Signer.generate(ORIGIN)  # the same name, another key
    storage.add_checkpoint(15, chain_head, root, record_note(forger, 15, root, chain_head))
    root14, head14 = heads[14]
    storage.add_checkpoint(14, b"\x05" * 32, root14, record_note(signer, 14, root14, head14))  # row edited
    report, _ = scan_location(storage.location, "checkpoint", (signer.vkey,))
    assert report.ok and report.checked_from == 10 and report.ignored_checkpoints == 2, report
    why = " | ".join(report.ignored_why)
    assert "size 15: its note is not signed by a trusted key" in why
    assert "size 14: its size, root or chain head differs from what its signed note says" in why
    storage.edit_label(13)  # neither may vouch for it
    report, _ = scan_location(storage.location, "checkpoint", (signer.vkey,))
    assert not report.ok and report.first_bad == 13, report


def test_an_authenticated_checkpoint_that_disagrees_with_the_entries_is_damage(storage, signer, tmp_path):
    heads = _ledger_with_record(storage, signer, 12)
    root, chain_head = heads[12]
    note = record_note(signer, 12, root, chain_head)
    # A consistent rewrite of the history (entry 5's label, every hash recomputed) carrying the
    # genuine signed record of the real history: the record no longer matches the entries.
    forged = Storage(str(tmp_path / "forged.db"), "sqlite") if storage.kind == "sqlite" else None
    vecs, labels, texts = _entries(0, 12)
    labels[5] = "forged"
    if forged is not None:
        with DurableLedger.open(forged.location, dim=DIM) as led:
            led.extend(vecs, labels, texts)
        forged.add_checkpoint(12, chain_head, root, note)
        location = forged.location
    else:
        with DurableLedger.open(tmp_path / "forged.db", dim=DIM) as led:
            led.extend(vecs, labels, texts)
            rows = list(led.read_entries())
            leaves = [led.tree.node(0, i) for i in range(12)]
            new_root, new_head = led.root(), led.chain_head
        storage.run("DELETE FROM ocrr_entries")
        for row, leaf in zip(rows, leaves):
            storage.run("INSERT INTO ocrr_entries VALUES (?, ?, ?, ?, ?, ?, ?)", (*row, leaf))
        storage.run("UPDATE ocrr_head SET chain_head = ?, root = ?", (new_head, new_root))
        location = storage.location
    report, _ = scan_location(location, "full", (signer.vkey,))
    assert not report.ok and report.first_bad == 11 and "checkpoint at size 12" in report.reason, report
    with pytest.raises(OcrrError, match="history rewritten"):
        open_store(location, verify="checkpoint", signer=signer)
    # Without the key nothing vouches for the old history: the rewrite is a consistent log.
    assert scan_location(location)[0].ok


def test_a_signed_checkpoint_past_the_end_is_damage(storage, signer):
    """Entries removed from the tail, the head moved back to match: the signed record of the
    longer log says so (an unsigned one could not)."""
    _ledger_with_record(storage, signer, 12)
    with open_store(storage.location, signer=signer) as led:
        led.extend(*_entries(12, 20))
        assert led.verify("full").ok  # signed record at 20
        root10, head10 = led.root(10), led.entry_hash(9)
    if storage.kind == "sqlite":
        storage.run("DELETE FROM entries WHERE id >= 10")
        storage.run("DELETE FROM nodes WHERE (idx + 1) << level > 10")
        storage.run("UPDATE meta SET value = 10 WHERE key = 'size'")
        storage.run("UPDATE meta SET value = ? WHERE key = 'chain_head'", (head10,))
    else:
        storage.run("DELETE FROM ocrr_entries WHERE seq >= 10")
        storage.run("UPDATE ocrr_head SET size = 10, chain_head = ?, root = ?", (head10, root10))
    report, _ = scan_location(storage.location, "checkpoint", (signer.vkey,))
    assert not report.ok and "past the end" in report.reason, report


def test_an_old_format_row_is_ignored_and_the_open_adds_the_note_column(storage, signer):
    heads = _ledger_with_record(storage, signer, 8, more=2)
    # What a ledger of before signed records holds: no note column, rows vouching for nothing.
    storage.run(f"ALTER TABLE {storage.checkpoints} DROP COLUMN note")
    root, chain_head = heads[10]
    storage.run(f"INSERT INTO {storage.checkpoints} VALUES (?, ?, ?, ?)", (10, chain_head, root, 0.0))
    report, _ = scan_location(storage.location, "checkpoint", (signer.vkey,))  # read-only: the column stays missing
    assert report.ok and report.checked_from == 0 and report.ignored_checkpoints == 2, report
    assert all("no signed note" in why for why in report.ignored_why)
    with open_store(storage.location, verify="checkpoint", signer=signer) as led:  # adds the column
        assert led.report.checked_from == 0
        led.extend(*_entries(10, 11))
        assert led.verify("full").ok  # a signed record at 11
    report, _ = scan_location(storage.location, "checkpoint", (signer.vkey,))
    assert report.ok and report.checked_from == 11 and report.ignored_checkpoints == 2, report


def test_round_trip_with_the_real_key(storage, signer, tmp_path, capsys):
    _ledger_with_record(storage, signer, 20)
    with open_store(storage.location, verify="checkpoint", signer=signer) as led:
        assert led.report.ok and led.report.checked_from == 20 and led.report.ignored_checkpoints == 0
    key = tmp_path / "vkey"
    key.write_text(signer.vkey + "\n")
    assert main(["ledger", "verify", storage.location, "--quick", "--vkey", str(key)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["checked_from"] == 20 and out["ignored_checkpoints"] == 0
    assert main(["ledger", "verify", storage.location, "--quick"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["ok"] and out["checked_from"] == 0 and out["ignored_checkpoints"] == 1
    assert "without --vkey" in captured.err
    assert main(["ledger", "verify", storage.location, "--vkey", "example.com+00000000+AAAA"]) != 0
    assert "bad verifier key" in capsys.readouterr().err


def test_a_quick_open_that_rehashed_every_entry_records_it(storage, signer):
    """A quick open with no record to start from rehashes every entry, as a full check does,
    and records that check as a full check does: the next quick open starts from it. A quick
    open that did start from a record signs none."""
    with open_store(storage.location, dim=DIM) as led:  # no key: no record
        led.extend(*_entries(0, 9))
    with open_store(storage.location, verify="checkpoint", signer=signer) as led:
        assert led.report.checked_from == 0 and led.report.ignored_checkpoints == 0
    with open_store(storage.location, verify="checkpoint", signer=signer) as led:
        assert led.report.checked_from == 9
        led.extend(*_entries(9, 12))
    with open_store(storage.location, verify="checkpoint", signer=signer) as led:
        assert led.report.checked_from == 9  # (the open before rehashed 9..11 only: it recorded nothing)


def test_without_a_key_nothing_is_recorded(storage):
    with open_store(storage.location, dim=DIM) as led:
        led.extend(*_entries(0, 5))
        assert led.verify("full").ok
    report, _ = scan_location(storage.location, "checkpoint")
    assert report.ok and report.checked_from == 0 and report.ignored_checkpoints == 0


def test_a_record_is_never_a_checkpoint():
    """A record is signed by the log's key, but it is no signed head: a checkpoint verifier
    (ocrr's, as Go's note-based ones) refuses it, so a record written over a forked copy of
    the storage cannot be shown as a second root for a size the key signed."""
    from ocrr.errors import OcrrError
    from ocrr.ledger.checkpoint_records import record_note
    from ocrr.ledger.heads import Signer, verify_checkpoint

    signer = Signer.generate("example.com/records")
    note = record_note(signer, 3, bytes(range(32)), bytes(32))
    with pytest.raises(OcrrError, match="origin"):
        verify_checkpoint(note, signer.vkey)
