"""The storage policies every bounded memory and replay method shares (ocrr.systems.buffers)."""

from __future__ import annotations

import numpy as np
import torch

from ocrr.systems.buffers import Memory, fifo_keep, label_sampler, rehearsal_indices, reservoir_slots


def test_reservoir_slots_offered_in_pieces_equal_offered_at_once():
    draws = np.random.default_rng(3).random(200)
    whole = reservoir_slots(0, draws, 10)
    pieces = np.concatenate([reservoir_slots(i, draws[i : i + 7], 10) for i in range(0, 200, 7)])
    assert np.array_equal(whole, pieces)
    assert np.array_equal(whole[:10], np.arange(10))  # the first ``size`` items fill the slots in order
    assert set(whole[10:].tolist()) <= set(range(-1, 10))


def test_reservoir_keeps_each_item_with_equal_chance():
    size, n, runs = 5, 40, 4000
    kept = np.zeros(n)
    rng = np.random.default_rng(0)
    for _ in range(runs):
        slot = reservoir_slots(0, rng.random(n), size)
        chosen = np.flatnonzero(slot >= 0)[::-1]
        _, first = np.unique(slot[chosen], return_index=True)
        kept[chosen[first]] += 1
    share = kept / runs
    assert np.allclose(share, size / n, atol=0.03)  # Algorithm R: a uniform sample


def test_fifo_keeps_the_newest_and_evicts_the_oldest():
    live = np.empty(0, np.int64)
    for start in range(0, 12, 4):
        keep, evicted, live = fifo_keep(live, np.arange(start, start + 4), 6)
        assert len(keep) == 4
    assert np.array_equal(live, np.arange(6, 12))
    keep, evicted, live = fifo_keep(live, np.arange(12, 20), 6)  # more than fit: only the newest 6 enter
    assert np.array_equal(keep, np.arange(2, 8)) and np.array_equal(evicted, np.arange(6, 12))
    assert np.array_equal(live, np.arange(14, 20))


def test_rehearsal_samplers():
    gen = torch.Generator().manual_seed(0)
    assert rehearsal_indices(10, 4, "fifo", gen).tolist() == [6, 7, 8, 9]
    uniform = rehearsal_indices(10, 4, "uniform", gen)
    assert len(set(uniform.tolist())) == 4 and uniform.max() < 10
    mixed = rehearsal_indices(10, 4, "mixed", gen).tolist()
    assert mixed[:2] == [8, 9] and len(mixed) == 4
    assert rehearsal_indices(3, 16, "fifo", gen).tolist() == [0, 1, 2]  # never more than the store holds


def test_class_balanced_sampling_weighs_a_new_class_like_a_seed_class():
    # 900 seed rows of label 0, then 10 corrections of a new label 1
    y = torch.cat([torch.zeros(900, dtype=torch.int64), torch.ones(10, dtype=torch.int64)])
    gen = torch.Generator().manual_seed(1)
    balanced = torch.cat([label_sampler(y, 900, 256, "balanced", 0.0, gen)() for _ in range(20)])
    share_new = (y[balanced] == 1).double().mean().item()
    assert 0.4 < share_new < 0.6
    share = label_sampler(y, 900, 100, "share", 0.25, gen)()
    assert (share[-25:] >= 900).all()  # the corrections' share is drawn from the corrections


def test_memory_grows_and_returns_rows():
    memory = Memory(3)
    memory.add(torch.ones(70, 3), torch.arange(70))
    memory.add(torch.zeros(2, 3), torch.tensor([7, 8]))
    assert len(memory) == 72
    x, y = memory.rows(torch.tensor([0, 71]))
    assert x.tolist() == [[1, 1, 1], [0, 0, 0]] and y.tolist() == [0, 8]
