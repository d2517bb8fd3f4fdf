"""A file that is no SQLite database at all is named for what it is, not reported as a damaged ledger."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.sqlite.scan import scan_file


def test_a_csv_is_not_an_ocrr_ledger(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\nwhere is my card,card_arrival\n")
    with pytest.raises(OcrrError, match="is not an ocrr ledger: it is not an SQLite file"):
        scan_file(path)


def test_ledger_verify_on_a_csv_says_so_in_one_line(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\nwhere is my card,card_arrival\n")
    done = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "ledger", "verify", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not an ocrr ledger" in done.stderr and "damaged" not in done.stdout
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_schema_whose_bytes_are_not_text_is_damage_not_a_traceback(tmp_path):
    """Damaged schema bytes reach SQLite's error message, which Python's sqlite3 cannot decode:
    the check reports the file damaged, and an open refuses it, each in SQLite's terms."""
    import numpy as np

    from ocrr.ledger.sqlite.store import DurableLedger

    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=4) as led:
        led.extend(np.eye(4, dtype=np.float32), ["a", "b", "c", "d"], None)
    data = bytearray(path.read_bytes())
    data[data.index(b"CREATE TABLE") + 2] = 0x82  # not UTF-8
    path.write_bytes(bytes(data))
    report, scan = scan_file(path)
    assert not report.ok and scan is None and "its schema is damaged" in report.reason
    done = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "ledger", "verify", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "its schema is damaged" in done.stdout and "Traceback" not in done.stderr
    with pytest.raises(OcrrError, match=r"cannot open ledger .*l\.db \(its schema is damaged"):
        DurableLedger.open(path)
