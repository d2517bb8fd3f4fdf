"""/verify's cached result lasts only while the file is unchanged, however it was changed: bytes
edited by another program leave SQLite's data_version as it was, so the cache is keyed on the
file's identity, size and modification time too (and its -wal's)."""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.service.app import create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_bytes_edited_in_place_are_checked_again(tmp_path):
    """Before: the second /verify after the edit still answered the cached ``ok``."""
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0, verify_every=3600)
    seed(state)
    conn = sqlite3.connect(path)  # every entry into the database file itself, the -wal emptied
    assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    conn.close()
    with running(create_app(state)) as url:
        first = requests.get(f"{url}/verify", headers=AUTH).json()
        assert first["ok"]
        assert requests.get(f"{url}/verify", headers=AUTH).json() == first  # unchanged: the cached result
        data = path.read_bytes()
        at = data.index(b"my card has not arrived")  # entry 0's text, in place, same length
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(b"my card has not arrivED")
        again = requests.get(f"{url}/verify", headers=AUTH).json()
        assert not again["ok"] and again["first_bad"] == 0
        assert requests.get(f"{url}/health").status_code == 503


def test_an_unchanged_file_keeps_its_cached_result(tmp_path):
    """The check's own records (its checkpoint, the verification kept for the page) change the
    file; they do not make the next /verify rehash it."""
    state = open_state(tmp_path / "l.db", check_every=0, verify_every=3600)
    seed(state)
    with running(create_app(state)) as url:
        results = [requests.get(f"{url}/verify", headers=AUTH).json() for _ in range(3)]
        assert results[0]["ok"] and results[1] == results[0] == results[2]
