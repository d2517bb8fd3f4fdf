"""Tampering found by /verify or by the background check puts the service
in a read-only, unhealthy state (no corrections, no signed heads, no predictions from memory
that disagrees with the file, /health 503 naming the first bad entry) until restarted."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import (  # noqa: E402
    TOKEN,
    cut_back,
    free_port,
    open_state,
    running,
    seed,
    serve_workers,
    session_on,
)

from ocrr.ledger.heads import Signer  # noqa: E402
from ocrr.ledger.sqlite.scan import scan_file  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402
from ocrr.service.config import ServiceConfig  # noqa: E402
from ocrr.service.metrics import Counters  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _tamper(path, sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


def _assert_read_only(url: str, first_bad: int) -> None:
    health = requests.get(f"{url}/health")
    assert health.status_code == 503
    assert health.json()["first_bad"] == first_bad and f"at entry {first_bad}" in health.json()["reason"]
    r = requests.post(f"{url}/correct", json={"texts": ["a new one"], "labels": ["balance"]}, headers=AUTH)
    assert r.status_code == 503 and f"damaged at entry {first_bad}" in r.json()["detail"]
    assert "restarts it" in r.json()["detail"]
    assert requests.post(f"{url}/predict", json={"texts": ["what is my balance"]}).status_code == 503
    assert requests.get(f"{url}/head").status_code == 503  # no head signed over the damaged file
    assert requests.get(f"{url}/proof/inclusion/0").status_code == 503


def test_tampering_found_by_verify_makes_the_service_read_only(tmp_path):
    path, key = tmp_path / "l.db", tmp_path / "key.pem"
    Signer.generate("example.com/fail-closed").save(key)
    state = open_state(path, key=key, check_every=0)
    seed(state)
    n = len(state.substrate)
    with running(create_app(state)) as url:
        assert requests.get(f"{url}/health").status_code == 200
        _tamper(path, "UPDATE entries SET label = 'transfer' WHERE id = 4")
        v = requests.get(f"{url}/verify", headers=AUTH).json()
        assert not v["ok"] and v["first_bad"] == 4
        _assert_read_only(url, 4)
        assert len(state.substrate) == n and state.substrate.ledger.commits <= 1  # nothing was added


def test_the_background_check_finds_tampering_without_a_request(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0.1)
    seed(state)  # after the open's check: the background check rehashes these entries
    with running(create_app(state)) as url:
        assert requests.get(f"{url}/health").status_code == 200
        _tamper(path, "UPDATE entries SET text = 'rewritten' WHERE id = 2")
        deadline = time.monotonic() + 20
        while requests.get(f"{url}/health").status_code == 200:
            assert time.monotonic() < deadline, "the background check never noticed"
            time.sleep(0.05)
        _assert_read_only(url, 2)


def test_a_file_whose_entries_were_removed_disagrees_with_memory(tmp_path):
    """The file is intact on its own (entries and commit record cut back together), but the
    service acknowledged more: its memory disagrees, so it must not answer from it."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    size = len(state.substrate)
    cut_back(path, 5)
    out = state.check_file("checkpoint")
    assert not out["ok"] and state.damage is not None
    assert size > 5 and out["first_bad"] in (5, None)


def test_a_vector_stored_as_text_is_located(tmp_path):
    """A vector re-typed as TEXT (same bytes) is named as the first bad entry, not a table error."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    state.close()
    _tamper(path, "UPDATE entries SET vector = CAST(vector AS TEXT) WHERE id = 3")
    report = scan_file(path)[0]
    assert not report and report.first_bad == 3 and "vector" in report.reason


def test_an_intact_file_keeps_serving(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0.05)
    seed(state)
    with running(create_app(state)) as url:
        for k in range(5):
            r = requests.post(f"{url}/correct", json={"texts": [f"new text {k}"], "labels": ["balance"]}, headers=AUTH)
            assert r.status_code == 200
            time.sleep(0.06)
        assert requests.get(f"{url}/verify", headers=AUTH).json()["ok"]
        assert requests.get(f"{url}/health").status_code == 200 and state.damage is None
        vec = np.ones((1, 64), np.float32).tolist()
        assert requests.post(f"{url}/predict", json={"vectors": vec}).status_code == 200


# -- shared damage, old entries, a changed file, small fixes ----------


def test_damage_found_by_one_worker_stops_every_worker(tmp_path):
    """/verify answered by one worker: every /health after it is 503, whichever worker answers,
    and /correct is refused by both (the damage is recorded in the file, where each looks)."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    state.close()
    port = free_port()
    proc = serve_workers(path, port, "--check-every", "0")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        on = [session_on(url, 0, deadline), session_on(url, 1, deadline)]
        assert all(s.get(f"{url}/health").status_code == 200 for s in on)
        _tamper(path, "UPDATE entries SET label = 'transfer' WHERE id = 4")
        v = on[0].get(f"{url}/verify", headers=AUTH).json()
        assert not v["ok"] and v["first_bad"] == 4
        for _ in range(20):  # a new connection each: either worker answers
            h = requests.get(f"{url}/health")
            assert h.status_code == 503 and h.json()["first_bad"] == 4
        for s in on:  # worker 1 never ran a check of its own
            r = s.post(f"{url}/correct", json={"vectors": [[1.0] * 64], "labels": ["balance"]}, headers=AUTH)
            assert r.status_code == 503 and "damaged at entry 4" in r.json()["detail"]
            assert s.get(f"{url}/head").status_code == 503
        for s in on:
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 9  # nothing added over the damage
    conn.close()


def test_damage_recorded_before_a_start_whose_check_passes_is_not_honoured(tmp_path):
    """An operator restored the file and restarted: the old damage record does not stop the new service."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    state.fail({"ok": False, "first_bad": 3, "reason": "test damage"})
    state.close()
    again = open_state(path, check_every=0)
    again.honour_shared_damage()
    assert again.damage is None
    again.substrate.ledger.record_verification({"ok": False, "first_bad": 1, "reason": "later", "time": 1.0})
    again.honour_shared_damage()
    assert again.damage is not None and again.damage["first_bad"] == 1
    again.close()


def test_damage_read_from_storage_is_said_to_come_from_there_in_the_services_shape(tmp_path):
    """A damage record is honoured (fail closed) whoever wrote it, but what the service repeats
    of it to anyone (/health, every 503) is an entry number or none and a bounded reason, said
    to come from the ledger's storage."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    state.honour_shared_damage()
    state.substrate.ledger.record_verification(
        {"ok": False, "first_bad": {"any": "json"}, "size": "many", "reason": "call us " * 200, "time": 1.0}
    )
    state.honour_shared_damage()
    assert state.damage is not None
    assert state.damage["first_bad"] is None and state.damage["size"] is None
    assert state.damage["reason"].startswith("recorded in the ledger's storage: call us")
    assert len(state.damage["reason"]) < 600
    state.close()


def test_the_background_check_rehashes_old_entries_in_turn(tmp_path):
    """An entry before the last checkpoint, edited: found by the background check's rolling
    slice within ceil(entries / slice) ticks, without any /verify."""
    path = tmp_path / "l.db"
    signer = Signer.generate("example.com/fail-closed-test")  # only signed checkpoint records are trusted
    signer.save(tmp_path / "key")
    state = open_state(path, check_every=0.1, key=tmp_path / "key", origin=signer.origin)
    seed(state)
    state.substrate.ledger.verify("full")  # a checkpoint after every entry: all of them are "old"
    assert scan_file(path, "checkpoint", (signer.vkey,))[0].checked_from == len(state.substrate) == 9
    state.check_slice = 2  # 5 ticks cover the 9 entries
    with running(create_app(state)) as url:
        assert requests.get(f"{url}/health").status_code == 200
        time.sleep(0.35)  # a few ticks go by: the slice is somewhere in the middle
        _tamper(path, "UPDATE entries SET text = 'rewritten' WHERE id = 1")
        deadline = time.monotonic() + 5  # well within 5 ticks of 0.1 s, plus slack
        while requests.get(f"{url}/health").status_code == 200:
            assert time.monotonic() < deadline, "the background check never noticed"
            time.sleep(0.05)
        _assert_read_only(url, 1)


def test_a_slice_finds_a_rewritten_hash_and_a_removed_entry(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    led = state.substrate.ledger
    assert led.check_slice(0, 9) is None
    _tamper(path, "UPDATE entries SET hash = zeroblob(32) WHERE id = 8")
    assert led.check_slice(0, 9)[0] == 8
    _tamper(path, "DELETE FROM entries WHERE id = 5")
    assert led.check_slice(0, 9)[0] == 5
    state.close()


def test_verify_checks_again_once_the_file_changed(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0, verify_every=3600)
    seed(state)
    with running(create_app(state)) as url:
        first = requests.get(f"{url}/verify", headers=AUTH).json()
        assert first["ok"]
        again = requests.get(f"{url}/verify", headers=AUTH).json()
        assert again == first  # nothing changed (its own records do not count): the cached result
        _tamper(path, "UPDATE entries SET label = 'balance' WHERE id = 6")
        changed = requests.get(f"{url}/verify", headers=AUTH).json()
        assert not changed["ok"] and changed["first_bad"] == 6
        assert requests.get(f"{url}/health").status_code == 503


def test_503_is_counted_by_its_status():
    counters = Counters(["/health"])
    counters.request("/health", 503, 0.001)
    assert counters.totals()["requests"] == {("/health", 503): 1}


def test_the_startup_line_says_https_with_tls(tmp_path, monkeypatch):
    import ocrr.service.server as server

    path = tmp_path / "l.db"
    seed_state = open_state(path, check_every=0)
    seed(seed_state)
    seed_state.close()

    class NotRun:  # the test reads the start-up line; no server, no TLS files
        started = True

        def __init__(self, config):
            pass

        def run(self):
            pass

    monkeypatch.setattr(server.uvicorn, "Server", NotRun)
    monkeypatch.setattr(server, "with_header_deadline", lambda uv, config: None)  # it loads the TLS files
    monkeypatch.setattr(server, "check_tls_files", lambda cert, key: None)  # and so does this
    lines: list[str] = []
    config = ServiceConfig(ledger=path, token=TOKEN, port=free_port(), tls_cert="c.pem", tls_key="k.pem")
    assert server.serve(config, log=lines.append) == 0
    page = [line for line in lines if "review page" in line]
    assert page and page[0].startswith("review page: https://") and "API: https://" in page[0]


def test_the_entry_schema_names_the_genesis_value():
    from ocrr.service.audit_routes import EntryOut

    text = EntryOut.model_fields["prev_hash"].description
    assert "zero bytes" not in text and "ocrr-ledger-genesis-v1" in text
