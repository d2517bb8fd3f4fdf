"""The substrate: a hash-chained append-only ledger plus k-NN retrieval and a margin-band vote.

``fit`` appends the seed set to the ledger; ``correct`` appends the corrected items;
nothing is ever updated in place, so nothing learned is ever overwritten (paper 4.3).
"""

from __future__ import annotations

import numpy as np

from ocrr.index import ExactIndex
from ocrr.index.cache import IncrementalSearch
from ocrr.ledger import Ledger, VerifyResult
from ocrr.systems.base import Batch, Footprint, check_vectors, require_labels
from ocrr.systems.labels import LabelSpace
from ocrr.systems.vote import VoteRule, vote


class Substrate:
    """Append-only ledger + cosine k-NN + margin-band majority vote.

    Hyperparameters (paper Appendix B): k=5, margin=0.05, count weighting, max-similarity
    then recency tie-breaks. ``store_text`` keeps each item's text in the ledger entry.
    """

    family = "retrieval"

    def __init__(
        self,
        k: int = 5,
        margin: float | None = 0.05,
        weighting: str = "count",
        tiebreak_maxsim: bool = True,
        tiebreak_recency: bool = True,
        store_text: bool = True,
        labels=None,
        seed: int = 0,
        name: str = "substrate",
    ):
        self.name = name
        self.k = k
        self.margin = margin
        self.weighting = weighting
        self.tiebreak_maxsim = tiebreak_maxsim
        self.tiebreak_recency = tiebreak_recency
        self.store_text = store_text
        self.labels = labels
        self.seed = seed
        self.rule_ = VoteRule(k, margin, weighting, tiebreak_maxsim, tiebreak_recency)
        self.ledger_: Ledger | None = None
        self.index_: ExactIndex | None = None
        self.space_ = LabelSpace(labels or ())
        self._entry_label = np.empty(0, np.int64)  # label index of every ledger entry

    def hyperparameters(self) -> dict:
        return {
            "k": self.k,
            "margin": self.margin,
            "weighting": self.weighting,
            "tiebreak_maxsim": self.tiebreak_maxsim,
            "tiebreak_recency": self.tiebreak_recency,
            "store_text": self.store_text,
        }

    # -- learning -------------------------------------------------------------------
    def fit(self, seed: Batch) -> "Substrate":
        dim = int(np.asarray(seed.vecs).shape[1])
        self.ledger_ = Ledger(dim)
        self.index_ = ExactIndex(dim)
        self.search_ = IncrementalSearch(self.index_)
        self._entry_label = np.empty(0, np.int64)
        if len(seed):
            self._append(seed, who="fit")
        return self

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        if len(batch):
            self._append(batch, who=self.name)

    def _append(self, batch: Batch, who: str) -> np.ndarray:
        labels = require_labels(batch, who)
        vecs = check_vectors(batch.vecs, self.ledger_.dim, "vectors")
        texts = list(batch.texts) if (self.store_text and batch.texts is not None) else None
        ids = np.asarray(self.ledger_.extend(vecs, labels, texts), np.int64)
        codes = self.space_.encode(labels, grow=True)
        end = int(ids[-1]) + 1
        if end > len(self._entry_label):  # capacity doubling: corrections append one at a time
            grown = np.empty(max(end, 2 * len(self._entry_label)), np.int64)
            grown[: len(self._entry_label)] = self._entry_label
            self._entry_label = grown
        self._entry_label[ids] = codes
        self._index_new(vecs, ids)
        return ids

    def _index_new(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        """Make new ledger entries searchable (bounded variants override to evict)."""
        self.index_.add(vecs, ids)

    # -- inference ------------------------------------------------------------------
    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        queries = check_vectors(batch.vecs, self.ledger_.dim, "query vectors")
        sims, ids = self.search_.search(queries, self.k)
        winners = vote(sims, ids, self._neighbour_ranks(ids), self.rule_)
        return self.space_.decode_ranks(winners)

    def _neighbour_ranks(self, ids: np.ndarray) -> np.ndarray:
        """Sorted-order rank of each neighbour's label (so the last tie-break is 'sorts first')."""
        if ids.size == 0:
            return np.empty(ids.shape, np.int64)
        return self.space_.ranks[self._entry_label[ids]]

    # -- audit and accounting -----------------------------------------------------------
    def verify(self, expected_head: bytes | None = None) -> VerifyResult:
        self._require_fitted()
        return self.ledger_.verify(expected_head)

    def footprint(self) -> Footprint:
        self._require_fitted()
        live = len(self.index_)
        dim = self.ledger_.dim or 0
        # Per live entry: the float32 vector, its label index, and its 32-byte hash.
        return Footprint(entries=live, params=0, bytes=live * (4 * dim + 8 + 32),
                         extra={"ledger_entries": len(self.ledger_)})

    def _require_fitted(self) -> None:
        if self.ledger_ is None:
            raise RuntimeError(f"{self.name}: call fit() before predict() or correct()")
