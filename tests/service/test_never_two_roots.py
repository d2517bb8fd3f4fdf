"""A service restarted on a rewound or forked ledger signs no second root for a size it signed.

The service signs size N; its ledger file is then replaced by an older copy (or by a copy of
the same size with other entries) and the service restarted. Whatever it then answers (``/head``,
``/checkpoint``, ``/correct``), no signature may give a size <= N a root other than the one
signed before: the start is refused, naming what happened and what to do.
"""

from __future__ import annotations

import shutil
import sqlite3
import time

import pytest
import requests
from service_helpers import TOKEN, HashingEncoder, free_port, open_state, running, seed, serve_workers

from ocrr.errors import LedgerIntegrityError
from ocrr.ledger.heads import Signer, verify_checkpoint, verify_head
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.service.app import create_app

ORIGIN = "example.com/never-two-roots"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def correct(url: str, j: int) -> dict:
    body = {"texts": [f"correction number {j}"], "labels": ["balance"]}
    r = requests.post(f"{url}/correct", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()["head"]


def copy_ledger(src, dst) -> None:
    """A consistent copy of a ledger file in use (SQLite's backup API), as an operator's backup."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def signed_heads(url: str, vkey: str, more: int) -> dict[int, bytes]:
    """Every (size, root) a served ledger signs: /head, /checkpoint, then ``more`` corrections."""
    got = {}
    head = verify_head(requests.get(f"{url}/head").json(), vkey)
    got[head.size] = head.root
    _, size, root = verify_checkpoint(requests.get(f"{url}/checkpoint").text, vkey)
    got[size] = root
    for j in range(more):
        text = f"after the restart {j}"  # sent as a vector too: `ocrr serve` here runs no encoder
        body = {"vectors": HashingEncoder().encode([text]).tolist(), "texts": [text], "labels": ["transfer"]}
        r = requests.post(f"{url}/correct", json=body, headers=AUTH)
        if r.status_code == 200:
            head = verify_head(r.json()["head"], vkey)
            got[head.size] = head.root
    return got


@pytest.fixture
def signed_then_rewound(tmp_path):
    """A served ledger signed up to size N; an older copy (size N - 4) and a fork (size N,
    other entries after N - 4), both intact ledgers. Returns (folder, key, N, {size: root})."""
    signer = Signer.generate(ORIGIN)
    key = tmp_path / "key.pem"
    signer.save(key)
    path = tmp_path / "ledger.db"
    state = open_state(path, key=key, origin=ORIGIN)
    seed(state)
    signed: dict[int, bytes] = {}
    with running(create_app(state)) as url:
        for j in range(3):
            head = verify_head(correct(url, j), signer.vkey)
            signed[head.size] = head.root
        copy_ledger(path, tmp_path / "older.db")
        for j in range(3, 7):
            head = verify_head(correct(url, j), signer.vkey)
            signed[head.size] = head.root
        n = max(signed)
        _, size, root = verify_checkpoint(requests.get(f"{url}/checkpoint").text, signer.vkey)
        assert (size, root) == (n, signed[n])
    state.close()
    shutil.copy(tmp_path / "older.db", tmp_path / "forked.db")
    with DurableLedger.open(tmp_path / "forked.db") as forked:
        texts = [f"another history {j}" for j in range(n - len(forked))]
        forked.extend(HashingEncoder().encode(texts), ["card_arrival"] * len(texts), texts)
        assert len(forked) == n and forked.root() != signed[n]
    return tmp_path, key, signer.vkey, n, signed


@pytest.mark.parametrize("copy", ["older.db", "forked.db"])
def test_restart_on_a_rewound_or_forked_ledger_signs_no_other_root(signed_then_rewound, copy):
    folder, key, vkey, n, signed = signed_then_rewound
    shutil.copy(folder / copy, folder / "ledger.db")  # the operator (or an attacker) puts a copy back
    for side in ("-wal", "-shm"):
        (folder / f"ledger.db{side}").unlink(missing_ok=True)
    try:
        state = open_state(folder / "ledger.db", key=key, origin=ORIGIN)
    except LedgerIntegrityError as refused:
        message = str(refused)
    else:  # what the service would sign over this copy: none of it may contradict what it signed
        with running(create_app(state)) as url:
            after = signed_heads(url, vkey, more=n)
        state.close()
        forks = {size for size, root in after.items() if size in signed and root != signed[size]}
        assert not forks, f"signed other roots for sizes {sorted(forks)} it had signed before"
        pytest.fail("the service started on a rewound or forked ledger (it must refuse to sign it)")
    what = "rewound" if copy == "older.db" else "forked"
    assert what in message and f"size {n}" in message
    assert "Restore the newer copy" in message and "key.pem.signed aside" in message and "fork" in message


def test_restart_with_workers_is_refused(signed_then_rewound):
    folder, key, vkey, n, signed = signed_then_rewound
    shutil.copy(folder / "older.db", folder / "ledger.db")
    for side in ("-wal", "-shm"):
        (folder / f"ledger.db{side}").unlink(missing_ok=True)
    port = free_port()
    proc = serve_workers(folder / "ledger.db", port, "--key", str(key), "--origin", ORIGIN, workers=2)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:  # if it serves at all, nothing it signs may contradict what was signed
                after = signed_heads(f"http://127.0.0.1:{port}", vkey, more=n)
            except requests.ConnectionError:
                time.sleep(0.2)
                continue
            assert not {s for s, root in after.items() if s in signed and root != signed[s]}
            pytest.fail("`ocrr serve --workers 2` started on a rewound ledger")
        assert proc.returncode == 2
        err = proc.stderr.read()
        assert "rewound" in err and "Restore the newer copy" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_two_services_with_one_key_never_sign_two_roots(tmp_path):
    """Two ledgers signed with one key and origin (a copied key folder, a copied ledger): once
    their histories part, the second to sign fails closed (503), and says why."""
    signer = Signer.generate(ORIGIN)
    key = tmp_path / "key.pem"
    signer.save(key)
    states = [open_state(tmp_path / name, key=key, origin=ORIGIN) for name in ("a.db", "b.db")]
    for state in states:
        seed(state)  # the same entries: one log so far
    with running(create_app(states[0])) as a, running(create_app(states[1])) as b:
        assert requests.get(f"{a}/head").json()["root"] == requests.get(f"{b}/head").json()["root"]
        signed = verify_head(correct(a, 0), signer.vkey)  # a's history goes on
        body = {"texts": ["another history"], "labels": ["balance"]}
        r = requests.post(f"{b}/correct", json=body, headers=AUTH)  # committed in b, but not signed
        assert r.status_code == 503 and "forked" in r.json()["detail"], r.text
        assert requests.get(f"{b}/head").status_code == 503
        assert requests.get(f"{b}/checkpoint").status_code == 503
        assert requests.get(f"{b}/health").status_code == 503
        assert verify_head(requests.get(f"{a}/head").json(), signer.vkey).root == signed.root
    for state in states:
        state.close()
