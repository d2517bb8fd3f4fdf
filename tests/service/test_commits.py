"""Corrections queued from the event loop (service/commits.py): each awaits its own ids, the
ones that arrive together share a commit, a failed check fails only its own, and a
correction whose client went away is committed all the same."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.service.commits import Commits

D = 8


def _rows(seed: int, m: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(m, D)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_concurrent_corrections_each_get_their_ids_and_share_commits(tmp_path):
    with DurableLedger.open(tmp_path / "l.db") as led:
        commits = Commits(led)

        async def main():
            return await asyncio.gather(
                *(commits.append(_rows(k, 1 + k % 3), [f"l{k}"] * (1 + k % 3), None, None) for k in range(40))
            )

        got = asyncio.run(main())
        assert sorted(i for ids in got for i in ids) == list(range(len(led)))
        for k, ids in enumerate(got):
            assert len(ids) == 1 + k % 3 and all(led.memory.labels[i] == f"l{k}" for i in ids)
            assert np.array_equal(led.memory.vectors[ids.start : ids.stop], _rows(k, 1 + k % 3))
        assert led.commits < 40


def test_a_failed_check_raises_in_its_own_coroutine_only(tmp_path):
    def refuse():
        raise OcrrError("the file was found damaged")

    with DurableLedger.open(tmp_path / "l.db") as led:
        commits = Commits(led)

        async def main():
            return await asyncio.gather(
                commits.append(_rows(1), ["ok"], ["fine"], None),
                commits.append(_rows(2), ["no"], ["refused"], refuse),
                return_exceptions=True,
            )

        ok, refused = asyncio.run(main())
        assert isinstance(refused, OcrrError) and "damaged" in str(refused)
        assert list(ok) == [0] and len(led) == 1 and led.memory[0].text == "fine"


def test_bad_input_is_refused_before_anything_is_queued(tmp_path):
    with DurableLedger.open(tmp_path / "l.db") as led:
        commits = Commits(led)

        async def main():
            await commits.append(_rows(1), ["a"], None, None)
            with pytest.raises(OcrrError, match="dimension"):
                commits.append(np.ones((1, D + 1), np.float32), ["a"], None, None)

        asyncio.run(main())
        assert len(led) == 1


def test_a_correction_whose_client_went_away_is_committed_all_the_same(tmp_path):
    with DurableLedger.open(tmp_path / "l.db") as led:
        commits = Commits(led)

        async def main():
            gone = commits.append(_rows(1), ["gone"], None, None)
            gone.cancel()
            return await commits.append(_rows(2), ["kept"], None, None)

        kept = asyncio.run(main())
        assert list(kept) == [1] and list(led.memory.labels) == ["gone", "kept"]
