"""Systems for tests/engine/test_free_cores.py, in a module of their own: a pool's workers
import it to build them, and nothing else of the test module."""

from __future__ import annotations

import time

from ocrr.engine.sweep import executors
from ocrr.systems import REGISTRY
from ocrr.systems.base import Footprint

StaticKNN = REGISTRY["static_knn"].factory  # a cheap system whose numbers no thread count moves


class SeesThreads(StaticKNN):  # type: ignore[misc, valid-type]
    """static_knn that takes free cores and reports, as its footprint's ``params``, the most
    torch threads it predicted on (read inside the worker, where the pools were set)."""

    takes_free_cores = True

    def predict(self, batch):
        import torch

        self.most_threads_ = max(getattr(self, "most_threads_", 0), torch.get_num_threads())
        return super().predict(batch)

    def footprint(self) -> Footprint:
        return Footprint(entries=super().footprint().entries, params=self.most_threads_)


def wait_for_free_cores() -> None:
    """In a pool worker, until the pool shares free cores: the other runs have finished."""
    budget = executors._WORKER_BUDGET
    deadline = time.monotonic() + 120
    while budget is not None and budget.share() < 2:
        assert time.monotonic() < deadline, "the pool never shared the cores its finished runs freed"
        time.sleep(0.01)  # polls a condition: the outcome does not depend on how long it takes


class WaitsForFreeCores(StaticKNN):  # type: ignore[misc, valid-type]
    """static_knn that takes free cores and, in a pool worker, waits after its fit until the
    pool shares free cores: the other runs have finished and this one runs on alone."""

    takes_free_cores = True

    def fit(self, batch):
        super().fit(batch)
        wait_for_free_cores()
        return self


class LLMWaitsForFreeCores(REGISTRY["llm_icl"].factory):  # type: ignore[misc, valid-type]
    """llm_icl that waits after its fit until the pool shares free cores, and reports, as its
    footprint's ``params``, the most prompts it scored at once."""

    def fit(self, batch):
        super().fit(batch)
        wait_for_free_cores()
        return self

    def footprint(self) -> Footprint:
        return Footprint(entries=super().footprint().entries, params=self.scorer.most_at_once)
