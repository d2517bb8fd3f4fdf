"""Storage's failures are not the client's fault. Rows inserted past the head or removed from
the tail behind the service's back make the next correction fail the service closed (503 with
the reason, /health 503, nothing appended or acknowledged); a storage failure that is no
tampering (a write the file system refuses) is a 503 with its message, never a 400, and the
service goes on once storage is back."""

from __future__ import annotations

import resource
import signal
import sqlite3
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.service.app import create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CORRECTION = {"texts": ["where is my new card"], "labels": ["card_arrival"]}


def _sql(path, *statements: str) -> list:
    conn = sqlite3.connect(path)
    try:
        out = [conn.execute(sql).fetchall() for sql in statements]
        conn.commit()
        return out
    finally:
        conn.close()


def _ids(path) -> list[int]:
    return [r[0] for r in _sql(path, "SELECT id FROM entries ORDER BY id")[0]]


@pytest.mark.parametrize(
    "tampering, said",
    [
        (
            "INSERT INTO entries SELECT {n}, label, text, vector, prev_hash, hash FROM entries WHERE id = 0",
            "a row was inserted at id {n} past the head {n}",
        ),
        ("DELETE FROM entries WHERE id >= {k}", "entries {k}..{last} were removed from storage"),
    ],
    ids=["row-past-the-head", "tail-removed"],
)
def test_tampered_storage_fails_the_service_closed_on_the_next_correction(tmp_path, tampering, said):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    n = len(state.substrate)
    with running(create_app(state)) as url:
        assert requests.post(f"{url}/correct", json=CORRECTION, headers=AUTH).status_code == 200
        n += 1
        assert requests.get(f"{url}/health").status_code == 200
        facts = {"n": n, "k": n - 3, "last": n - 1}
        _sql(path, tampering.format(**facts))
        stored = _ids(path)
        r = requests.post(f"{url}/correct", json=CORRECTION, headers=AUTH)
        assert r.status_code == 503, r.text
        assert said.format(**facts) in r.json()["detail"] and "read-only" in r.json()["detail"]
        health = requests.get(f"{url}/health")
        assert health.status_code == 503 and said.format(**facts) in health.json()["reason"]
        assert requests.post(f"{url}/correct", json=CORRECTION, headers=AUTH).status_code == 503
        assert requests.get(f"{url}/head").status_code == 503  # nothing signed over it
        assert _ids(path) == stored and len(state.substrate) == n  # nothing appended, nothing acknowledged


@pytest.mark.parametrize(
    "tampering, said",
    [
        (
            "INSERT INTO entries SELECT {n}, label, text, vector, prev_hash, hash FROM entries WHERE id = 0",
            "a row was inserted at id {n} past the head {n}",
        ),
        ("DELETE FROM entries WHERE id >= {k}", "entries {k}..{last} were removed from storage"),
    ],
    ids=["row-past-the-head", "tail-removed"],
)
def test_a_changed_tail_fails_the_service_closed_at_the_next_look_not_only_at_an_append(tmp_path, tampering, said):
    """/health takes in what other writers committed; a file that changed but ends elsewhere
    than the service holds is found there, before any correction is sent."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    n = len(state.substrate)
    with running(create_app(state)) as url:
        assert requests.get(f"{url}/health").status_code == 200
        facts = {"n": n, "k": n - 3, "last": n - 1}
        _sql(path, tampering.format(**facts))
        health = requests.get(f"{url}/health")
        assert health.status_code == 503 and said.format(**facts) in health.json()["reason"]
        assert requests.get(f"{url}/head").status_code == 503


@contextmanager
def _file_writes_refused():
    """Every write of this process to a file past its first byte fails (EFBIG), as on a full disk."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the error, not the signal that would kill us
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def test_a_write_storage_refuses_is_a_503_not_the_clients_fault(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0)
    seed(state)
    n = len(state.substrate)
    with running(create_app(state)) as url:
        with _file_writes_refused():
            r = requests.post(f"{url}/correct", json=CORRECTION, headers=AUTH)
        assert r.status_code == 503, r.text
        assert "could not write to ledger" in r.json()["detail"] and "nothing was appended" in r.json()["detail"]
        assert len(state.substrate) == n
        assert requests.get(f"{url}/health").status_code == 200  # no damage: storage failed, nothing was forged
        r = requests.post(f"{url}/correct", json=CORRECTION, headers=AUTH)  # storage is back
        assert r.status_code == 200, r.text
        assert r.json()["ids"] == [n]
