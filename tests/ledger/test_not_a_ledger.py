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
