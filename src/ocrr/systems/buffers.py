"""Storage policies shared by every system that keeps or samples a subset of what it saw.

One module for who stays in a bounded memory and who is drawn from it, in the manner of
Avalanche's storage policies, so the bounded substrates and the replay methods cannot drift
apart on what "reservoir" or "FIFO" means:

* who stays: ``reservoir_slots`` (Vitter's Algorithm R, streaming), ``reservoir_indices``
  (Algorithm R over a fixed set), ``fifo_keep`` (the newest ``size``);
* who is drawn: ``rehearsal_indices`` (uniform, newest, or half of each),
  ``label_sampler`` (class-balanced, by seed prior, or a fixed share of corrections);
* where rows live: ``Memory``, a growing (vector, label) store.

Every draw takes its generator from the caller, derived from the run's seed and a key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the bounded substrates use only the numpy policies: no torch on import
    import torch

SAMPLERS = ("uniform", "fifo", "mixed")  # rehearsal_indices
LABEL_SAMPLINGS = ("prior", "balanced", "share")  # label_sampler


# -- who stays ----------------------------------------------------------------------------


def reservoir_slots(n_before: int, draws: np.ndarray, size: int) -> np.ndarray:
    """Algorithm R's slot for each offered item (-1: not kept). Items ``n_before ...`` are
    offered in order; ``draws`` are uniform in [0, 1), one per item."""
    t = n_before + np.arange(len(draws), dtype=np.int64)
    j = np.floor(draws * (t + 1)).astype(np.int64)  # uniform in [0, t]
    return np.where(t < size, t, np.where(j < size, j, -1))


def reservoir_indices(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Vitter's Algorithm R over items 0..n-1 in order: a uniform sample of min(n, size)."""
    keep = np.arange(min(n, size))
    if n > size:
        draws = rng.integers(0, np.arange(size + 1, n + 1))  # item i draws j in [0, i]
        for i, j in zip(range(size, n), draws.tolist()):
            if j < size:
                keep[j] = i
    return keep


def fifo_keep(live: np.ndarray, ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First in, first out: (positions of ``ids`` that enter, the live ids they evict, the new
    live set in arrival order) when ``ids`` arrive in order at a store of at most ``size``."""
    keep = np.arange(max(0, len(ids) - size), len(ids))
    n_evict = max(0, len(live) + len(keep) - size)
    return keep, live[:n_evict], np.concatenate([live[n_evict:], ids[keep]])


# -- who is drawn -------------------------------------------------------------------------


def rehearsal_indices(n: int, batch_size: int, sampler: str, generator: torch.Generator) -> torch.Tensor:
    """Store rows of one rehearsal step: ``uniform`` over the store, the ``fifo`` newest, or
    ``mixed`` (the newest half, the rest uniform)."""
    import torch

    m = min(batch_size, n)
    newest = torch.arange(n - m, n)
    if sampler == "fifo":
        return newest
    uniform = torch.randperm(n, generator=generator)
    if sampler == "uniform":
        return uniform[:m]
    half = m // 2
    return torch.cat([newest[m - half :], uniform[: m - half]])


def label_sampler(
    y_all: torch.Tensor,
    n_seed: int,
    size: int,
    sampling: str,
    correction_share: float,
    generator: torch.Generator,
) -> Callable[[], torch.Tensor]:
    """A function drawing ``size`` row indices of a store whose first ``n_seed`` rows are the
    seed set and the rest corrections.

    ``prior``: a label at its seed-set frequency (one known only from corrections at the
    median label's), then one of its rows uniformly. ``balanced``: a label uniformly among
    those the store holds, then one of its rows uniformly, so a new class with a handful of
    corrections weighs as much as a seed class of hundreds. ``share``: ``correction_share`` of
    the batch uniformly from the corrections, the rest uniformly from the whole store."""
    import torch

    n = len(y_all)
    if sampling in ("prior", "balanced"):
        order = torch.argsort(y_all, stable=True)
        present, counts = torch.unique_consecutive(y_all[order], return_counts=True)
        starts = torch.cumsum(counts, 0) - counts
        weight = torch.ones(len(counts), dtype=torch.float64)
        if sampling == "prior":  # seed labels at their seed frequency, new ones at the median's
            seed_counts = torch.bincount(y_all[:n_seed], minlength=int(present.max()) + 1)[present]
            typical = seed_counts[seed_counts > 0].double().median() if (seed_counts > 0).any() else 1.0
            weight = torch.where(seed_counts > 0, seed_counts.double(), torch.as_tensor(typical, dtype=torch.float64))

        def by_label() -> torch.Tensor:
            c = torch.multinomial(weight, size, replacement=True, generator=generator)
            within = (torch.rand(size, generator=generator, dtype=torch.float64) * counts[c]).long()
            return order[starts[c] + torch.minimum(within, counts[c] - 1)]

        return by_label
    n_corr = n - n_seed
    from_corr = int(round(correction_share * size)) if n_corr > 0 else 0

    def share() -> torch.Tensor:
        idx = torch.randint(0, n, (size - from_corr,), generator=generator)
        if from_corr:
            idx = torch.cat([idx, n_seed + torch.randint(0, n_corr, (from_corr,), generator=generator)])
        return idx

    return share


# -- where rows live ----------------------------------------------------------------------


class Memory:
    """A growing store of (vector, label index) rows; capacity doubles as it fills."""

    def __init__(self, dim: int):
        import torch

        self.x = torch.empty((0, dim))
        self.y = torch.empty(0, dtype=torch.int64)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        import torch

        need = self.n + len(y)
        if need > len(self.y):
            cap = max(need, 2 * len(self.y), 64)
            grown_x, grown_y = torch.empty((cap, self.x.shape[1])), torch.empty(cap, dtype=torch.int64)
            grown_x[: self.n], grown_y[: self.n] = self.x[: self.n], self.y[: self.n]
            self.x, self.y = grown_x, grown_y
        self.x[self.n : need], self.y[self.n : need] = x, y
        self.n = need

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.y[idx]
