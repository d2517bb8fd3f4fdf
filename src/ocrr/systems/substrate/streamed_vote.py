"""The substrate's exact vote over a ledger file too large to hold, its rows streamed in blocks.

``open_substrate(...).explain(queries)`` holds every row (15.4 GB at 10M 384-d entries):
it does not fit beside a service of that size, which is what an approximate index is
measured against. ``exact_vote`` gives the same answers reading the rows a block at a time
from ``CheckedRows`` (each proven to be the checked one): per query a running exact top k,
merged block by block with ``ocrr.index.topk.top_k`` (similarity descending, then id
descending: the one total order every search path of the substrate answers in, however the
work is chunked), then the substrate's own vote rule on the merged neighbours. Similarities
are float32 dot products as the exact index computes them; BLAS kernels of other block
shapes may sum their terms in another order, so a similarity may differ in its last bits
(within a float32 dot product's rounding), and only neighbours that close could be ordered
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ocrr.index.topk import top_k
from ocrr.index.vote import vote
from ocrr.ledger.location import CheckedRows
from ocrr.systems.substrate.core import Substrate

__all__ = ["ExactVote", "exact_vote"]

# Rows scored per block: the block's similarities for 2,000 queries stay near 130 MB.
BLOCK_ROWS = 16_384


@dataclass(frozen=True)
class ExactVote:
    """Per query: the winning label (None: no neighbours), and its neighbours' similarities,
    ids and labels, best first (``k`` of them, fewer only when the ledger holds fewer)."""

    labels: list[str | None]
    sims: np.ndarray
    ids: np.ndarray
    neighbour_labels: list[list[str]]


def exact_vote(stored: CheckedRows, queries: np.ndarray, system: Substrate, block: int = BLOCK_ROWS) -> ExactVote:
    """``system``'s exact search and vote (its ``k`` and vote rule) for ``queries`` over every
    entry of ``stored``, reading ``block`` rows at a time."""
    queries = np.ascontiguousarray(queries, np.float32).reshape(-1, stored.dim)
    k = system.k
    best_s = np.empty((len(queries), 0), np.float32)
    best_i = np.empty((len(queries), 0), np.int64)
    label_of: dict[int, str] = {}  # the labels of the entries that made some query's top k
    for lo, rows, labels in stored.blocks(block):
        s, i = top_k(queries @ rows.T, lo, k)
        best_s, best_i = top_k(np.concatenate([best_s, s], axis=1), np.concatenate([best_i, i], axis=1), k)
        for e in np.unique(best_i[best_i >= lo]).tolist():
            label_of[e] = labels[e - lo]
    names = [[label_of[e] for e in row] for row in best_i.tolist()]
    # The vote compares labels for equality and, last, by sort order: ranks among these labels
    # order them as the substrate's ranks among all of its labels do.
    ordered = sorted({name for row in names for name in row})
    rank = {name: r for r, name in enumerate(ordered)}
    ranks = np.array([[rank[name] for name in row] for row in names], np.int64).reshape(best_i.shape)
    winners = vote(best_s, best_i, ranks, system.rule_)
    return ExactVote([ordered[w] if w >= 0 else None for w in winners.tolist()], best_s, best_i, names)
