# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""A new label that would be a class apart from the one it looks like (blank, padded with
whitespace, holding a control character) is refused at every store's append door, the
library's included; labels an older ledger already holds are served as stored."""

from __future__ import annotations

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger import Ledger
from ocrr.ledger.labels import label_fault
from ocrr.ledger.postgres.store import PostgresLedger
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.substrate.persistent import open_substrate

ROWS = np.eye(4, dtype=np.float32)
REFUSED = [
    ("   ", "is blank"),
    ("refund ", "starts or ends with whitespace, which would make it a class apart from 'refund'; strip it"),
    ("refund\n", "starts or ends with whitespace"),
    ("\u00a0refund", "starts or ends with whitespace"),
    ("re\x07fund", r"holds the control character U\+0007"),
]


@pytest.mark.parametrize("label, why", REFUSED, ids=[repr(x[0]) for x in REFUSED])
def test_the_rule(label, why):
    assert label_fault(label) is not None
    assert label_fault("card arrival") is None and label_fault("réfund") is None  # inner spaces, any script


def _refuses(led) -> None:
    led.extend(ROWS[:1], ["before"], [None])
    for label, why in REFUSED:
        with pytest.raises(OcrrError, match=why) as refused:
            led.extend(ROWS[:2], ["ok", label], None)
        assert str(refused.value).startswith(f"the label of item 1 ({label!r}) ")
    led.extend(ROWS[1:2], ["after"], None)  # nothing of the refused batches was taken
    assert [row[1] for row in led.read_entries(0, len(led))] == ["before", "after"]


def test_a_ledger_file_refuses_them(tmp_path):
    with DurableLedger.open(tmp_path / "l.db", dim=4) as led:
        _refuses(led)


def test_a_database_refuses_them(pg_url):
    with PostgresLedger.open(pg_url, dim=4) as led:
        _refuses(led)


def test_the_library_refuses_them_and_serves_what_an_older_ledger_holds(tmp_path):
    old = Ledger(4)  # the in-memory chain checks no label rule: what an older version stored
    old.extend(ROWS[:2], ["refund ", "login"], None)
    old.save(tmp_path / "old.db")
    with open_substrate(tmp_path / "old.db") as sub:
        assert sub.predict(ROWS[:1]) == ["refund "]
        with pytest.raises(OcrrError, match="starts or ends with whitespace"):
            sub.correct(ROWS[2:3], ["refund "], None)
        assert len(sub) == 2


def test_a_file_backed_ledger_refuses_one_at_its_append_not_at_the_flush(tmp_path):
    with Ledger.open(tmp_path / "l.db", dim=4) as led:
        led.append(ROWS[0], "before", None)
        with pytest.raises(OcrrError, match="starts or ends with whitespace"):
            led.append(ROWS[1], "refund ", None)
        with pytest.raises(OcrrError, match="is blank"):
            led.extend(ROWS[1:3], ["ok", " "], None)
        led.append(ROWS[1], "after", None)
    with Ledger.open(tmp_path / "l.db") as led:
        assert led.labels == ("before", "after")


def test_a_single_string_is_not_taken_for_a_list_of_labels_or_texts(tmp_path):
    """ "ab" for two vectors was two labels, "a" and "b"."""
    with open_substrate(tmp_path / "l.db", dim=4) as sub:
        with pytest.raises(
            OcrrError, match=r"labels must be a list with one per vector, got a single string; pass \['ab'\]"
        ):
            sub.correct(ROWS[:2], "ab", None)
        with pytest.raises(OcrrError, match="texts must be a list with one per vector"):
            sub.correct(ROWS[:2], ["a", "b"], "xy")
        assert len(sub) == 0
