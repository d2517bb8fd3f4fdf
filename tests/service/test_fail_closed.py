"""Issue 25, point 3: tampering found by /verify or by the background check puts the service
in a read-only, unhealthy state (no corrections, no signed heads, no predictions from memory
that disagrees with the file, /health 503 naming the first bad entry) until restarted."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install 'ocrr[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.ledger.heads import Signer  # noqa: E402
from ocrr.ledger.scan import scan_file  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402

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
    # Truncate to entry 5 consistently: the nodes, the commit record, the chain head.
    conn = sqlite3.connect(path)
    head = conn.execute("SELECT hash FROM entries WHERE id = 4").fetchone()[0]
    conn.execute("DELETE FROM entries WHERE id >= 5")
    conn.execute("UPDATE meta SET value = 5 WHERE key = 'size'")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'chain_head'", (head,))
    conn.commit()
    conn.close()
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
