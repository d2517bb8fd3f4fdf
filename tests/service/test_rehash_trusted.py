"""``ocrr serve --quick-open --workers N`` takes the entries under its signed checkpoint on
trust to come up fast, then its supervisor rehashes every one of them from the memory the
workers answer from (``service/rehash_trusted.py``): an intact ledger gets a record saying so;
an entry edited in storage, which the quick open cannot see, fails the service closed."""

from __future__ import annotations

import signal
import sqlite3
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
requests = pytest.importorskip("requests")
from service_helpers import (  # noqa: E402
    TOKEN,
    free_port,
    open_state,
    running,
    serve_workers,
    signed_ledger,
    wait_for_workers,
)

from ocrr.ledger.chain import Chain  # noqa: E402
from ocrr.ledger.column_rehash import HeldColumns  # noqa: E402
from ocrr.service import rehash_trusted, shared_rows  # noqa: E402
from ocrr.service.rehash_trusted import RehashTrusted  # noqa: E402


def _columns(chain: Chain, rows: np.ndarray | None = None) -> HeldColumns:
    labels, texts, hashes = chain.stored_columns()
    blob, ends, none = texts.parts()
    rows = np.array(chain.vectors, dtype="<f4") if rows is None else rows
    return HeldColumns(
        len(chain), rows, labels.names, labels.codes().tobytes(), blob, ends.tobytes(), none, hashes.to_bytes()
    )


@pytest.fixture
def chain() -> Chain:
    rng = np.random.default_rng(3)
    c = Chain()
    for i in range(10_000):  # more than one chunk of the thread's
        c.append(rng.normal(size=4).astype(np.float32), f"c{i % 4}", None if i % 3 else f"text {i}")
    return c


def _run(columns: HeldColumns, count: int) -> tuple[RehashTrusted, list[str], list[dict]]:
    said: list[str] = []
    found: list[dict] = []
    job = RehashTrusted(columns, count, said.append, found.append, after=0).start()
    job.join(timeout=60)
    return job, said, found


def test_an_intact_prefix_is_found_intact(chain):
    job, said, found = _run(_columns(chain), 9_000)
    assert job.done == 9_000 and job.first_bad is None
    assert [r["ok"] for r in found] == [True] and "9,000 entries" in found[0]["reason"]
    assert any("are intact" in m for m in said)


def test_an_edited_row_is_found_as_damage_naming_it(chain):
    rows = np.array(chain.vectors, dtype="<f4")
    rows[8_500, 2] += 0.5
    job, said, found = _run(_columns(chain, rows), 9_000)
    assert job.first_bad == 8_500 and job.done == 8_192  # the chunks before it were intact
    assert [(r["ok"], r["first_bad"]) for r in found] == [(False, 8_500)]
    assert "entry 8500" in found[0]["reason"] and any("fails closed" in m for m in said)


def test_an_entry_past_the_count_is_not_the_threads_to_check(chain):
    rows = np.array(chain.vectors, dtype="<f4")
    rows[9_500, 0] += 1.0  # past the checkpoint: the open rehashed it already
    job, _, found = _run(_columns(chain, rows), 9_000)
    assert job.first_bad is None and [r["ok"] for r in found] == [True]


def test_the_supervisors_damage_that_cannot_be_recorded_stops_the_service(tmp_path, monkeypatch):
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(rehash_trusted.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    said: list[str] = []
    missing = tmp_path / "gone" / "l.db"  # (no such folder: nothing can be written there)
    record = rehash_trusted.recorded_in(missing, said.append)
    record({"ok": True, "size": 3, "first_bad": None, "reason": "intact", "time": 0.0})
    assert killed == []  # an intact outcome it cannot record is only not recorded
    record({"ok": False, "size": 3, "first_bad": 1, "reason": "entry 1: ...", "time": 0.0})
    assert killed == [(rehash_trusted.os.getpid(), signal.SIGTERM)]
    assert any("so the service stops" in m for m in said)


@pytest.fixture
def keyed(tmp_path):
    """A seeded ledger with a signed checkpoint record of all its entries, and its key."""
    return signed_ledger(tmp_path, "example.com/rehash-trusted")


def _edit_a_vector(path, entry: int) -> None:
    """One bit of ``entry``'s stored vector flipped, its length kept: a quick open's column
    checks pass, only rehashing finds it."""
    conn = sqlite3.connect(path)
    with conn:
        (vec,) = conn.execute("SELECT vector FROM entries WHERE id = ?", (entry,)).fetchone()
        conn.execute("UPDATE entries SET vector = ? WHERE id = ?", (bytes([vec[0] ^ 1]) + vec[1:], entry))
    conn.close()


@pytest.mark.parametrize("edited", [False, True])
def test_one_process_rehashes_what_its_quick_open_trusted_and_fails_closed_on_an_edit(keyed, edited):
    from ocrr.service.app import create_app

    path, key, origin = keyed
    if edited:
        _edit_a_vector(path, 4)
    said: list[str] = []
    state = open_state(path, quick_open=True, key=key, origin=origin, rehash_after=0)
    state.log = said.append
    assert state.trusted == 9  # the signed checkpoint's entries, not rehashed at open
    with running(create_app(state)) as url:
        deadline = time.monotonic() + 30
        while not any("are intact" in m or "fails closed" in m for m in said):
            assert time.monotonic() < deadline, said
            time.sleep(0.05)
        health = requests.get(f"{url}/health", timeout=5)
        if edited:
            assert health.status_code == 503 and health.json()["first_bad"] == 4
            answer = requests.post(
                f"{url}/predict", json={"vectors": [[0.1] * 64]}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert answer.status_code == 503 and "entry 4" in answer.text
        else:
            assert health.status_code == 200
    record = _latest_record(path)
    assert record is not None and record["ok"] is not edited and "took on trust" in record["reason"]


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[int, float]]:
    """(entries, seconds to wait) of each rehash pass the service starts; none runs."""
    from ocrr.service import app, server

    made: list[tuple[int, float]] = []

    class Recorded:
        def __init__(
            self, columns, count, log, found, rest=rehash_trusted.REST, after=rehash_trusted.WARM_UP, nodes=None
        ):
            made.append((count, after))

        def start(self):
            return self

        def stop(self) -> None:
            pass

    monkeypatch.setattr(app, "RehashTrusted", Recorded)
    monkeypatch.setattr(server, "RehashTrusted", Recorded)
    return made


@pytest.mark.parametrize("after", [None, 0.0, 2.5, 3600.0])
def test_one_process_starts_its_pass_after_the_configured_time(keyed, recorded, after):
    from ocrr.service.app import create_app

    path, key, origin = keyed
    given = {} if after is None else {"rehash_after": after}
    state = open_state(path, quick_open=True, key=key, origin=origin, **given)
    with running(create_app(state)):
        pass
    assert recorded == [(9, rehash_trusted.WARM_UP if after is None else after)]


@pytest.mark.skipif(not shared_rows.available(), reason="the workers share rows through Linux's memfd")
@pytest.mark.parametrize("after", [None, 0.0, 2.5])
def test_the_supervisor_starts_its_pass_after_the_configured_time(keyed, recorded, monkeypatch, after):
    """``--workers N``: the supervisor's pass, once its check is handed to the workers (none
    is started here: the supervision only hands the check over)."""
    from ocrr.service import server
    from ocrr.service.config import ServiceConfig

    def hand_over(workers, sock, target, config, log, balanced=False, prepare=None):
        handed = prepare()
        sock.close()
        return 0 if handed.trusted == 9 else 1

    monkeypatch.setattr(server, "supervise", hand_over)
    path, key, origin = keyed
    given = {} if after is None else {"rehash_after": after}
    config = ServiceConfig(
        ledger=path, token=TOKEN, port=0, workers=2, quick_open=True, key=key, origin=origin, **given
    )
    assert server.serve(config, log=lambda m: None) == 0
    assert recorded == [(9, rehash_trusted.WARM_UP if after is None else after)]


def _latest_record(path) -> dict | None:
    import json

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT report FROM verifications ORDER BY id DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return json.loads(row[0]) if row else None


def _serve_quick(path, key, origin):
    port = free_port()
    proc = serve_workers(path, port, "--quick-open", "--rehash-after", "0", "--key", str(key), "--origin", origin)
    url = f"http://127.0.0.1:{port}"
    wait_for_workers(url, proc, 2, time.monotonic() + 90)
    return proc, url


def _edit_an_inner_node(path) -> None:
    """The stored Merkle node over entries 4..7 zeroed: the tree a quick open builds from the
    leaves is still the signed one; the supervisor's open leaves that node to its pass."""
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute("UPDATE nodes SET hash = zeroblob(32) WHERE level = 2 AND idx = 1").rowcount == 1
    conn.close()


@pytest.mark.skipif(not shared_rows.available(), reason="the workers share rows through Linux's memfd")
@pytest.mark.parametrize("edit", [None, "a vector", "an inner node"])
def test_a_quick_opened_service_rehashes_what_it_trusted_and_fails_closed_on_an_edit(keyed, edit):
    path, key, origin = keyed
    edited = edit is not None
    if edit == "a vector":
        _edit_a_vector(path, 4)
    elif edit == "an inner node":
        _edit_an_inner_node(path)
    proc, url = _serve_quick(path, key, origin)
    try:
        deadline = time.monotonic() + 30
        while (record := _latest_record(path)) is None or "took on trust" not in record["reason"]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else record
            time.sleep(0.1)
        assert record["ok"] is not edited and record["first_bad"] == (4 if edited else None)
        if edit == "an inner node":
            assert "Merkle node (level 2, index 1) over entries 4..7" in record["reason"]
        if not edited:
            assert "stored Merkle nodes above them match" in record["reason"]
        deadline = time.monotonic() + 10  # every worker honours it within a second
        health = {}
        while {h.get("worker") for h in health.values()} != {0, 1} and time.monotonic() < deadline:
            answer = requests.get(f"{url}/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            h = answer.json()
            if answer.status_code == (503 if edited else 200):
                health[h.get("worker", len(health))] = h
            time.sleep(0.05)
        if edited:  # (an unhealthy worker names the entry, not itself)
            assert health and all(h["first_bad"] == 4 for h in health.values())
            for _ in range(4):
                answer = requests.post(
                    f"{url}/predict", json={"vectors": [[0.1] * 64]}, headers={"Authorization": f"Bearer {TOKEN}"}
                )
                assert answer.status_code == 503 and "entry 4" in answer.text
        else:
            assert {h["worker"] for h in health.values()} == {0, 1}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.skipif(not shared_rows.available(), reason="the workers share rows through Linux's memfd")
def test_the_shared_memory_the_workers_answer_from_is_what_is_rehashed(tmp_path):
    import os

    from ocrr.ledger.column_rehash import first_mismatch
    from ocrr.ledger.sqlite.store import DurableLedger
    from ocrr.systems.substrate.persistent import open_checked

    rng = np.random.default_rng(5)
    path = tmp_path / "l.db"
    rows = rng.normal(size=(3_000, 8))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    with DurableLedger.open(path, dim=8) as led:
        led.extend(rows, [f"c{i % 3}" for i in range(3_000)])
    supervisor = open_checked(path, verify="full")
    shared = shared_rows.publish(supervisor)
    supervisor.close()
    try:
        columns = shared.held_columns()
        assert first_mismatch(columns, 0, 3_000) is None
        assert np.asarray(columns.rows[10:12]).tobytes() == rows[10:12].tobytes()
        assert columns.rows[2_999:5_000].shape == (1, 8)
        os.pwrite(shared.rows_fd, b"\x01", 4 * 8 * 2_500 + 5)  # one byte of row 2,500, in the shared memory
        assert first_mismatch(columns, 0, 3_000) == 2_500
    finally:
        shared.close()
