"""Opening a large ledger checks its stored rows a block at a time: the first bad row is
still named by its entry number, wherever it lies past the first block."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger import Ledger
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.substrate.persistent import open_substrate

DIM = 8
TOKEN = "6mHUzGkyPNMnygbUr3uoogiZHOSBdpMp7sykJnsJ3qI"  # secrets.token_urlsafe(32), as one should be made


def _saved(path, vecs: np.ndarray) -> None:
    """A ledger file holding ``vecs`` as a program that skips the row rules writes it: a
    durable ledger's appends refuse a non-unit row; the in-memory chain takes any finite
    row, and ``save`` writes it whole."""
    chain = Ledger(DIM)
    chain.extend(vecs, [f"l{i % 3}" for i in range(len(vecs))], None)
    chain.save(path)


@pytest.mark.parametrize("bad", [0, 4095, 4096, 9000])
def test_a_stored_row_that_is_not_unit_is_named_by_its_entry(tmp_path, bad):
    rng = np.random.default_rng(bad)
    vecs = rng.normal(size=(9001, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[bad] *= 2  # written by a program that skips the row rules
    if bad < 9000:
        vecs[-1] *= 3  # a later bad row is not the one named
    _saved(tmp_path / "l.db", vecs)
    with pytest.raises(OcrrError, match=rf"l\.db: entry {bad} has norm 2; .*Restore it from a backup"):
        open_substrate(tmp_path / "l.db")


def test_the_supervisor_checks_the_ledger_without_building_a_substrate(tmp_path):
    from ocrr.service.config import ServiceConfig
    from ocrr.service.state import build_state

    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(500, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    with DurableLedger.open(tmp_path / "l.db", dim=DIM) as led:
        led.extend(vecs, [f"l{i % 3}" for i in range(len(vecs))], None)
    config = ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, workers=2)
    state = build_state(config, log=lambda m: None, predicts=False)
    try:
        assert len(state.substrate) == 500  # checked and counted
        assert state.substrate.system.ledger_ is None  # no copy of the rows learnt: the workers build theirs
    finally:
        state.close()
    _saved(tmp_path / "bad.db", np.concatenate([vecs, 2 * vecs[:1]]))
    with pytest.raises(OcrrError, match=r"bad\.db: entry 500 has norm 2"):  # the stored rows' rules still hold
        build_state(ServiceConfig(ledger=tmp_path / "bad.db", token=TOKEN, workers=2), predicts=False)


def _checkpointed(path, vecs: np.ndarray, later: np.ndarray | None, signer) -> None:
    """``vecs`` saved as ``_saved`` does, a checkpoint over them signed by ``signer`` (a full
    check records it), then ``later`` rows appended through the durable ledger's door."""
    _saved(path, vecs)
    with DurableLedger.open(path, signer=signer):
        pass
    if later is not None:
        with DurableLedger.open(path) as led:
            led.extend(later, ["l0"] * len(later), None)


@pytest.mark.parametrize("opens", ["open_checked", "open_substrate"])
@pytest.mark.parametrize("bad", [None, 3, 130, 599])
def test_a_quick_open_checks_each_stored_row_once_and_still_names_a_bad_one(tmp_path, monkeypatch, bad, opens):
    """The quick open's readers check the rows' rules on each block they read (the open then
    checks only the rows read after the checkpoint), both where no substrate learns them
    (the supervisor of ``ocrr serve --workers N``) and where one does (one process); a bad
    row among them leaves every row to the store's own check, which names it as before."""
    from ocrr.ledger import held
    from ocrr.ledger.heads import Signer
    from ocrr.ledger.sqlite import prefix as sqlite_prefix
    from ocrr.systems.substrate import persistent

    monkeypatch.setattr(sqlite_prefix, "_PREFIX_BLOCK", 64)  # the prefix spans several blocks
    checked: list[tuple[int, int]] = []
    check = held.check_stored

    def counted(vecs, where, first=0):
        checked.append((first, len(vecs)))
        check(vecs, where, first)

    monkeypatch.setattr(held, "check_stored", counted)
    open_ = getattr(persistent, opens)
    signer = Signer.generate("example.com/rows-once")
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(800, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    path = tmp_path / "l.db"
    if bad is None:
        _checkpointed(path, vecs[:600], vecs[600:], signer)
        opened = open_(path, verify="checkpoint", signer=signer)
        try:
            assert len(opened) == 800
            learnt = opened.system.ledger_
            if opens == "open_substrate":  # its substrate learnt every row, the checked ones too
                assert learnt is not None and np.array_equal(learnt.vectors[:800], vecs)
            else:
                assert learnt is None
        finally:
            opened.close()
        assert checked == [(600, 200)]  # the 600 under the checkpoint were checked as they were read
        return
    vecs[bad] *= 2  # written by a program that skips the row rules, then checkpointed
    _checkpointed(path, vecs[:600], None, signer)
    with pytest.raises(OcrrError, match=rf"l\.db: entry {bad} has norm 2; .*Restore it from a backup"):
        open_(path, verify="checkpoint", signer=signer)
    assert checked == [(0, 600)]
