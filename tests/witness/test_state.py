"""The witness's state file read back as untrusted input, and opened by its owner only."""

from __future__ import annotations

import sqlite3

import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import Cosigner
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import leaf_hash
from ocrr.witness.request import AddCheckpoint
from ocrr.witness.state import Refused, WitnessState


@pytest.fixture
def log():
    tree = MerkleTree()
    for i in range(9):
        tree.append(leaf_hash(bytes([i])))
    return tree, Signer.generate("example.com/state-test")


def test_a_damaged_stored_checkpoint_fails_closed(tmp_path, log):
    tree, signer = log
    witness = Cosigner.generate("witness.example/w")
    state = WitnessState(tmp_path / "w.db", witness, {signer.origin: signer.vkey}, create=True)
    state.add_checkpoint(AddCheckpoint(0, [], signer.checkpoint(4, tree.root(4))))
    state.close()
    with sqlite3.connect(tmp_path / "w.db") as db:  # the disk (or someone) alters what was cosigned
        db.execute("UPDATE cosigned SET checkpoint = replace(checkpoint, '\n4\n', '\n04\n')")
    state = WitnessState(tmp_path / "w.db", witness, {signer.origin: signer.vkey})
    try:
        with pytest.raises(Refused, match="witness state is damaged") as refused:
            state.add_checkpoint(AddCheckpoint(4, tree.consistency_proof(4, 9), signer.checkpoint(9, tree.root())))
        assert refused.value.status == 500
    finally:
        state.close()


def test_another_witness_key_or_a_foreign_file_is_refused(tmp_path, log):
    _, signer = log
    logs = {signer.origin: signer.vkey}
    WitnessState(tmp_path / "w.db", Cosigner.generate("witness.example/w"), logs, create=True).close()
    with pytest.raises(OcrrError, match="belongs to the witness"):
        WitnessState(tmp_path / "w.db", Cosigner.generate("witness.example/w"), logs)
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    with pytest.raises(OcrrError, match="cannot open witness state"):
        WitnessState(tmp_path / "junk.db", Cosigner.generate("witness.example/w"), logs)


def test_log_options_name_the_origin_by_its_key():
    from ocrr.witness.config import logs_of, parse_log

    signer = Signer.generate("example.com/a=b")  # an origin may hold '='
    assert parse_log(signer.vkey) == (signer.origin, signer.vkey)
    assert parse_log(f"{signer.origin}={signer.vkey}") == (signer.origin, signer.vkey)
    with pytest.raises(OcrrError, match="is not the name of its key"):
        parse_log(f"example.com/other={signer.vkey}")
    with pytest.raises(OcrrError, match="two keys for the log"):
        logs_of([signer.vkey, Signer.generate(signer.origin).vkey])
    with pytest.raises(OcrrError, match="no log to witness"):
        logs_of([])


@pytest.mark.parametrize("kind", ["empty", "ledger", "emptied state"])
def test_an_existing_file_that_is_not_a_witness_state_is_refused_unchanged(tmp_path, log, kind):
    """Without --new-state, only a witness's own state is served: adopting an empty file, a
    ledger or a state whose identity is gone would start the witness afresh under its key."""
    import numpy as np

    from ocrr.ledger.sqlite.store import DurableLedger

    _, signer = log
    logs = {signer.origin: signer.vkey}
    path = tmp_path / "s.db"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "ledger":
        with DurableLedger.open(path, dim=4) as led:
            led.extend(np.eye(4, dtype=np.float32), ["a", "b", "c", "d"], None)
    else:
        WitnessState(path, Cosigner.generate("witness.example/w"), logs, create=True).close()
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM witness")
    before = path.read_bytes()
    with pytest.raises(OcrrError, match="is not a witness's state .*created with --new-state"):
        WitnessState(path, Cosigner.generate("witness.example/w"), logs)
    assert path.read_bytes() == before
    if kind == "ledger":
        with sqlite3.connect(path) as db:
            assert not {"witness", "cosigned", "conflicts"} & {
                r[0] for r in db.execute("SELECT name FROM sqlite_master")
            }
