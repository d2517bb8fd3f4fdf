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
