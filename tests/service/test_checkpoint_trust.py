"""The service trusts only checkpoint records signed by its own key (--key): a quick open
(workers, --quick-open) skips rehashing only what such a record vouches for; without a key it
rehashes everything, and says so once."""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("fastapi")
from service_helpers import TOKEN, HashingEncoder, signed_ledger  # noqa: E402

from ocrr.errors import OcrrError  # noqa: E402
from ocrr.service.config import ServiceConfig  # noqa: E402
from ocrr.service.state import build_state  # noqa: E402


@pytest.fixture
def keyed(tmp_path):
    """A seeded ledger whose service signed a checkpoint record of all 9 entries; its key file."""
    return signed_ledger(tmp_path, "example.com/service-records")


def _quick_state(path, log, **options):
    config = ServiceConfig(ledger=path, token=TOKEN, quick_open=True, **options)
    return build_state(config, encoder=HashingEncoder(), log=log)


def test_a_quick_open_with_the_key_trusts_its_signed_record(keyed):
    path, key, origin = keyed
    said: list[str] = []
    state = _quick_state(path, said.append, key=key, origin=origin)
    try:
        assert state.substrate.ledger.report.checked_from == 9
        assert not any("no --key" in m for m in said)
    finally:
        state.close()


def test_without_origin_the_key_signs_for_the_log_its_record_names(keyed):
    """No --origin: the service signs under the origin the key's record of signed heads names
    (the one `ocrr ledger keygen` made it for), as `ocrr ledger head` does, and so trusts its
    own checkpoint records."""
    path, key, origin = keyed
    state = _quick_state(path, lambda m: None, key=key)
    try:
        assert state.substrate.ledger.report.checked_from == 9
        assert state.signer is not None and state.signer.origin == origin
    finally:
        state.close()


def test_without_the_key_a_quick_open_rehashes_everything_and_says_so_once(keyed):
    path, _, _ = keyed
    conn = sqlite3.connect(path)  # an edit before the signed record, which only rehashing finds
    with conn:
        conn.execute("UPDATE entries SET label = 'forged' WHERE id = 2")
    conn.close()
    said: list[str] = []
    with pytest.raises(OcrrError, match="damaged at entry 2"):
        _quick_state(path, said.append)
    assert sum("no --key, so no checkpoint record can be authenticated" in m for m in said) == 1


def test_a_quick_open_that_started_from_no_record_says_why(keyed, tmp_path):
    """The line said once the ledger is checked names why a quick open rehashed every entry
    (at ten million entries, minutes more): its records are another log's (here the key was
    given another origin, with a record of signed heads of its own)."""
    from ocrr.service.server import _opened

    path, key, origin = keyed
    for given, why in [
        ("example.com/a-typo", "none of its checkpoint records is signed by --key under the origin example.com/a-typo"),
        (origin, None),
    ]:
        config = ServiceConfig(
            ledger=path, token=TOKEN, quick_open=True, key=key, origin=given, signed_state=tmp_path / f"{len(given)}"
        )
        state = build_state(config, encoder=HashingEncoder(), log=lambda _: None)
        try:
            said = _opened(config, state.substrate)
        finally:
            state.close()
        if why is None:
            assert said.endswith(": 9 entries, verified"), said
        else:
            assert why in said and "check --key and --origin" in said, said


def test_a_record_of_signed_heads_of_another_log_is_refused_before_the_ledger_is_read(keyed, monkeypatch):
    """The key's record of signed heads names the origin it signs under: given another
    origin, the service refuses at once, not after reading the ledger."""
    from ocrr.service import state as service_state

    path, key, _ = keyed

    def opened(*args, **kwargs):
        raise AssertionError("the ledger was opened before the record of signed heads was refused")

    monkeypatch.setattr(service_state, "open_substrate", opened)
    monkeypatch.setattr(service_state, "open_checked", opened)
    for workers in (1, 2):
        config = ServiceConfig(
            ledger=path, token=TOKEN, quick_open=True, key=key, origin="example.com/a-typo", workers=workers
        )
        with pytest.raises(OcrrError, match="not serving ledger .* signed by another key or for another log"):
            build_state(config, encoder=HashingEncoder(), log=lambda _: None, predicts=workers == 1)
