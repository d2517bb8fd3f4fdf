"""The background check reads the whole file (the quick check, whose cost grows with the
ledger) once per cycle of its rolling rehash, at the cycle's start, and not at the first
tick, which the open's own check stands for; every tick still checks the file's tail and
rehashes a slice. So a damaged stored leaf is found within one cycle, a removed tail at the
next tick."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")

from service_helpers import cut_back, open_state, seed  # noqa: E402

from ocrr.service import state as service_state  # noqa: E402


def sliced(path, slice_entries: int = 4):
    """A seeded service state over ``path`` whose rolling rehash takes ``slice_entries`` a tick."""
    state = open_state(path, check_every=0)
    seed(state)
    state.check_slice = slice_entries
    return state


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """The ledger sizes the quick check of the whole file ran at, one per run."""
    runs: list[int] = []
    real = service_state.quick_check

    def counting(led):
        runs.append(len(led))
        return real(led)

    monkeypatch.setattr(service_state, "quick_check", counting)
    return runs


def test_the_whole_file_is_read_at_the_start_of_each_cycle_but_the_first(tmp_path, counted):
    state = sliced(tmp_path / "l.db")
    held = len(state.substrate)
    per_cycle = -(-held // 4)
    assert per_cycle >= 3  # several ticks per cycle
    ticks = [state.check_file("checkpoint") for _ in range(3 * per_cycle)]
    assert all(t["ok"] for t in ticks)
    assert counted == [held, held]  # at the start of the second and the third cycle only
    quick = [i for i, t in enumerate(ticks) if "rolling check" not in t["reason"]]
    assert quick == [per_cycle, 2 * per_cycle]
    assert all(t["size"] == held and t["root"] == ticks[quick[0]]["root"] for t in ticks)
    state.close()


def test_a_ledger_within_one_slice_reads_the_whole_file_at_every_tick_but_the_first(tmp_path, counted):
    state = open_state(tmp_path / "l.db", check_every=0)
    seed(state)
    for _ in range(4):
        assert state.check_file("checkpoint")["ok"]
    assert counted == [len(state.substrate)] * 3
    state.close()


def test_a_damaged_stored_leaf_is_found_at_the_next_cycle(tmp_path):
    path = tmp_path / "l.db"
    state = sliced(path)
    per_cycle = -(-len(state.substrate) // 4)
    conn = sqlite3.connect(path)
    with conn:  # a leaf the rehash of the entries does not read: only the whole file's check does
        assert conn.execute("UPDATE nodes SET hash = zeroblob(32) WHERE level = 0 AND idx = 1").rowcount == 1
    conn.close()
    outs = [state.check_file("checkpoint") for _ in range(per_cycle)]
    assert all(o["ok"] for o in outs) and state.damage is None  # the first cycle: the open read the file
    found = state.check_file("checkpoint")
    assert not found["ok"] and found["first_bad"] == 1 and state.damage is not None
    state.close()


def test_a_removed_tail_is_found_at_the_next_tick_inside_a_cycle(tmp_path):
    path = tmp_path / "l.db"
    state = sliced(path)
    assert state.check_file("checkpoint")["ok"]  # the first tick: a slice, inside the first cycle
    cut_back(path, 5)
    out = state.check_file("checkpoint")
    assert not out["ok"] and state.damage is not None
    state.close()


def test_the_slice_is_rehashed_in_steps_with_a_rest_after_each_but_the_last(tmp_path, monkeypatch):
    monkeypatch.setattr(service_state, "CHECK_STEP", 2)
    state = sliced(tmp_path / "l.db", slice_entries=8)
    led = state.substrate.ledger
    readers, stepped = [], []
    real_reader = led._row_reader

    @contextmanager
    def reader():  # one reader (for a file: one connection) per slice, one read per step
        readers.append(1)
        with real_reader() as read:
            yield lambda lo, hi: stepped.append((lo, hi)) or read(lo, hi)

    monkeypatch.setattr(led, "_row_reader", reader)
    rests: list[float] = []
    assert state.check_file("checkpoint", rest=lambda s: rests.append(s) or False)["ok"]
    assert stepped == [(0, 2), (2, 4), (4, 6), (6, 8)] and readers == [1]
    assert len(rests) == 3 and all(r > 0 for r in rests)
    stepped.clear()
    state.slice_at = 0
    assert state.check_file("checkpoint", rest=lambda s: True)["ok"]  # the service stops at the first rest
    assert stepped == [(0, 2)]
    state.close()


def test_an_entry_edited_in_a_later_step_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(service_state, "CHECK_STEP", 2)
    path = tmp_path / "l.db"
    state = sliced(path, slice_entries=8)
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute("UPDATE entries SET label = label || 'x' WHERE id = 5").rowcount == 1
    conn.close()
    out = state.check_file("checkpoint", rest=lambda s: False)
    assert not out["ok"] and out["first_bad"] == 5 and state.damage is not None
    state.close()


def test_only_the_first_worker_reads_the_whole_file(tmp_path, counted):
    state = sliced(tmp_path / "l.db")
    state.slot, state.workers = 1, 2
    per_cycle = -(-len(state.substrate) // 4)
    assert all(state.check_file("checkpoint")["ok"] for _ in range(3 * per_cycle))
    assert counted == []  # slices and the tail only: the first worker's records are honoured
    state.close()
