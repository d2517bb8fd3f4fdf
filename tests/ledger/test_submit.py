"""``DurableLedger.submit``: appends queued without a waiting thread are committed in groups,
each told once with its ids (or the error that failed it), in the same file as ``extend``
writes; a failed check fails only its own items; close commits what was submitted first."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 4


def _vec(i: int) -> np.ndarray:
    v = np.random.default_rng(i).normal(size=(1, DIM)).astype(np.float32)
    return v / np.linalg.norm(v)  # a durable ledger takes unit rows only


class Told:
    """Collects ``done`` calls: {item: (ids, error)}, and the thread each came from."""

    def __init__(self):
        self.got: dict[int, tuple] = {}
        self.threads: set[str] = set()
        self.all_in = threading.Event()
        self.expected = 0

    def done_for(self, k: int):
        def done(ids, err):
            assert k not in self.got, "told twice"
            self.got[k] = (ids, err)
            self.threads.add(threading.current_thread().name)
            if len(self.got) == self.expected:
                self.all_in.set()

        return done


def test_submitted_appends_are_group_committed_and_equal_extend(tmp_path):
    told = Told()
    told.expected = 60
    with DurableLedger.open(tmp_path / "a.db") as led:
        for k in range(60):
            led.submit(_vec(k), [f"l{k % 5}"], [f"text {k}"], told.done_for(k))
        assert told.all_in.wait(30)
        assert len(led) == 60 and led.commits < 60  # queued while a commit ran: shared commits
        assert told.threads == {"ocrr-commit"}
        ids = {k: told.got[k][0] for k in range(60)}
        assert all(told.got[k][1] is None for k in range(60))
        assert sorted(i for r in ids.values() for i in r) == list(range(60))
        for k, r in ids.items():  # each item's ids hold its own entry
            assert led.memory[r[0]].text == f"text {k}"
        order = sorted(range(60), key=lambda k: ids[k][0])
    with DurableLedger.open(tmp_path / "b.db") as ref:  # the same entries, one extend each, in commit order
        for k in order:
            ref.extend(_vec(k), [f"l{k % 5}"], [f"text {k}"])
        head, root = ref.chain_head, ref.root()
    with DurableLedger.open(tmp_path / "a.db") as led:  # reopened: fully checked
        assert led.chain_head == head and led.root() == root


def test_a_failed_check_fails_its_own_items_only_and_runs_once_per_group(tmp_path):
    calls = {"bad": 0, "good": 0}

    def bad():
        calls["bad"] += 1
        raise OcrrError("refused by the check")

    def good():
        calls["good"] += 1

    told = Told()
    told.expected = 6
    with DurableLedger.open(tmp_path / "l.db") as led:
        led.append(_vec(100)[0], "seed")  # the committer is idle: the next submits share one group
        with led._cv:  # hold the queue so that all six land in one group
            for k in range(6):
                led.submit(_vec(k), ["x"], None, told.done_for(k), bad if k % 2 else good)
        assert told.all_in.wait(30)
        failed = [k for k in range(6) if told.got[k][1] is not None]
        assert failed == [1, 3, 5] and all("refused by the check" in str(told.got[k][1]) for k in failed)
        assert all(told.got[k][0] is None for k in failed)
        assert len(led) == 4 and calls == {"bad": 1, "good": 1}


def test_bad_input_raises_at_submit_and_nothing_is_queued(tmp_path):
    with DurableLedger.open(tmp_path / "l.db") as led:
        led.append(_vec(0)[0], "a")
        with pytest.raises(OcrrError, match="dimension"):
            led.submit(np.zeros((1, DIM + 1), np.float32), ["a"], None, lambda ids, err: None)
        with pytest.raises(OcrrError, match="NaN"):
            led.submit(np.full((1, DIM), np.nan, np.float32), ["a"], None, lambda ids, err: None)
        assert not led._queue and len(led) == 1


def test_close_commits_what_was_submitted_then_refuses_more(tmp_path):
    told = Told()
    told.expected = 20
    path = tmp_path / "l.db"
    led = DurableLedger.open(path)
    for k in range(20):
        led.submit(_vec(k), ["x"], None, told.done_for(k))
    led.close()
    assert told.all_in.is_set() and all(err is None for _, err in told.got.values())
    with pytest.raises(OcrrError, match="closed"):
        led.submit(_vec(99), ["x"], None, lambda ids, err: None)
    with DurableLedger.open(path) as again:
        assert len(again) == 20


def test_a_submitted_array_written_to_afterwards_changes_nothing_stored(tmp_path):
    """The rows are the caller's as they were at submit: checked, hashed and stored from one
    copy, so a caller reusing its buffer cannot make the file disagree with its own hashes."""
    from ocrr.ledger.group_commit import check_batch

    rows = np.stack([_vec(k)[0] for k in range(8)])
    taken = check_batch(rows, [f"l{k}" for k in range(8)], None, DIM)
    assert not np.may_share_memory(taken, rows)

    told = Told()
    told.expected = 1
    kept = rows.copy()
    with DurableLedger.open(tmp_path / "a.db") as led:
        led.submit(rows, [f"l{k}" for k in range(8)], None, told.done_for(0))
        rows[:] = np.nan  # the caller reuses its buffer at once
        assert told.all_in.wait(30) and told.got[0][1] is None
    with DurableLedger.open(tmp_path / "a.db") as led:  # reopened: fully checked
        assert np.array_equal(led.memory.vectors[:8], kept)
