"""Random tamperings of a stored durable ledger: each one is detected and located.

A small ledger file is written once and copied into an in-memory SQLite database
(``deserialize``); each tampering is applied through SQL inside a transaction, scanned
with the very code ``DurableLedger.open`` runs, and rolled back. Hypothesis draws 200
lists of 50 tamperings (10,000 in all: batching keeps its per-example overhead small);
a few dozen more go through real files and ``DurableLedger.open``.
"""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer
from ocrr.ledger.sqlite.scan import report_of
from ocrr.ledger.sqlite.store import DurableLedger

N, DIM = 12, 3
FIELDS = ("id", "label", "text", "vector", "prev_hash", "hash")
_SIGNER = Signer.generate("example.com/tamper-test")


def _write(path, seed: int, texts: bool = True) -> None:
    rng = np.random.default_rng(seed)
    with DurableLedger.open(path, signer=_SIGNER) as led:
        for i in range(N):
            text = f"utterance {seed}-{i}" if texts and i % 3 else None
            vec = rng.normal(size=DIM).astype(np.float32)
            led.append(vec / np.linalg.norm(vec), f"label-{i % 4}", text)  # a durable ledger takes unit rows only
        led.verify()  # records a signed checkpoint at N (the checks below trust no key: it is ignored)


def _image(path) -> bytes:
    """The file's bytes in rollback-journal mode (an in-memory copy cannot use WAL)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    data = conn.serialize()
    conn.close()
    return data


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("tamper")
    _write(d / "a.db", 0)
    _write(d / "b.db", 1)
    a, b = _image(d / "a.db"), _image(d / "b.db")
    return {"a": a, "b": b, "rows_b": _rows(_load(b)), "conn_a": _load(a)}


def _load(data: bytes) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.deserialize(data)
    return conn


def _rows(conn) -> list[tuple]:
    return conn.execute("SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY id").fetchall()


def _rewrite(conn, rows) -> None:
    conn.execute("DELETE FROM entries")
    conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)


def _flip(value, pos: int, bit: int):
    """``value`` with one bit of its stored bytes flipped (strings stay strings if they can)."""
    if isinstance(value, int):
        raw = bytearray(value.to_bytes(8, "little", signed=True))
        raw[pos % 8] ^= 1 << bit
        return int.from_bytes(raw, "little", signed=True)
    raw = bytearray(value.encode("utf-8") if isinstance(value, str) else (value if value is not None else b"\x00"))
    raw[pos % len(raw)] ^= 1 << bit
    if isinstance(value, str):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return bytes(raw)  # stored as a blob: the type change is itself a tampering
    return bytes(raw) if value is not None else "\x01"


KINDS = ("flip", "drop", "duplicate", "reorder", "truncate", "splice", "node")


def _decode(x: int) -> tuple:
    """One tampering from one integer (one draw each keeps Hypothesis's overhead low)."""
    kind = KINDS[x % len(KINDS)]
    x //= len(KINDS)
    a, b, c = x % N, (x // N) % (N + 1), x // (N * (N + 1))
    if kind == "flip":
        return ("flip", a, FIELDS[b % len(FIELDS)], c % 10_000, (c // 10_000) % 8)
    if kind in ("drop", "truncate", "splice"):
        return (kind, a)
    if kind == "duplicate":
        return (kind, a, b)
    if kind == "reorder":
        return (kind, a, b % N)
    return ("node", x % (2 * N), (x // (2 * N)) % 32, (x // (64 * N)) % 8)


tamperings = st.integers(0, 2**48).map(_decode)


def _tamper(conn, other_rows, t) -> int | None:
    """Apply tampering ``t``; return the entry the report must name (None: any or none)."""
    kind = t[0]
    rows = _rows(conn)
    if kind == "flip":
        _, i, field, pos, bit = t
        j = FIELDS.index(field)
        row = list(rows[i])
        row[j] = _flip(row[j], pos, bit)
        if field == "id" and any(r[0] == row[0] for r in rows):
            row[0] = max(r[0] for r in rows) + 1 + pos  # ids are unique: move it past the end
        rows[i] = tuple(row)
        _rewrite(conn, rows)
        return 0 if field == "id" and row[0] < 0 else i  # a negative id sorts first
    if kind == "drop":
        del rows[t[1]]
        _rewrite(conn, [(k, *r[1:]) for k, r in enumerate(rows)])  # renumbered: no gap to spot
        return t[1]
    if kind == "duplicate":
        _, i, at = t
        rows.insert(at, rows[i])
        _rewrite(conn, [(k, *r[1:]) for k, r in enumerate(rows)])
        return i + 1 if at in (i, i + 1) else at  # next to its original, the second copy breaks
    if kind == "reorder":
        _, i, j = t
        if i == j:
            j = (i + 1) % N
        rows[i], rows[j] = rows[j], rows[i]
        _rewrite(conn, [(k, *r[1:]) for k, r in enumerate(rows)])
        return min(i, j)
    if kind == "truncate":
        _rewrite(conn, rows[: t[1]])
        return t[1]
    if kind == "splice":  # this log's first entries, then another log's
        _rewrite(conn, rows[: t[1]] + other_rows[t[1] :])
        return t[1]
    _, which, pos, bit = t  # a stored Merkle node
    nodes = conn.execute("SELECT level, idx, hash FROM nodes ORDER BY level, idx").fetchall()
    level, idx, h = nodes[which % len(nodes)]
    conn.execute("UPDATE nodes SET hash = ? WHERE level = ? AND idx = ?", (_flip(h, pos, bit), level, idx))
    return idx << level


def _check(report, expected: int | None) -> None:
    assert not report.ok, "tampering not detected"
    assert report.reason
    if expected is not None:
        assert report.first_bad == expected, report


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ts=st.lists(tamperings, min_size=50, max_size=50))
def test_every_tampering_is_detected_and_located(images, ts):
    conn = images["conn_a"]
    for t in ts:
        conn.execute("BEGIN")
        try:
            expected = _tamper(conn, images["rows_b"], t)
            report, _ = report_of(conn, None)
        finally:
            conn.execute("ROLLBACK")  # back to the intact file for the next tampering
        _check(report, expected)


def test_untouched_images_verify(images):
    for name in ("a", "b"):
        report, scan = report_of(_load(images[name]), None)
        assert report.ok and report.size == N


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(t=tamperings)
def test_open_refuses_a_tampered_file_naming_the_entry(images, tmp_path_factory, t):
    """Through a real file: ``DurableLedger.open`` raises one OcrrError naming the entry."""
    d = tmp_path_factory.mktemp("open")
    path = d / "ledger.db"
    conn = _load(images["a"])
    expected = _tamper(conn, images["rows_b"], t)
    disk = sqlite3.connect(path)
    conn.backup(disk)
    disk.close()
    with pytest.raises(OcrrError, match="damaged") as err:
        DurableLedger.open(path)
    if expected is not None:
        assert f"at entry {expected}:" in str(err.value)
    shutil.rmtree(d)


def test_truncation_with_consistent_metadata_needs_an_outside_head(images, tmp_path):
    """Cutting the tail AND rewriting meta and checkpoints to match leaves a valid shorter
    log: only a head held outside the file (a signed head, a witness) reveals it."""
    conn = _load(images["a"])
    rows = _rows(conn)
    _rewrite(conn, rows[:7])
    conn.executemany("UPDATE meta SET value = ? WHERE key = ?", [(7, "size"), (rows[6][5], "chain_head")])
    conn.execute("DELETE FROM checkpoints")
    conn.execute("DELETE FROM nodes WHERE (idx + 1) << level > 7")
    report, scan = report_of(conn, None)
    assert report.ok and report.size == 7
    full = report_of(_load(images["a"]), None)[1]
    # The consistency check against the held head of size 12 cannot be made: 12 > 7.
    assert len(scan.tree) < len(full.tree)
