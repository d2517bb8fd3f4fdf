"""knn_lm: a frozen parametric head interpolated with a growing k-NN datastore (paper 4.2).

p(y|x) = knn_lambda * p_kNN(y|x) + (1 - knn_lambda) * p_head(y|x), after Khandelwal et
al. (2020). p_head is the softmax of a linear head trained on the seed set exactly like
online_linear's and never updated; p_kNN is a softmax of similarity / tau over the k
nearest datastore entries (cosine), summed per label. ``correct`` only appends to the
datastore, which starts as the seed set.

The datastore is searched by any ocrr.index backend, with the substrate's index options
(declared in ocrr.index.options), e.g. ``knn_lm:index=hnsw``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ocrr.batch import Batch
from ocrr.index.cache import IncrementalSearch
from ocrr.index.options import IndexedSystem
from ocrr.specs import Option
from ocrr.systems.base import Footprint, check_vectors, require_labels
from ocrr.systems.heads.linear import SEED_OPTIONS, LinearHead
from ocrr.systems.substrate.core import MAX_K, SearchIndex

if TYPE_CHECKING:  # torch is imported where a head is built or run (see ocrr.systems.heads.linear)
    import torch


class KNNLM(IndexedSystem, LinearHead):
    family = "hybrid"
    options = {
        "k": Option(5, int, low=1, high=MAX_K, help="datastore neighbours of a query"),
        "tau": Option(0.1, float, gt=0, help="temperature of the softmax over neighbour similarities"),
        "knn_lambda": Option(0.5, float, low=0, high=1, help="weight of p_kNN in the interpolation"),
    }  # then INDEX_OPTIONS (ocrr.index.options), then LinearHead's seed training
    default_name = "knn_lm"
    widened_options = ("tau", "knn_lambda")

    def hyperparameters(self) -> dict:
        return {
            "k": self.k,
            "tau": self.tau,
            "knn_lambda": self.knn_lambda,
            **{key: getattr(self, key) for key in SEED_OPTIONS},
            **self.index_hyperparameters(),  # only the knobs its backend uses
        }

    def fit(self, seed: Batch) -> KNNLM:
        super().fit(seed)  # trains the head, builds the label space
        head = self._linear_head()
        head.requires_grad_(False)
        # float64 copies: the same arithmetic for one query or many (batched == one by one).
        self.w64_ = head.weight.detach().double().numpy()
        self.b64_ = head.bias.detach().double().numpy()
        self.index_: SearchIndex = self.index_options.make(self.dim_, self.name, k=self.k, label_of=self._labels_of_ids)
        self.search_ = IncrementalSearch(self.index_)
        self.entry_label_ = np.empty(0, np.int64)
        self._append(check_vectors(seed.vecs, self.dim_, "seed vectors"), seed.labels)
        return self

    def _linear_head(self) -> torch.nn.Linear:
        """The frozen head ``fit`` trained (LinearHead's ``head_``: a torch.nn.Linear)."""
        import torch

        assert isinstance(self.head_, torch.nn.Linear), "fit() trains a linear head"
        return self.head_

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        labels = require_labels(batch, self.name)
        vecs = check_vectors(batch.vecs, self.dim_, "vectors")
        self.space_.add(labels)  # a new label gets a p_head of 0: the frozen head has no row for it
        self._append(vecs, labels)

    def _append(self, vecs: np.ndarray, labels) -> None:
        start = len(self.index_)
        # Labels first: an IVF index tuned for target_agreement reads them while it takes the rows.
        self.entry_label_ = np.concatenate([self.entry_label_, self.space_.encode(labels)])
        self.index_.add(vecs, np.arange(start, start + len(vecs)))

    def _labels_of_ids(self, ids: np.ndarray) -> np.ndarray:
        """Label index of each datastore entry (what ``target_agreement`` tuning votes with:
        a k-NN vote over the entries, the datastore's side of kNN-LM)."""
        return self.entry_label_[ids]

    def anticipate(self, batch: Batch) -> None:
        """Pre-score the stream's queries against the datastore held now (the substrate's
        ``anticipate``): the same neighbours, from a few rows per one-item predict."""
        self._require_fitted()
        if self.knn_lambda > 0 and len(batch):
            self._anticipate_search(self.index_, check_vectors(batch.vecs, self.dim_, "query vectors"), self.k)

    def head_proba(self, vecs: np.ndarray) -> np.ndarray:
        """p_head over the current label space (n, C); labels newer than the head get 0."""
        logits = vecs.astype(np.float64) @ self.w64_.T + self.b64_
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        return np.pad(p, ((0, 0), (0, len(self.space_) - p.shape[1])))

    def knn_proba(self, vecs: np.ndarray) -> np.ndarray:
        """p_kNN over the current label space (n, C): softmax(sim / tau) over the k
        neighbours, summed per neighbour label."""
        sims, ids = self.search_.search(vecs, self.k)
        out = np.zeros((len(vecs), len(self.space_)))
        if ids.shape[1] == 0:
            return out
        found = ids >= 0  # an approximate index may leave a slot empty (id -1)
        z = np.where(found, sims.astype(np.float64) / self.tau, -np.inf)
        top = z.max(axis=1, keepdims=True)
        w = np.exp(z - np.where(np.isfinite(top), top, 0.0))
        total = w.sum(axis=1, keepdims=True)
        w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
        rows = np.repeat(np.arange(len(vecs)), ids.shape[1])
        np.add.at(out, (rows, self.entry_label_[np.maximum(ids, 0)].reshape(-1)), w.reshape(-1))
        return out

    def proba(self, batch: Batch) -> np.ndarray:
        """(1 - knn_lambda) p_head + knn_lambda p_kNN over the current label space (n, C)."""
        self._require_fitted()
        vecs = check_vectors(batch.vecs, self.dim_, "query vectors")
        lam = self.knn_lambda
        p: np.ndarray | float = (1 - lam) * self.head_proba(vecs) if lam < 1 else 0.0
        if lam > 0:
            p = p + lam * self.knn_proba(vecs)
        assert isinstance(p, np.ndarray)  # lam < 1 or lam > 0: one of the two terms is an array
        return p

    def predict(self, batch: Batch) -> list[str | None]:
        winners = np.argmax(self.proba(batch), axis=1)
        return self.space_.decode(winners)

    def uncertainty(self, batch: Batch) -> np.ndarray:
        """Per item, 1 - the top interpolated probability: higher means less sure."""
        return 1.0 - np.max(self.proba(batch), axis=1)

    def footprint(self) -> Footprint:
        self._require_fitted()
        params = sum(p.numel() for p in self._linear_head().parameters())
        n = len(self.index_)
        # Exact search: the datastore is the float32 vectors plus a label per entry. Other
        # backends store their own form (codes, graph), counted instead of the raw vectors.
        store = n * (4 * self.dim_) if self.index_options.kind == "exact" else int(self.index_.nbytes)
        return Footprint(
            entries=n, params=params, bytes=4 * params + store + 8 * n, extra={"index": self.index_options.kind}
        )
