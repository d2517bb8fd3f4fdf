"""`ocrr ledger head --key` signs only heads that extend what the key signed (the service's record),
and only under the origin the key was made for (the record names it)."""

from __future__ import annotations

import shutil

from ocrr.cli.main import main
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.sqlite.store import DurableLedger

ORIGIN = "example.com/cli-signed"


def _ledger(path, n: int) -> None:
    import numpy as np

    with DurableLedger.open(path) as led:
        for i in range(len(led), n):
            v = np.zeros(4, np.float32)
            v[i % 4] = 1.0
            led.append(v, f"label-{i}")


def test_head_of_a_rewound_copy_is_refused(tmp_path, capsys):
    key = tmp_path / "k.pem"
    assert main(["ledger", "keygen", str(key), "--origin", ORIGIN]) == 0
    _ledger(tmp_path / "l.db", 3)
    shutil.copy(tmp_path / "l.db", tmp_path / "old.db")
    _ledger(tmp_path / "l.db", 6)
    head = ["ledger", "head", "--key", str(key), "--origin", ORIGIN]
    assert main([*head, str(tmp_path / "l.db")]) == 0
    assert (tmp_path / "k.pem.signed").exists()
    capsys.readouterr()
    assert main([*head, str(tmp_path / "old.db")]) == 2
    err = capsys.readouterr().err
    assert "rewound" in err and "size 6" in err and "Traceback" not in err
    # a record elsewhere (--signed-state) is another record: the copy is signed there
    assert main([*head, str(tmp_path / "old.db"), "--signed-state", str(tmp_path / "other.signed")]) == 0


def test_a_key_signs_under_the_origin_it_was_made_for(tmp_path, capsys):
    key, ledger = tmp_path / "k.pem", tmp_path / "l.db"
    assert main(["ledger", "keygen", str(key), "--origin", ORIGIN]) == 0
    vkey = capsys.readouterr().out.strip()
    _ledger(ledger, 3)
    assert main(["ledger", "head", str(ledger), "--key", str(key), "--checkpoint"]) == 0  # no --origin
    assert verify_checkpoint(capsys.readouterr().out, vkey)[:2] == (ORIGIN, 3)
    record = (tmp_path / "k.pem.signed").read_bytes()
    _ledger(ledger, 5)
    assert main(["ledger", "head", str(ledger), "--key", str(key), "--origin", "example.com/other"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --origin example.com/other is not the log the key {key} signs for: its record of signed heads "
        f"{key}.signed names {ORIGIN}; drop --origin, or make a key for example.com/other with "
        "`ocrr ledger keygen NEW.pem --origin example.com/other`\n"
    )
    assert (tmp_path / "k.pem.signed").read_bytes() == record  # nothing signed
    # a record elsewhere (--signed-state) starts under the origin the key's own record names
    argv = ["ledger", "head", str(ledger), "--key", str(key), "--signed-state", str(tmp_path / "o.signed")]
    assert main([*argv, "--checkpoint"]) == 0
    assert verify_checkpoint(capsys.readouterr().out, vkey)[:2] == (ORIGIN, 5)


def test_keygen_refuses_a_record_left_by_an_earlier_key(tmp_path, capsys):
    key = tmp_path / "k.pem"
    assert main(["ledger", "keygen", str(key), "--origin", ORIGIN]) == 0
    key.unlink()  # the key gone, its record left
    record = (tmp_path / "k.pem.signed").read_bytes()
    assert main(["ledger", "keygen", str(key), "--origin", ORIGIN]) == 2
    assert "k.pem.signed is the record of what an earlier key" in capsys.readouterr().err
    assert not key.exists() and (tmp_path / "k.pem.signed").read_bytes() == record
