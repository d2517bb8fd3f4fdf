"""mbpa: MbPA++ (de Masson d'Autume et al. 2019) on frozen embeddings.

The three parts of the paper, over a linear softmax head on the same vectors every other
ocrr head uses:

* **Episodic memory** of every item the system is given: the seed set and every correction
  (the write probability is 1 here; the substrate's ledger is this memory without the rest).
* **Sparse experience replay**: each correction is learned by one SGD step (lr ``lr``) as it
  arrives; every ``replay_every`` corrections, ``replay_steps`` further steps on
  ``replay_size`` items drawn uniformly from the memory.
* **Local adaptation** at prediction: for each query, the K (``k``) nearest memories (cosine)
  adapt a copy of the head by ``local_steps`` gradient steps (lr ``local_lr``) on
  mean cross-entropy + ``local_lambda``/2 ||theta - theta_global||^2; the adapted copy answers.

Local adaptation is computed exactly in the span of the neighbours: every gradient of the
objective is (coefficients) x (the K neighbours' vectors, with a 1 for the bias), so
theta_i = theta + A_i [X_i, 1] with A_i of size C x K, and each step costs K x K x C per query
instead of C x d. Per query, the same float64 arithmetic one by one or batched.
Randomness: the seed head is the shared memoised one; replay draws from a generator derived
from the run seed.
"""

from __future__ import annotations

import numpy as np
import torch

from ocrr.batch import Batch
from ocrr.index.cache import IncrementalSearch
from ocrr.index.options import IndexOptions
from ocrr.specs import Option
from ocrr.systems.base import Footprint, check_vectors
from ocrr.systems.heads.linear import OnlineLinear
from ocrr.systems.seeds import derive_seed


class MbPAPlusPlus(OnlineLinear):
    """online_linear's head and step, plus an episodic memory, sparse replay and local adaptation."""

    family = "hybrid"
    options = {
        "k": Option(32, int, low=1, help="nearest memories of a query that adapt the head"),
        "local_steps": Option(30, int, low=0, help="gradient steps of local adaptation; 0: the global head"),
        "local_lr": Option(0.5, float, low=0, help="learning rate of local adaptation"),
        "local_lambda": Option(1e-3, float, low=0, help="pull of the adapted head towards the global one"),
        "lr": OnlineLinear.options["lr"],  # (listed here: its place among this system's options)
        "replay_every": Option(10, int, low=1, help="corrections between sparse replays"),
        "replay_size": Option(32, int, low=1, help="memories drawn per replay step"),
        "replay_steps": Option(1, int, low=0, help="SGD steps per replay"),
    }
    default_name = "mbpa"
    widened_options = ("local_lr", "local_lambda", "lr")

    # -- learning -------------------------------------------------------------------
    def fit(self, seed: Batch) -> MbPAPlusPlus:
        super().fit(seed)  # the shared seed head over every declared label
        self.index_ = IndexOptions().make(self.dim_, self.name)  # exact search
        self.search_ = IncrementalSearch(self.index_)
        self._x, self._y, self.size_ = np.empty((0, self.dim_), np.float32), np.empty(0, np.int64), 0
        assert seed.labels is not None  # super().fit checked them (require_labels)
        self._remember(check_vectors(seed.vecs, self.dim_, "seed vectors"), self.space_.encode(seed.labels))
        self.replay_gen_ = torch.Generator().manual_seed(derive_seed(self.seed, "mbpa-replay"))
        self.since_replay_ = 0
        self._snapshot()
        return self

    def _remember(self, vecs: np.ndarray, ys: np.ndarray) -> None:
        start, end = self.size_, self.size_ + len(ys)
        self.index_.add(vecs, np.arange(start, end))
        if end > len(self._x):  # capacity doubling: corrections arrive one at a time
            cap = max(end, 2 * len(self._x))
            self._x = np.concatenate([self._x, np.empty((cap - len(self._x), self.dim_), np.float32)])
            self._y = np.concatenate([self._y, np.empty(cap - len(self._y), np.int64)])
        self._x[start:end], self._y[start:end] = vecs, ys
        self.size_ = end

    @property
    def memory_x_(self) -> np.ndarray:
        return self._x[: self.size_]

    @property
    def memory_y_(self) -> np.ndarray:
        return self._y[: self.size_]

    def correct(self, batch: Batch) -> None:
        vecs, ys = self._correction_arrays(batch)
        for i in range(len(ys)):  # one step per correction, in stream order, then into memory
            self._step(torch.from_numpy(vecs[i : i + 1]), torch.from_numpy(ys[i : i + 1]))
            self._remember(vecs[i : i + 1], ys[i : i + 1])
            self.since_replay_ += 1
            if self.since_replay_ >= self.replay_every:  # sparse experience replay
                self.since_replay_ = 0
                for _ in range(self.replay_steps):
                    idx = torch.randint(0, len(self.memory_y_), (self.replay_size,), generator=self.replay_gen_).numpy()
                    self._step(torch.from_numpy(self.memory_x_[idx]), torch.from_numpy(self.memory_y_[idx]))
        self._snapshot()

    def _snapshot(self) -> None:
        head = self._fitted_head()
        self.w64_ = head.weight.detach().double().numpy().copy()
        self.b64_ = head.bias.detach().double().numpy().copy()

    # -- inference: local adaptation ---------------------------------------------------
    def adapted_logits(self, queries: np.ndarray) -> np.ndarray:
        """(n, C) logits of each query under its own locally adapted head."""
        q = queries.astype(np.float64)
        base_q = q @ self.w64_.T + self.b64_
        if self.local_steps == 0 or len(self.memory_y_) == 0:
            return base_q
        _, ids = self.search_.search(queries, min(self.k, len(self.memory_y_)))
        ids = np.maximum(ids, 0)
        x = self.memory_x_[ids].astype(np.float64)  # (n, K, d)
        y = self.memory_y_[ids]  # (n, K)
        n, kk, _ = x.shape
        gram = np.matmul(x, x.transpose(0, 2, 1)) + 1.0  # (n, K, K): features with a 1 for the bias
        base = np.matmul(x, self.w64_.T) + self.b64_  # (n, K, C)
        onehot = np.zeros_like(base)
        np.put_along_axis(onehot, y[:, :, None], 1.0, axis=2)
        coef = np.zeros((n, kk, len(self.b64_)))  # A_i transposed: (K, C)
        for _ in range(self.local_steps):
            logits = base + np.matmul(gram, coef)
            logits -= logits.max(axis=2, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=2, keepdims=True)
            coef = (1 - self.local_lr * self.local_lambda) * coef - self.local_lr * (p - onehot) / kk
        query_gram = np.matmul(x, q[:, :, None])[:, :, 0] + 1.0  # (n, K)
        return base_q + np.matmul(query_gram[:, None, :], coef)[:, 0, :]

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        vecs = check_vectors(batch.vecs, self.dim_, "query vectors")
        return self.space_.decode(np.argmax(self.adapted_logits(vecs), axis=1))

    def uncertainty(self, batch: Batch) -> np.ndarray:
        """Per item, 1 - the adapted head's top probability."""
        self._require_fitted()
        z = self.adapted_logits(check_vectors(batch.vecs, self.dim_, "query vectors"))
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return 1.0 - (p / p.sum(axis=1, keepdims=True)).max(axis=1)

    def footprint(self) -> Footprint:
        self._require_fitted()
        params = sum(p.numel() for p in self._fitted_head().parameters())
        n = len(self.memory_y_)
        return Footprint(entries=n, params=params, bytes=4 * params + n * (4 * self.dim_ + 8))
