"""The methods EvalOCL compares (Hammoud et al., ICCV 2023, Sec. 3.4 and 4), over frozen embeddings.

Every method keeps an unbounded store of every item it has been given (upstream and
stream). Per ``correct`` call (one incoming batch) a parametric method makes ``budget``
gradient updates (the compute budget: 1 is the paper's fast stream, 5 or 10 its slow
stream), each on a rehearsal batch of ``batch_size`` items drawn from the store by its
sampler:

* ``uniform``: uniformly without replacement from everything stored;
* ``fifo``: the newest items stored (the incoming batch first);
* ``mixed``: half the newest, half uniform.

The head is linear (``head=mlp``: the released code's two-layer MLP, ``hidden`` ReLU units),
with softmax cross-entropy; ``cosine=true`` makes the output layer CosineFC: logits =
sigma * cos(x, w_c), sigma learned, no bias. One AdamW optimiser (or the paper's SGD with
``optimizer=sgd``) lives for the whole stream. lr 1e-2 was chosen on a Banking77 validation
stream (ocl:stay=0.9:split=val, er_uniform, budget 1: near-future accuracy 0.795 at 1e-2,
0.702 at 1e-3, 0.051 with the paper's SGD at 0.005, which barely moves a head from scratch
in 10k updates). Over frozen embeddings every head is "FC-only":
``er_uniform`` and ``fc_only`` are the same method with a linear head, and differ when ER
takes ``head=mlp`` (a trainable layer under the classifier, the nearest thing here to the
paper's full-model training). ``acm`` is ACM: 1-nearest-neighbour (cosine) over the
growing store (the paper's k=2 with "majority if the count exceeds one, else the nearest"
is exactly 1-NN).

The budget is a hyperparameter of the system (it is the learner's compute), so it is in
the system's spec and task id: ``er_uniform:budget=10`` is the slow stream.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ocrr.batch import Batch
from ocrr.index.exact import ExactIndex
from ocrr.specs import Option
from ocrr.systems.base import Footprint, System, check_vectors, require_labels
from ocrr.systems.buffers import SAMPLERS, Memory, rehearsal_indices
from ocrr.systems.heads.linear import HeadSystem
from ocrr.systems.heads.training import SeedTraining, init_linear, train_seed
from ocrr.systems.seeds import derive_seed

HEADS = ("linear", "mlp")
OPTIMIZERS = ("adamw", "sgd")


class CosineLinear(torch.nn.Module):
    """CosineFC's output layer: sigma * cos(x, w_c) for every class c, sigma learned, no bias."""

    def __init__(self, n_in: int, n_out: int, sigma: float, generator: torch.Generator):
        super().__init__()
        self.weight = torch.nn.Parameter(init_linear(n_in, n_out, generator).weight.detach().clone())
        self.sigma = torch.nn.Parameter(torch.tensor(float(sigma)))

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sigma * F.normalize(x, dim=1) @ F.normalize(self.weight, dim=1).T


class OclReplay(HeadSystem, System):
    """A head trained by rehearsal from an unbounded store, ``budget`` updates per incoming batch."""

    family = "online continual learning"
    options = {
        "sampler": Option("uniform", str, choices=SAMPLERS, help="which stored items a rehearsal batch draws"),
        "head": Option("linear", str, choices=HEADS, help="linear, or the released code's two-layer MLP"),
        "cosine": Option(False, bool, help="CosineFC output layer: sigma * cos(x, w_c), no bias"),
        "budget": Option(1, int, low=1, help="gradient updates per incoming batch (the compute budget)"),
        "batch_size": Option(16, int, low=1, help="items of a rehearsal batch"),
        "optimizer": Option("adamw", str, choices=OPTIMIZERS, help="one optimiser for the whole stream"),
        "lr": Option(1e-2, float, gt=0, help="learning rate"),
        "weight_decay": Option(1e-4, float, low=0, help="weight decay"),
        "hidden": Option(256, int, low=1, help="hidden units of head=mlp"),
        "sigma": Option(10.0, float, gt=0, help="CosineFC's starting scale"),
    }
    default_name = "er_uniform"
    head_ = None  # until fit

    # -- state ----------------------------------------------------------------------------

    def fit(self, seed: Batch) -> OclReplay:
        x, y = self._seed_tensors(seed)
        self.init_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "ocl/head"))
        self.sample_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "ocl/rehearsal"))
        self.head_ = self._new_head(len(self.space_))
        self.store_ = Memory(self.dim_)
        self.updates_ = 0
        if len(y):  # an upstream: stored, and the head fitted on it first (seed settings)
            train_seed(self.head_, x, y, SeedTraining(), self.init_generator_)
            self.store_.add(x, y)
        self.optimizer_ = self._new_optimizer()
        return self

    def _new_head(self, n_out: int) -> torch.nn.Module:
        gen, d = self.init_generator_, self.dim_
        out_in = self.hidden if self.head == "mlp" else d
        out = CosineLinear(out_in, n_out, self.sigma, gen) if self.cosine else init_linear(out_in, n_out, gen)
        if self.head == "mlp":
            return torch.nn.Sequential(init_linear(d, self.hidden, gen), torch.nn.ReLU(), out)
        return out

    def _new_optimizer(self) -> torch.optim.Optimizer:
        params = self._fitted_head().parameters()
        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)

    def _grow_head(self) -> None:
        """Rows for labels first met in a stream batch; the optimiser restarts on the new shapes."""
        head = self._fitted_head()
        mlp: torch.nn.Sequential | None = None
        if self.head == "mlp":
            assert isinstance(head, torch.nn.Sequential)  # _new_head's layers
            mlp = head
        last = head if mlp is None else mlp[-1]
        assert isinstance(last, (torch.nn.Linear, CosineLinear))  # _new_head's output layer
        new = (
            CosineLinear(last.in_features, len(self.space_), self.sigma, self.init_generator_)
            if self.cosine
            else init_linear(last.in_features, len(self.space_), self.init_generator_)
        )
        with torch.no_grad():
            new.weight[: last.weight.shape[0]] = last.weight
            if self.cosine:
                assert isinstance(new, CosineLinear) and isinstance(last, CosineLinear)
                new.sigma.copy_(last.sigma)
            else:
                assert isinstance(new, torch.nn.Linear) and isinstance(last, torch.nn.Linear)
                new.bias[: last.bias.shape[0]] = last.bias
        if mlp is not None:
            mlp[-1] = new
        else:
            self.head_ = new
        self.optimizer_ = self._new_optimizer()

    # -- learning -------------------------------------------------------------------------

    def correct(self, batch: Batch) -> None:
        vecs, ys = self._correction_arrays(batch)
        if not len(ys):
            return
        self.store_.add(torch.from_numpy(vecs).clone(), torch.from_numpy(ys))
        head = self._fitted_head()
        head.train()
        for _ in range(self.budget):
            x, y = self.store_.rows(self.rehearsal_batch())
            self.optimizer_.zero_grad(set_to_none=True)
            F.cross_entropy(head(x), y).backward()
            self.optimizer_.step()
            self.updates_ += 1
        head.eval()

    def rehearsal_batch(self) -> torch.Tensor:
        """Store rows of one update, by the sampler."""
        return rehearsal_indices(len(self.store_), self.batch_size, self.sampler, self.sample_generator_)

    def footprint(self) -> Footprint:
        fp = super().footprint()
        entries = len(self.store_)
        return Footprint(
            entries=entries,
            params=fp.params,
            bytes=fp.bytes + entries * (4 * self.dim_ + 8),
            extra={"updates": self.updates_},
        )


class NearestNeighbour(System):
    """ACM: the label of the most similar stored item (cosine), over every item given so far."""

    family = "online continual learning"

    def __init__(self, labels=None, seed: int = 0, name: str = "acm"):
        self.name = name
        self.labels = labels
        self.seed = seed
        self.index_: ExactIndex | None = None

    def _fitted_index(self) -> ExactIndex:
        """``index_``, which ``fit`` has set."""
        assert self.index_ is not None, "fit() sets index_"
        return self.index_

    def fit(self, seed: Batch) -> NearestNeighbour:
        labels = require_labels(seed, self.name)
        vecs = check_vectors(seed.vecs, None, "seed vectors")
        self.dim_ = vecs.shape[1]
        self.index_ = ExactIndex(self.dim_)
        self.stored_: list[str] = []
        self._add(vecs, labels)
        return self

    def _add(self, vecs: np.ndarray, labels) -> None:
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        self._fitted_index().add(
            vecs / np.maximum(norms, 1e-12), np.arange(len(self.stored_), len(self.stored_) + len(vecs))
        )
        self.stored_ += list(labels)

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        vecs = check_vectors(batch.vecs, self.dim_, "query vectors")
        if not self.stored_:
            return [None] * len(vecs)
        _, ids = self._fitted_index().search(vecs, 1)
        return [self.stored_[int(i)] for i in ids[:, 0]]

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        labels = require_labels(batch, self.name)
        vecs = check_vectors(batch.vecs, self.dim_, "vectors")
        if len(labels):
            self._add(vecs, labels)

    def footprint(self) -> Footprint:
        self._require_fitted()
        return Footprint(
            entries=len(self.stored_), bytes=self._fitted_index().nbytes + sum(len(s) for s in self.stored_) + 8
        )
