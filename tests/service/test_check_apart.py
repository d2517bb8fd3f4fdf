"""The quick check of a whole ledger file, run in a child process, gives the report the same
check run in the worker gives: on an intact file, on a signed file whose checkpoint it trusts,
on every kind of damage; a file it cannot read is one clear error, not a report."""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")

from service_helpers import cut_back, open_state, seed, signed_ledger  # noqa: E402

from ocrr.errors import OcrrError  # noqa: E402
from ocrr.service import check_apart  # noqa: E402


def in_process(led):
    return led.scan("checkpoint", rows=False)[0]


def test_an_intact_file_gives_the_report_of_the_check_in_process(tmp_path):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    led = state.substrate.ledger
    report = check_apart.quick_check(led)
    assert report and report == in_process(led)
    assert report.size == len(led) and report.checked_from == 0  # unsigned: every entry rehashed
    state.close()


def test_a_signed_checkpoint_is_trusted_as_in_process(tmp_path):
    path, key, origin = signed_ledger(tmp_path, "check-apart.invalid/log")
    state = open_state(path, key=key, origin=origin, check_every=0)
    led = state.substrate.ledger
    report = check_apart.quick_check(led)
    assert report == in_process(led) and report.checked_from > 0
    state.close()


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE entries SET label = label || 'x' WHERE id = 3",
        "UPDATE nodes SET hash = zeroblob(32) WHERE level = 0 AND idx = 1",
        "DELETE FROM entries WHERE id = 4",
    ],
)
def test_damage_gives_the_report_of_the_check_in_process(tmp_path, edit):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    led = state.substrate.ledger
    conn = sqlite3.connect(tmp_path / "l.db")
    with conn:
        assert conn.execute(edit).rowcount == 1
    conn.close()
    report = check_apart.quick_check(led)
    assert not report and report == in_process(led)
    state.close()


def test_a_cut_back_file_gives_the_report_of_the_check_in_process(tmp_path):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    cut_back(tmp_path / "l.db", 5)
    led = state.substrate.ledger
    assert check_apart.quick_check(led) == in_process(led)
    state.close()


def test_the_check_runs_in_another_process(tmp_path, monkeypatch):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    led = state.substrate.ledger

    def not_here(*args, **kwargs):
        raise AssertionError("the file was read in this process")

    monkeypatch.setattr(check_apart, "scan_location", not_here)
    monkeypatch.setattr(type(led), "scan", not_here)
    assert check_apart.quick_check(led).size == len(led)
    state.close()


def test_a_file_gone_is_one_clear_error(tmp_path):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    (tmp_path / "l.db").rename(tmp_path / "moved.db")
    with pytest.raises(OcrrError, match=r"ended with status 2: ledger file .*l\.db does not exist"):
        check_apart.quick_check(state.substrate.ledger)
    state.close()
