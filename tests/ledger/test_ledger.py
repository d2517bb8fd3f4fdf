"""Tests for ocrr.ledger.Ledger: chaining, tamper detection, persistence, errors (the file format's
crash safety and the old format's migration: test_file.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ocrr.errors import OcrrError
from ocrr.ledger import GENESIS, Entry, Ledger, VerifyResult, entry_digest
from ocrr.ledger.sqlite.scan import scan_file

# ---------------------------------------------------------------- strategies
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
labels = st.text(min_size=1, max_size=6)
texts = st.none() | st.text(max_size=6)  # None and "" both occur


def vectors(dim: int) -> st.SearchStrategy[list[float]]:
    return st.lists(floats32, min_size=dim, max_size=dim)


@st.composite
def ledger_specs(draw, min_size: int = 1, max_size: int = 30):
    """(dim, [(vector, label, text), ...]) for a random small ledger."""
    dim = draw(st.integers(1, 8))
    rows = draw(st.lists(st.tuples(vectors(dim), labels, texts), min_size=min_size, max_size=max_size))
    return dim, rows


def build(rows) -> Ledger:
    led = Ledger()
    for vec, label, text in rows:
        led.append(np.asarray(vec, dtype=np.float32), label, text)
    return led


def reference_digest(id: int, label: str, text: str | None, vec, prev: bytes) -> bytes:
    """The documented encoding, written out independently of ledger.py."""
    lab = label.encode("utf-8")
    parts = [b"ocrr-ledger-entry-v1\x00", struct.pack("<Q", id), struct.pack("<I", len(lab)), lab]
    if text is None:
        parts.append(b"\x00")
    else:
        txt = text.encode("utf-8")
        parts += [b"\x01", struct.pack("<I", len(txt)), txt]
    arr = np.asarray(vec, dtype="<f4")
    parts += [struct.pack("<I", arr.shape[0]), arr.tobytes(), prev]
    return hashlib.sha256(b"".join(parts)).digest()


HYP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------- basic reading
def test_append_and_read_back():
    led = Ledger()
    e0 = led.append(np.array([1.0, 2.0, 3.0], np.float32), "card_lost", "I lost my card")
    e1 = led.append([0.5, -0.25, 4.0], "balance", None)

    assert len(led) == 2
    assert led[0] == e0 and led[1] == e1 and led[-1] == e1
    assert [e.id for e in led] == [0, 1]
    assert (e1.label, e1.text) == ("balance", None)
    assert e0.vector.dtype == np.float32 and e0.vector.shape == (3,)
    assert e0.vector.tolist() == [1.0, 2.0, 3.0]
    assert led.labels == ("card_lost", "balance")
    np.testing.assert_array_equal(led.vectors, [[1.0, 2.0, 3.0], [0.5, -0.25, 4.0]])
    assert led.vectors.dtype == np.float32 and led.dim == 3
    with pytest.raises(IndexError):
        led[2]


def test_accepts_row_matrix_list_and_float64():
    a, b, c = Ledger(), Ledger(), Ledger()
    v64 = np.array([0.1, 0.2, 0.3])
    a.append(v64.reshape(1, 3), "x")
    b.append(v64.tolist(), "x")
    c.append(v64.astype(np.float32), "x")
    assert a.head == b.head == c.head
    assert a[0].vector.tobytes() == v64.astype(np.float32).tobytes()


def test_stored_vector_is_a_copy_of_the_input():
    v = np.array([1.0, 2.0], np.float32)
    led = Ledger()
    led.append(v, "a")
    v[0] = 99.0
    assert led[0].vector.tolist() == [1.0, 2.0]
    assert led.verify()


def test_past_entries_cannot_be_changed_through_the_public_api():
    led = Ledger()
    entry = led.append([1.0, 2.0], "a", "t")
    with pytest.raises(ValueError):
        entry.vector[0] = 5.0
    with pytest.raises(ValueError):
        led.vectors[0, 0] = 5.0
    with pytest.raises(ValueError):
        led[0].vector[1] = 5.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.label = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        led.labels[0] = "b"  # type: ignore[index]
    assert led[0].vector.tolist() == [1.0, 2.0] and led[0].label == "a"


def test_buffer_growth_keeps_every_vector_and_old_views():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((300, 5)).astype(np.float32)  # > initial capacity, so it grows twice
    led = Ledger()
    early = led.append(data[0], "l0")
    for i in range(1, 300):
        led.append(data[i], f"l{i % 7}")
    assert led.vectors.shape == (300, 5)
    assert led.vectors.tobytes() == data.tobytes()
    assert early.vector.tobytes() == data[0].tobytes()
    assert led.verify()


def test_empty_ledger():
    led = Ledger()
    assert len(led) == 0 and list(led) == [] and led.head == GENESIS
    assert led.vectors.shape == (0, 0) and led.labels == ()
    assert led.verify() and led.verify(expected_head=GENESIS)
    assert Ledger(dim=4).vectors.shape == (0, 4)


# --------------------------------------------------------------- the chain
def test_genesis_and_links():
    assert GENESIS == hashlib.sha256(b"ocrr-ledger-genesis-v1").digest()
    led = Ledger()
    for i in range(5):
        led.append([float(i), 1.0], f"l{i}", None if i % 2 else f"text {i}")
    assert led[0].prev_hash == GENESIS
    for i in range(1, 5):
        assert led[i].prev_hash == led[i - 1].hash
    assert led.head == led[4].hash
    assert all(len(e.hash) == 32 and len(e.prev_hash) == 32 for e in led)


def test_digest_known_answer():
    # Locks the on-disk format: changing the encoding must change this constant on purpose.
    digest = entry_digest(0, "card_lost", "I lost my card", np.array([0.5, -1.0, 0.0], np.float32), GENESIS)
    assert digest.hex() == "f3a276a6879b0646f9881090b5bf3a5263897345e2acfc0da777ac4cbce7f124"


@HYP
@given(ledger_specs())
def test_hashes_follow_the_documented_encoding(spec):
    _, rows = spec
    led = build(rows)
    prev = GENESIS
    for i, (vec, label, text) in enumerate(rows):
        assert led[i].hash == reference_digest(i, label, text, vec, prev)
        prev = led[i].hash


def test_encoding_is_unambiguous():
    v, p = np.array([1.0], np.float32), GENESIS
    assert entry_digest(0, "a", None, v, p) != entry_digest(0, "a", "", v, p)
    assert entry_digest(0, "ab", "c", v, p) != entry_digest(0, "a", "bc", v, p)
    assert entry_digest(0, "a", None, np.array([0.0], np.float32), p) != entry_digest(
        0, "a", None, np.array([-0.0], np.float32), p
    )
    assert entry_digest(0, "a", None, v, p) != entry_digest(1, "a", None, v, p)
    two, one = np.zeros(2, np.float32), np.zeros(1, np.float32)
    assert entry_digest(0, "a", None, two, p) != entry_digest(0, "a", None, one, p)


@HYP
@given(ledger_specs())
def test_same_inputs_give_the_same_head(spec):
    _, rows = spec
    a, b = build(rows), build(rows)
    assert a.head == b.head
    assert [e.hash for e in a] == [e.hash for e in b]
    vec, label, text = rows[-1]
    c = build(rows[:-1] + [(vec, label + "x", text)])
    assert c.head != a.head


@HYP
@given(ledger_specs(max_size=12), ledger_specs(max_size=12))
def test_extend_matches_append(first, second):
    dim, rows = first
    rows2 = [r for r in second[1] if len(r[0]) == dim] or rows
    one_by_one = build(rows + rows2)
    bulk = Ledger()
    r1 = bulk.extend([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    r2 = bulk.extend(np.array([r[0] for r in rows2], np.float32), [r[1] for r in rows2], [r[2] for r in rows2])
    assert r1 == range(0, len(rows)) and r2 == range(len(rows), len(rows) + len(rows2))
    assert list(bulk) == list(one_by_one)
    assert bulk.head == one_by_one.head and bulk.verify()


def test_extend_without_texts_and_empty_extend():
    a, b = Ledger(), Ledger()
    a.extend(np.eye(3, dtype=np.float32), ["x", "y", "z"])
    for i, lab in enumerate("xyz"):
        b.append(np.eye(3, dtype=np.float32)[i], lab, None)
    assert a.head == b.head
    assert a.extend(np.empty((0, 3), np.float32), []) == range(3, 3)
    assert a.head == b.head


def test_failed_append_and_extend_leave_no_trace():
    led = Ledger()
    with pytest.raises(OcrrError):
        led.append([np.nan, 1.0, 2.0], "a")
    assert led.dim is None  # the rejected vector did not fix the dimension
    led.append([1.0, 2.0], "a")
    bad = np.ones((4, 2), np.float32)
    bad[2, 1] = np.inf
    with pytest.raises(OcrrError, match="vector 2"):
        led.extend(bad, ["b"] * 4)
    with pytest.raises(OcrrError):
        led.extend(np.ones((2, 2)), ["b", ""])
    with pytest.raises(OcrrError):
        led.append([1.0, 2.0], "b", "\ud800")  # lone surrogate cannot be hashed as UTF-8
    led.append([3.0, 4.0], "c")
    ref = Ledger()
    ref.append([1.0, 2.0], "a")
    ref.append([3.0, 4.0], "c")
    assert len(led) == 2 and led.head == ref.head and led.verify()


# ------------------------------------------------------------------ tampering
KINDS = ["label", "text", "vector_bit", "prev_hash", "hash", "id", "delete", "swap", "insert", "replace", "truncate"]


def draw_tamper(kind: str, led: Ledger, data) -> dict:
    """Random parameters for one tamper, plus the index verify() must report."""
    n, d = len(led), led.dim
    idx = lambda lo, hi: data.draw(st.integers(lo, hi))  # noqa: E731
    if kind == "label":
        k = idx(0, n - 1)
        return {"k": k, "new": data.draw(labels.filter(lambda s: s != led[k].label)), "expected": k}
    if kind == "text":
        k = idx(0, n - 1)
        return {"k": k, "new": data.draw(texts.filter(lambda t: t != led[k].text)), "expected": k}
    if kind == "vector_bit":
        k = idx(0, n - 1)
        return {"k": k, "j": idx(0, d - 1), "bit": idx(0, 31), "expected": k}
    if kind in ("prev_hash", "hash"):
        k = idx(0, n - 1)
        old = getattr(led[k], kind)
        new = data.draw(st.binary(min_size=32, max_size=32).filter(lambda b: b != old))
        return {"k": k, "new": new, "expected": k}
    if kind == "id":
        k = idx(0, n - 1)
        return {"k": k, "new": n + idx(0, 1000), "expected": k}  # past every id, so SQLite moves it last
    if kind == "delete":
        assume(n >= 2)
        k = idx(0, n - 2)  # deleting the last entry is a truncation, tested separately
        return {"k": k, "expected": k}
    if kind == "swap":
        assume(n >= 2)
        i = idx(0, n - 2)
        return {"i": i, "j": idx(i + 1, n - 1), "expected": i}
    if kind in ("insert", "replace"):
        # A forged entry whose own hash is right; only the next entry's link (and ids) give it away.
        # At the very end that would be an extension / tail rewrite, tested separately.
        if kind == "replace":
            assume(n >= 2)
        k = idx(0, n - 1 if kind == "insert" else n - 2)
        vec = np.asarray(data.draw(vectors(d)), np.float32)
        label, text = data.draw(labels), data.draw(texts)
        prev = led[k - 1].hash if k else GENESIS
        forged = (k, label, text, vec, prev, entry_digest(k, label, text, vec, prev))
        assume(forged[5] != led[k].hash)  # drew the original contents back: no tamper at all
        return {"k": k, "row": forged, "expected": k + 1}
    if kind == "truncate":
        m = idx(0, n - 1)
        return {"m": m, "expected": m}
    raise AssertionError(kind)


def tamper_private(kind: str, led: Ledger, p: dict) -> Ledger:
    """Edit the private fields the way a buggy caller could: flip a bit of the vector buffer,
    or rebuild the ledger from its stored columns with one edited (``Ledger._from_stored``)."""
    if kind == "vector_bit":
        led._buf[p["k"]].view(np.uint32)[p["j"]] ^= np.uint32(1 << p["bit"])
        return led
    rows = [[e.id, e.label, e.text, e.vector.copy(), e.prev_hash, e.hash] for e in led]
    field = {"id": 0, "label": 1, "text": 2, "prev_hash": 4, "hash": 5}
    if kind in field:
        rows[p["k"]][field[kind]] = p["new"]
    elif kind == "replace":
        k, (_, label, text, vec, _, digest) = p["k"], p["row"]
        rows[k][1], rows[k][2], rows[k][3], rows[k][5] = label, text, vec, digest
    elif kind == "delete":
        del rows[p["k"]]
    elif kind == "swap":
        rows[p["i"]], rows[p["j"]] = rows[p["j"]], rows[p["i"]]
    elif kind == "insert":
        rows.insert(p["k"], list(p["row"]))
    elif kind == "truncate":
        rows = rows[: p["m"]]
    ids, labs, txts, vecs, prevs, hashes = (list(c) for c in zip(*rows)) if rows else ([],) * 6
    mat = np.array(vecs, np.float32).reshape(len(rows), led.dim)
    return Ledger._from_stored(led.dim, ids, labs, txts, mat, prevs, hashes)


def tamper_sqlite(kind: str, path: Path, p: dict) -> None:
    """Edit the saved file with SQL, the realistic attack."""
    conn = sqlite3.connect(path)
    sql = conn.execute
    if kind in ("label", "text", "prev_hash", "hash", "id"):
        sql(f"UPDATE entries SET {kind} = ? WHERE id = ?", (p["new"], p["k"]))
    elif kind == "vector_bit":
        (blob,) = sql("SELECT vector FROM entries WHERE id = ?", (p["k"],)).fetchone()
        blob = bytearray(blob)
        blob[4 * p["j"] + p["bit"] // 8] ^= 1 << (p["bit"] % 8)  # little-endian float32 bytes
        sql("UPDATE entries SET vector = ? WHERE id = ?", (bytes(blob), p["k"]))
    elif kind == "delete":
        sql("DELETE FROM entries WHERE id = ?", (p["k"],))
    elif kind == "swap":
        cols = "label, text, vector, prev_hash, hash"
        ri = sql(f"SELECT {cols} FROM entries WHERE id = ?", (p["i"],)).fetchone()
        rj = sql(f"SELECT {cols} FROM entries WHERE id = ?", (p["j"],)).fetchone()
        update = "UPDATE entries SET label=?, text=?, vector=?, prev_hash=?, hash=? WHERE id = ?"
        sql(update, (*rj, p["i"]))
        sql(update, (*ri, p["j"]))
    elif kind == "replace":
        _, label, text, vec, _, digest = p["row"]
        sql(
            "UPDATE entries SET label = ?, text = ?, vector = ?, hash = ? WHERE id = ?",
            (label, text, vec.tobytes(), digest, p["k"]),
        )
    elif kind == "insert":
        k = p["k"]
        sql("UPDATE entries SET id = -id - 1 WHERE id >= ?", (k,))  # two steps: ids stay unique
        sql("UPDATE entries SET id = -id WHERE id < 0")
        id_, label, text, vec, prev, digest = p["row"]
        sql("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", (id_, label, text, vec.tobytes(), prev, digest))
    elif kind == "truncate":
        sql("DELETE FROM entries WHERE id >= ?", (p["m"],))
    else:
        raise AssertionError(kind)
    conn.commit()
    conn.close()


def check_detected(kind: str, led: Ledger, held_head: bytes, expected: int) -> None:
    with_head = led.verify(expected_head=held_head)
    assert not with_head.ok and not with_head
    assert with_head.first_bad == expected, with_head.reason
    plain = led.verify()
    if kind == "truncate":
        assert plain.ok  # a shorter chain is still a valid chain: only the held head reveals it
        assert with_head.reason.startswith("head mismatch")
    else:
        assert not plain.ok and plain.first_bad == expected, plain.reason
        assert plain.reason.startswith(f"entry {expected}:")
    if kind == "replace":
        assert plain.reason == f"entry {expected}: prev_hash does not link to entry {expected - 1}"


@pytest.mark.parametrize("kind", KINDS)
@HYP
@given(spec=ledger_specs(), data=st.data())
def test_tampering_private_fields_is_detected(kind, spec, data):
    led = build(spec[1])
    held_head = led.head
    assert led.verify(expected_head=held_head)
    p = draw_tamper(kind, led, data)
    check_detected(kind, tamper_private(kind, led, p), held_head, p["expected"])


@pytest.mark.parametrize("kind", KINDS)
@HYP
@given(spec=ledger_specs(), data=st.data())
def test_tampering_the_sqlite_file_is_detected(kind, spec, data):
    led = build(spec[1])
    held_head = led.head
    p = draw_tamper(kind, led, data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        led.save(path)
        tamper_sqlite(kind, path, p)
        loaded = Ledger.load(path, verify=False)
        check_detected(kind, loaded, held_head, p["expected"])
        if kind != "truncate":
            with pytest.raises(OcrrError, match="modified after it was written; restore it from a backup"):
                Ledger.load(path)


@pytest.mark.parametrize("new_text", [None, ""])
def test_text_none_and_empty_swapped_in_file_is_detected(tmp_path, new_text):
    led = Ledger()
    led.append([1.0], "a", "" if new_text is None else None)
    led.append([2.0], "b", "kept")
    path = tmp_path / "l.db"
    led.save(path)
    tamper_sqlite("text", path, {"k": 0, "new": new_text})
    result = Ledger.load(path, verify=False).verify()
    assert not result and result.first_bad == 0
    assert "stored hash does not match" in result.reason


@HYP
@given(spec=ledger_specs(min_size=2), data=st.data())
def test_rewritten_history_is_caught_only_by_the_held_head(spec, data):
    """Forge an entry and re-hash everything after it: internally consistent, so only expected_head can tell."""
    led = build(spec[1])
    held_head = led.head
    k = data.draw(st.integers(0, len(led) - 1))
    rows = [(e.vector, e.label, e.text) for e in led]
    rows.insert(k, (np.asarray(data.draw(vectors(led.dim)), np.float32), "forged", None))
    forged = Ledger()
    for vec, label, text in rows:
        forged.append(vec, label, text)
    assert forged.verify()
    result = forged.verify(expected_head=held_head)
    assert not result and result.reason.startswith("head mismatch")


def test_secret_extension_in_file_is_caught(tmp_path):
    led = build([([1.0, 0.0], "a", None), ([0.0, 1.0], "b", "x")])
    held_head = led.head
    path = tmp_path / "l.db"
    led.save(path)
    vec = np.array([5.0, 5.0], np.float32)
    digest = entry_digest(2, "evil", None, vec, held_head)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO entries VALUES (2, 'evil', NULL, ?, ?, ?)", (vec.tobytes(), held_head, digest))
    # A valid longer chain, but the file's commit record says 2 entries ...
    with pytest.raises(OcrrError, match="holds 3 entries but its last commit recorded 2"):
        Ledger.load(path)
    loaded = Ledger.load(path, verify=False)
    assert len(loaded) == 3 and loaded.verify()
    result = loaded.verify(expected_head=held_head)  # ... and the head we kept says so too
    assert not result and result.first_bad == 2


def test_chain_must_start_at_genesis():
    """A self-consistent chain hung off some other head (e.g. a spliced-out suffix) is rejected."""
    other_head = hashlib.sha256(b"some other chain").digest()
    vecs = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    prevs, hashes, prev = [], [], other_head
    for i in range(2):
        prevs.append(prev)
        prev = entry_digest(i, "a", None, vecs[i], prev)
        hashes.append(prev)
    spliced = Ledger._from_stored(2, [0, 1], ["a", "a"], [None, None], vecs, prevs, hashes)
    result = spliced.verify()
    assert not result and result.first_bad == 0
    assert result.reason == "entry 0: prev_hash does not link to the genesis value"


@HYP
@given(ledger_specs())
def test_untampered_ledger_verifies(spec):
    led = build(spec[1])
    result = led.verify(expected_head=led.head)
    assert result.ok and bool(result) and result.first_bad is None
    assert isinstance(result, VerifyResult)


# ---------------------------------------------------------------- persistence
special_floats = st.sampled_from([0.0, -0.0, 1e-45, -3.4028234663852886e38, 1.401298464324817e-45])


@HYP
@given(spec=ledger_specs(), extra=st.lists(special_floats, min_size=1, max_size=8))
def test_save_load_round_trip_is_bit_exact(spec, extra):
    dim, rows = spec
    rows = rows + [((extra * dim)[:dim], "special", "")]
    led = build(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        led.save(path)
        loaded = Ledger.load(path)
        assert os.listdir(tmp) == ["ledger.db"]  # no temp file left behind
    assert loaded.head == led.head and len(loaded) == len(led) and loaded.dim == led.dim
    assert list(loaded) == list(led)
    assert loaded.vectors.tobytes() == led.vectors.tobytes()
    assert loaded.labels == led.labels
    assert [e.text for e in loaded] == [t for _, _, t in rows]  # None stays None, "" stays ""
    # The loaded ledger carries on the same chain.
    led.append(rows[0][0], "next")
    loaded.append(rows[0][0], "next")
    assert loaded.head == led.head


def test_save_replaces_an_existing_file(tmp_path):
    path = tmp_path / "l.db"
    a = build([([1.0], "a", None)])
    b = build([([2.0], "b", None), ([3.0], "c", None)])
    a.save(path)
    b.save(path)
    assert Ledger.load(path).head == b.head
    assert sorted(os.listdir(tmp_path)) == ["l.db"]


def test_empty_ledger_round_trip(tmp_path):
    Ledger().save(tmp_path / "e.db")
    loaded = Ledger.load(tmp_path / "e.db")
    assert len(loaded) == 0 and loaded.head == GENESIS and loaded.dim is None
    Ledger(dim=3).save(tmp_path / "d.db")
    assert Ledger.load(tmp_path / "d.db").dim == 3


def test_file_schema(tmp_path):
    path = tmp_path / "l.db"
    build([([1.0, 2.0], "a", None)]).save(path)
    with sqlite3.connect(path) as conn:
        cols = [(r[1], r[2], r[3], r[5]) for r in conn.execute("PRAGMA table_info(entries)")]
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        (blob,) = conn.execute("SELECT vector FROM entries").fetchone()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert cols == [
        ("id", "INTEGER", 0, 1),
        ("label", "TEXT", 1, 0),
        ("text", "TEXT", 0, 0),
        ("vector", "BLOB", 1, 0),
        ("prev_hash", "BLOB", 1, 0),
        ("hash", "BLOB", 1, 0),
    ]
    assert tables == {"meta", "entries", "nodes", "checkpoints", "verifications"}
    assert meta == {
        "format": "ocrr-ledger",
        "version": 1,
        "dim": 2,
        "size": 1,
        "chain_head": build([([1.0, 2.0], "a", None)]).head,
        "durable": 1,
    }
    assert blob == np.array([1.0, 2.0], "<f4").tobytes()
    report, _ = scan_file(path)  # one format: what save writes, the durable store's check accepts
    assert report.ok and report.size == 1


def test_open_appends_to_the_file(tmp_path):
    path = tmp_path / "live.db"
    with Ledger.open(path) as live:  # unit rows: the file's store takes no other
        live.append([0.6, 0.8], "a", "first")
        live.extend(np.array([[0.8, 0.6], [0.0, 1.0]]), ["b", "c"], [None, ""])
        live.flush()
        assert Ledger.load(path).head == live.head
        live.append([1.0, 0.0], "d")
        head = live.head
    reopened = Ledger.open(path)
    assert len(reopened) == 4 and reopened.head == head and reopened.dim == 2
    reopened.append([-0.6, 0.8], "e")
    reopened.close()
    with pytest.raises(OcrrError, match="closed"):
        reopened.append([1.0, 1.0], "f")
    with pytest.raises(OcrrError, match="closed"):
        reopened.extend(np.array([[1.0, 1.0]]), ["f"])
    final = Ledger.load(path)
    assert final.head == reopened.head and final.labels == ("a", "b", "c", "d", "e")
    assert final.verify(expected_head=reopened.head)


def test_open_refuses_a_tampered_file_and_a_wrong_dim(tmp_path):
    path = tmp_path / "live.db"
    with Ledger.open(path, dim=2) as live:
        live.append([0.6, 0.8], "a")
    with pytest.raises(OcrrError, match="dimension 2, not 3"):
        Ledger.open(path, dim=3)
    tamper_sqlite("label", path, {"k": 0, "new": "b"})
    with pytest.raises(OcrrError, match="entry 0: stored hash does not match"):
        Ledger.open(path)


# --------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "vector, label, text, match",
    [
        ([1.0, np.nan, 3.0], "a", None, "NaN or inf"),
        ([1.0, np.inf, 3.0], "a", None, "NaN or inf"),
        ([1.0, 2.0], "a", None, "dimension 2 but this ledger holds dimension 3"),
        ([1.0, 2.0, 3.0], "", None, "label must be a non-empty string"),
        ([1.0, 2.0, 3.0], 5, None, "label must be a non-empty string"),
        ([1.0, 2.0, 3.0], "a", 7, "text must be a string or None"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], "a", None, r"shape \(d,\) or \(1, d\)"),
        (["x", "y", "z"], "a", None, "not numeric"),
    ],
)
def test_bad_append_raises_a_clear_error(vector, label, text, match):
    led = Ledger(dim=3)
    with pytest.raises(OcrrError, match=match) as info:
        led.append(vector, label, text)
    assert ";" in str(info.value)  # the message goes on to say what to do
    assert len(led) == 0


def test_bad_construction_and_extend_arguments():
    with pytest.raises(OcrrError, match="positive integer"):
        Ledger(dim=0)
    led = Ledger()
    with pytest.raises(OcrrError, match="2 vectors but 1 labels"):
        led.extend(np.ones((2, 3)), ["a"])
    with pytest.raises(OcrrError, match="2-D array"):
        led.extend(np.ones(3), ["a"])
    with pytest.raises(OcrrError, match="32-byte"):
        led.verify(expected_head=b"short")


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope" / "ledger.db"
    with pytest.raises(OcrrError, match="does not exist") as info:
        Ledger.load(missing)
    assert str(missing) in str(info.value)
    assert not missing.exists()  # loading did not create it
    with pytest.raises(OcrrError, match="directory"):
        Ledger.open(missing)
    with pytest.raises(OcrrError, match="directory"):
        Ledger().save(missing)


def test_non_ledger_file_is_rejected(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(OcrrError, match="not a readable ocrr ledger"):
        Ledger.load(junk)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value)")
        conn.execute("INSERT INTO meta VALUES ('format', 'something-else')")
        conn.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY)")
    with pytest.raises(OcrrError, match="not an ocrr ledger v1 file"):
        Ledger.load(other)


def test_truncated_vector_blob_is_reported(tmp_path):
    path = tmp_path / "l.db"
    build([([1.0, 2.0], "a", None)]).save(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET vector = ? WHERE id = 0", (b"\x00" * 4,))
    with pytest.raises(OcrrError, match="entry 0 stores a vector of 4 bytes, expected 8"):
        Ledger.load(path, verify=False)


def test_entry_equality_is_bit_exact():
    a = Entry(0, "a", None, np.array([0.0], np.float32), GENESIS, GENESIS)
    b = Entry(0, "a", None, np.array([-0.0], np.float32), GENESIS, GENESIS)
    c = Entry(0, "a", None, np.array([0.0], np.float32), GENESIS, GENESIS)
    assert a == c and a != b and hash(a) == hash(c)


# --- vectors on disk ------------------------------------------------------------------------


def test_vectors_on_disk_give_the_same_chain_and_leave_nothing_behind(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 8)).astype(np.float32)  # grows past the initial capacity (64) twice
    labels = [f"c{i % 7}" for i in range(300)]
    ram, disk = Ledger(8), Ledger(8, vectors_on_disk=tmp_path)
    assert disk.on_disk and not ram.on_disk
    for led in (ram, disk):
        led.extend(x[:100], labels[:100])
        old_view = led.vectors
        for i in range(100, 300):
            led.append(x[i], labels[i])
        assert np.array_equal(old_view, x[:100])  # views taken before growth still read right
    assert disk.head == ram.head and disk.verify().ok
    assert isinstance(disk.vectors.base, np.memmap) or isinstance(disk.vectors, np.memmap)
    assert np.array_equal(disk.vectors, x) and not disk.vectors.flags.writeable
    assert list(tmp_path.iterdir()) == []  # an unlinked scratch file: nothing to clean up
    # the chain still covers the vectors: a changed byte in the mapped file is caught
    disk._buf[17, 3] += 1.0
    assert disk.verify().first_bad == 17
    disk._buf[17, 3] -= 1.0
    # pickling gives an in-memory copy of the same chain
    import pickle

    copy = pickle.loads(pickle.dumps(disk))
    assert not copy.on_disk and copy.head == disk.head and copy.verify().ok
    copy.append(x[0], "c0")
    assert copy.verify().ok and len(disk) == 300


def test_vectors_on_disk_needs_an_existing_folder(tmp_path):
    with pytest.raises(OcrrError, match="not an existing folder"):
        Ledger(8, vectors_on_disk=tmp_path / "missing")


def test_substrate_with_vectors_on_disk_predicts_the_same(tmp_path):
    from ocrr.systems import Batch, make_system

    rng = np.random.default_rng(6)
    cent = rng.standard_normal((6, 16))
    lab = np.repeat(np.arange(6), 30)
    v = cent[lab] + 0.3 * rng.standard_normal((len(lab), 16))
    v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    names = [f"c{c}" for c in lab]
    seed, stream = Batch(v[::2], None, names[::2]), Batch(v[1::2], None, names[1::2])
    ram = make_system("substrate").fit(seed)
    disk = make_system(f"substrate:vectors_on_disk={tmp_path}").fit(seed)
    assert disk.ledger_.on_disk and "vectors_on_disk" not in disk.hyperparameters()
    for i in range(0, len(stream), 10):
        ram.correct(stream[i : i + 10])
        disk.correct(stream[i : i + 10])
    queries = Batch(v)
    assert disk.predict(queries) == ram.predict(queries)
    assert disk.ledger_.head == ram.ledger_.head


def test_load_and_open_with_vectors_on_disk(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((150, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # unit rows: the file's store takes no other
    led = Ledger(8)
    led.extend(x, [f"c{i % 3}" for i in range(150)], [None if i % 2 else f"t{i}" for i in range(150)])
    led.save(tmp_path / "l.db")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    back = Ledger.load(tmp_path / "l.db", vectors_on_disk=scratch)
    assert back.on_disk and back.head == led.head and np.array_equal(back.vectors, x)
    assert list(back) == list(led)
    with Ledger.open(tmp_path / "l.db", vectors_on_disk=scratch) as opened:
        assert opened.on_disk
        opened.append(x[0], "c0")
    again = Ledger.load(tmp_path / "l.db")
    assert len(again) == 151 and not again.on_disk and again.verify().ok
    assert list(scratch.iterdir()) == []


def test_open_with_vectors_on_disk_never_holds_the_rows_in_memory(tmp_path):
    """The open's check reads the file's rows straight into the vector file: the heap (numpy's
    buffers are traced) never holds a copy of them, as it does opening without a folder."""
    import tracemalloc

    rng = np.random.default_rng(8)
    x = rng.standard_normal((20_000, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    with Ledger.open(tmp_path / "l.db") as led:
        led.extend(x, [f"c{i % 5}" for i in range(len(x))])
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def peak(**kw) -> int:
        tracemalloc.start()
        try:
            with Ledger.open(tmp_path / "l.db", **kw) as opened:
                assert np.array_equal(opened.vectors, x)
                return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak() > x.nbytes  # (the measure sees rows held in memory)
    assert peak(vectors_on_disk=scratch) < x.nbytes / 2  # (a batch of rows as SQLite gives them, and the hashes)
