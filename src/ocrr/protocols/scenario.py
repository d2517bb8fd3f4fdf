"""A Scenario: what one run streams and evaluates, independent of any system; and the small
helpers every protocol builds one with (rows of a split, capped eval sets, stable seed keys)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ocrr.batch import Batch


@dataclass(frozen=True)
class Scenario:
    """The seed set a system is fitted on, the stream in episodes, and the evaluation plan.

    ``labels``: the dataset's full sorted label list (parametric heads pre-allocate it).
    ``episode_bounds``: item offsets, episode e = stream items [bounds[e], bounds[e + 1]);
    None means one item per episode (the held-out protocol). Within an episode every item
    is predicted with the state at the episode's start; then the chosen errors are
    corrected in one call.
    ``eval_after``: the episode counts after which to evaluate (0 = before the stream; the
    last episode is always evaluated).
    ``eval_sets``: name -> items, evaluated at every point; ``dynamic_eval_sets``, when set,
    gives more sets from the run so far (an ``ocrr.protocols.base.RunSoFar``), e.g. the
    errors of the last episode. Each set yields the metric ``acc_<name>``.
    """

    protocol: str
    seed_value: int
    labels: tuple[str, ...]
    seed_set: Batch
    stream: Batch
    eval_sets: dict[str, Batch]
    eval_after: np.ndarray | None = None  # None: every 50 episodes, as the paper's checkpoints
    episode_bounds: np.ndarray | None = None
    dynamic_eval_sets: Callable | None = None
    # more columns of the per-item prediction log, one value per stream item (e.g. CMR's cluster)
    stream_columns: dict = field(default_factory=dict)
    heldout: tuple[str, ...] = ()
    info: dict = field(default_factory=dict)
    # near-future accuracy (EvalOCL): also predict item t + 1 + shift with the state after item t;
    # None: not measured. Set from the protocol's common option ``shift`` (Protocol.build_scenario).
    shift: int | None = None

    @property
    def n_episodes(self) -> int:
        return len(self.stream) if self.episode_bounds is None else len(self.episode_bounds) - 1

    def bounds(self) -> np.ndarray:
        if self.episode_bounds is None:
            return np.arange(len(self.stream) + 1)
        return np.asarray(self.episode_bounds)

    def eval_points(self) -> np.ndarray:
        """Sorted episode counts to evaluate after, always with 0 and the last."""
        n = self.n_episodes
        points = np.arange(0, n, 50) if self.eval_after is None else np.asarray(self.eval_after, int)
        return np.unique(np.concatenate([[0], points[(points >= 0) & (points <= n)], [n]]))


def every_n(n_episodes: int, every: int) -> np.ndarray:
    """Evaluation after 0, every, 2 * every, ... episodes and after the last."""
    return np.unique(np.concatenate([np.arange(0, n_episodes, every), [n_episodes]]))


def rows_of(split, vecs: np.ndarray, idx) -> Batch:
    """The items ``idx`` of a dataset split (vectors, texts when it has them, labels), in that order."""
    idx = np.asarray(idx, int)
    texts = None if split.texts is None else [split.texts[i] for i in idx]
    return Batch(np.ascontiguousarray(vecs[idx]), texts, [split.labels[i] for i in idx])


def cap_each(rng: np.random.Generator, cap: int | None, *index_sets: np.ndarray) -> list[np.ndarray]:
    """Each index set cut to ``cap`` items by ``rng.choice`` (in the order given, which fixes the
    draws); a set within the cap, or cap None or 0, is kept whole."""
    return [idx[rng.choice(len(idx), size=cap, replace=False)] if cap and len(idx) > cap else idx for idx in index_sets]


def cap_and_shuffle(
    seed: int, eval_cap: int | None, eval_idx: dict[str, np.ndarray], stream_idx: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The held-out protocol's draws, which the protocols modelled on it repeat: a fresh
    ``default_rng(seed)`` caps each eval set (``cap_each``, in the dict's order), then orders the
    stream by its ``permutation``. Returns the capped sets (same names) and the ordered stream."""
    rng = np.random.default_rng(seed)
    capped = dict(zip(eval_idx, cap_each(rng, eval_cap, *eval_idx.values())))
    return capped, stream_idx[rng.permutation(len(stream_idx))]


def split_rows(
    dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, seed_idx, stream_idx, eval_idx: dict[str, np.ndarray]
) -> dict:
    """The Scenario fields ``seed_set``, ``stream`` (items of the training split) and ``eval_sets``
    (items of the test split), from their index sets."""
    train, test = dataset.train, dataset.test
    return {
        "seed_set": rows_of(train, train_vecs, seed_idx),
        "stream": rows_of(train, train_vecs, stream_idx),
        "eval_sets": {name: rows_of(test, test_vecs, idx) for name, idx in eval_idx.items()},
    }


def crc(text: str) -> int:
    """A stable integer key for seeding (``SeedSequence([..., crc("name")])``); never ``hash()``."""
    return zlib.crc32(text.encode("utf-8"))
