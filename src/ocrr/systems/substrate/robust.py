"""A substrate for noisy feedback: corrections vote at full weight once corroborated.

A wrong label given by a user lands among entries of the item's true class, and nothing near
it shares its label; a right one sooner or later gets company. So each correction starts
*uncorroborated* and becomes corroborated when an entry of the same label is among its
``support_k`` nearest entries at its insertion, or when a later entry of its label finds it
among its own ``support_k`` nearest. Seed entries (the protocol's clean seed set) are
corroborated from the start. Nothing is deleted or rewritten: the ledger and its hash chain
are the substrate's; only the vote weighs entries differently.

The vote (``trusted_vote``) is the substrate's margin-band majority vote with two changes:
an uncorroborated entry's vote counts ``isolated_weight`` (default a half), and the band is
anchored at the best *corroborated* neighbour (top similarity among them minus ``margin``;
every neighbour above that is in the band too), so an isolated contradiction just above a
corroborated neighbourhood cannot set the band alone. With no corroborated neighbour among
the k, the band is the plain one. Ties: higher maximum similarity, then the most recent entry,
then the label that sorts first, as in the substrate.

The cost: a new class's first correction is uncorroborated too, and loses to a corroborated
neighbour of another class until a second correction of its class lands near it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ocrr.batch import Batch
from ocrr.index.vote import VoteRule, band, elect
from ocrr.specs import Option
from ocrr.systems.base import check_vectors
from ocrr.systems.substrate.core import Substrate


def trusted_vote(
    sims: np.ndarray, ids: np.ndarray, labels: np.ndarray, weights: np.ndarray, trusted: np.ndarray, rule: VoteRule
) -> np.ndarray:
    """Winning label index per row (-1: no neighbours). ``weights``: each neighbour's vote;
    ``trusted``: whether it is corroborated (anchors the band). Arrays are (n, k), rows sorted
    by similarity descending, labels -1 for padding."""
    n, k = sims.shape
    if k == 0:
        return np.full(n, -1, np.int64)
    sims, _, voting = band(sims, labels, rule.margin, anchors=trusted)
    same = (labels[:, :, None] == labels[:, None, :]) & voting[:, None, :]
    weighted = np.where(same, weights[:, None, :], 0.0)
    score = weighted.sum(axis=2) if rule.weighting == "count" else (weighted * sims[:, None, :]).sum(axis=2)
    return elect(score, same, voting, sims, ids, labels, rule)


class RobustSubstrate(Substrate):
    """The substrate whose uncorroborated corrections vote with ``isolated_weight``."""

    options = {
        "isolated_weight": Option(
            0.5, float, low=0, high=1, help="vote of a correction no same-label entry corroborates"
        ),
        "support_k": Option(5, int, low=1, help="nearest entries searched for a corroborating one"),
    }
    default_name = "robust_substrate"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._corroborated = np.empty(0, bool)

    def hyperparameters(self) -> dict:
        return {"isolated_weight": self.isolated_weight, "support_k": self.support_k, **super().hyperparameters()}

    def fit(self, seed: Batch) -> RobustSubstrate:
        super().fit(seed)
        self._corroborated = np.ones(len(self._fitted_ledger()), bool)  # the seed set is clean
        return self

    def correct(self, batch: Batch) -> None:
        ledger, _ = self._fitted()
        if not len(batch):
            return
        first = len(ledger)
        super().correct(batch)
        last = len(ledger)
        self._corroborated = np.concatenate([self._corroborated, np.zeros(last - first, bool)])
        vecs = check_vectors(batch.vecs, ledger.dim, "vectors")
        # the index directly (not the query cache): each new entry's nearest entries, itself included
        _, nbrs = self._fitted_index().search(vecs, self.support_k + 1)
        for row, entry in enumerate(range(first, last)):
            found = nbrs[row][(nbrs[row] >= 0) & (nbrs[row] != entry)][: self.support_k]
            agree = found[self._entry_label[found] == self._entry_label[entry]]
            if len(agree):
                self._corroborated[entry] = True
                self._corroborated[agree] = True  # it corroborates them in turn

    def predict(self, batch: Batch) -> list[str | None]:
        ledger, _ = self._fitted()
        queries = check_vectors(batch.vecs, ledger.dim, "query vectors")
        sims, ids = self.search_.search(queries, self.k)
        trusted = np.where(ids >= 0, self._corroborated[np.maximum(ids, 0)], False)
        weights = np.where(trusted, 1.0, self.isolated_weight)
        winners = trusted_vote(sims, ids, self._neighbour_ranks(ids), weights, trusted, self.rule_)
        return self.space_.decode_ranks(winners)

    def corroborated(self) -> np.ndarray:
        """Per ledger entry: whether it is corroborated (seed entries always are)."""
        return self._corroborated.copy()
