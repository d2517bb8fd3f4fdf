"""Every entry the service sends is checked against what it holds before it leaves: a row edited
or removed in storage behind a running service is never served with 200 (nor cached as
immutable); the service fails closed instead (503 with the reason, /health 503). Intact rows
are served as before."""

from __future__ import annotations

import base64
import sqlite3

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.ledger.tiles import entry_bundle  # noqa: E402
from ocrr.ledger.verify import entry_bytes, leaf_hash  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# The three endpoints that send entries; the seeded ledger holds 9, entry 4 among them.
SERVING = ["/proof/inclusion/4/entry", "/tile/entries/000.p/9", "/corrections/recent"]


def _tamper(path, sql: str) -> None:
    """Change the ledger file as another program would, with plain sqlite3."""
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


def _assert_failed_closed(url: str, answer: requests.Response, entry: int) -> None:
    assert answer.status_code == 503, answer.text
    assert f"entry {entry}" in answer.json()["detail"] and "restarts it" in answer.json()["detail"]
    assert "immutable" not in answer.headers.get("cache-control", "")
    health = requests.get(f"{url}/health")
    assert health.status_code == 503 and health.json()["first_bad"] == entry
    for path in SERVING:  # nothing is served any more, whatever the range
        assert requests.get(f"{url}{path}", headers=AUTH).status_code == 503, path


@pytest.mark.parametrize("path", SERVING)
def test_an_entry_edited_in_storage_is_not_served(tmp_path, path):
    """Before: 200 with the edited label, /health 200."""
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    with running(create_app(state)) as url:
        assert requests.get(f"{url}{path}", headers=AUTH).status_code == 200
        _tamper(tmp_path / "l.db", "UPDATE entries SET label = 'transfer' WHERE id = 4")
        _assert_failed_closed(url, requests.get(f"{url}{path}", headers=AUTH), 4)
        assert state.substrate.ledger.last_verification()["first_bad"] == 4  # recorded for the other workers


@pytest.mark.parametrize("path", SERVING)
def test_an_entry_removed_from_storage_is_a_503_not_a_500(tmp_path, path):
    """Before: the entry: 500; the bundle: 200 with 8 entries; the recent ones: 200 without it."""
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    with running(create_app(state)) as url:
        _tamper(tmp_path / "l.db", "DELETE FROM entries WHERE id = 4")
        _assert_failed_closed(url, requests.get(f"{url}{path}", headers=AUTH), 4)


def test_a_full_entry_bundle_with_a_row_missing_is_not_served_as_immutable(tmp_path):
    """Before: 200, ``Cache-Control: ... immutable`` for a year, 255 entries."""
    state = open_state(tmp_path / "l.db", check_every=0)
    vecs = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    state.substrate.correct(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), [f"l{k % 3}" for k in range(300)])
    with running(create_app(state)) as url:
        intact = requests.get(f"{url}/tile/entries/000", headers=AUTH)
        assert intact.status_code == 200 and "immutable" in intact.headers["cache-control"]
        _tamper(tmp_path / "l.db", "DELETE FROM entries WHERE id = 100")
        _assert_failed_closed(url, requests.get(f"{url}/tile/entries/000", headers=AUTH), 100)


def test_a_label_that_is_not_utf8_is_not_served(tmp_path):
    """Before: 500 (the row could not even be read)."""
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    with running(create_app(state)) as url:
        _tamper(tmp_path / "l.db", "UPDATE entries SET label = CAST(X'ff' AS TEXT) WHERE id = 4")
        _assert_failed_closed(url, requests.get(f"{url}/tile/entries/000.p/9", headers=AUTH), 4)


def test_intact_entries_are_served_as_stored(tmp_path):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    led = state.substrate.ledger
    rows = list(led.read_entries(0, len(led)))
    stored = [entry_bytes(i, label, text, vec, prev) for i, label, text, vec, prev, _ in rows]
    with running(create_app(state)) as url:
        bundle = requests.get(f"{url}/tile/entries/000.p/9", headers=AUTH)
        assert bundle.status_code == 200 and bundle.content == entry_bundle(stored)
        assert bundle.headers["cache-control"] == "public, max-age=60"
        for i in (0, 4, 8):
            got = requests.get(f"{url}/proof/inclusion/{i}/entry", headers=AUTH).json()
            assert got["entry"]["bytes"] == _b64(stored[i]) and leaf_hash(stored[i]) == led.tree.node(0, i)
        recent = requests.get(f"{url}/corrections/recent", headers=AUTH).json()["corrections"]
        assert [(c["id"], c["label"], c["text"]) for c in recent] == [r[:3] for r in reversed(rows)]
        assert requests.get(f"{url}/health").status_code == 200 and state.damage is None


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")
