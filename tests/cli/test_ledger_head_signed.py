"""`ocrr ledger head --key` signs only heads that extend what the key signed (the service's record)."""

from __future__ import annotations

import shutil

from ocrr.cli.main import main
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
