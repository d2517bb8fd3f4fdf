"""Linear softmax heads over frozen embeddings: static_linear and online_linear (paper 4.1).

The continual-learning baselines (EWC, A-GEM, LwF) subclass OnlineLinear and change
only the per-correction loss or step, so seed training and seeding live in one place.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ocrr.batch import Batch
from ocrr.specs import Option
from ocrr.systems.base import Footprint, System, check_vectors, require_labels
from ocrr.systems.heads.training import SeedTraining, carry_rows, init_linear, seed_head
from ocrr.systems.labels import LabelSpace
from ocrr.systems.seeds import derive_seed

if TYPE_CHECKING:  # torch is imported where a head is built or run: naming a system (a sweep's
    import torch  # plan, `ocrr systems`) must not cost torch's second of imports

# The seed training of every head (ocrr.systems.heads.training.SeedTraining), declared once.
SEED_OPTIONS = {
    "seed_epochs": Option(30, int, low=0, help="epochs of seed training"),
    "seed_lr": Option(1e-2, float, gt=0, help="AdamW learning rate of seed training"),
    "seed_weight_decay": Option(1e-4, float, low=0, help="AdamW weight decay of seed training"),
    "seed_batch_size": Option(256, int, low=1, help="mini-batch size of seed training"),
}


class HeadSystem(System):
    """What every system answering with a torch head shares: ``head_`` maps (n, ``dim_``)
    vectors to one score per label of ``space_``. Prediction, uncertainty and footprint, and
    the opening of ``fit`` and ``correct`` (check the batch, extend the label space)."""

    labels: Iterable[str] | None
    dim_: int
    space_: LabelSpace
    head_: torch.nn.Module | None  # None until fit

    def _fitted_head(self) -> torch.nn.Module:
        """``head_``, which ``fit`` has set (callers check ``_require_fitted`` first)."""
        assert self.head_ is not None, "fit() sets head_"
        return self.head_

    def _seed_tensors(self, seed: Batch, over_all_labels: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Check the seed set, set ``dim_`` and ``space_`` (the declared labels too, unless
        ``over_all_labels`` is False), and return it as (vectors, label indices) tensors."""
        import torch

        labels = require_labels(seed, self.name)
        vecs = check_vectors(seed.vecs, None, "seed vectors")
        self.dim_ = vecs.shape[1]
        self.space_ = LabelSpace.over(self.labels if over_all_labels else (), labels)
        return torch.from_numpy(vecs).clone(), torch.from_numpy(self.space_.encode(labels))

    def _correction_arrays(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Check a correction batch and return (vectors, label indices); a label first met here
        grows the label space and the head (``_grow_head``)."""
        self._require_fitted()
        labels = require_labels(batch, self.name)
        vecs = check_vectors(batch.vecs, self.dim_, "vectors")
        if self.space_.add(labels):
            self._grow_head()
        return vecs, self.space_.encode(labels)

    def _grow_head(self) -> None:
        """Add output rows for labels first met in a correction (open label space)."""
        raise NotImplementedError

    def predict(self, batch: Batch) -> list[str | None]:
        import torch

        self._require_fitted()
        vecs = check_vectors(batch.vecs, self.dim_, "query vectors")
        if not len(self.space_):  # fitted on nothing: no label to give until one is learned
            return [None] * len(vecs)
        with torch.inference_mode():
            winners = self._fitted_head()(torch.from_numpy(vecs)).argmax(dim=1).numpy()
        return self.space_.decode(winners)

    def uncertainty(self, batch: Batch) -> np.ndarray:
        """Per item, 1 - the head's top softmax probability: higher means less sure."""
        import torch

        self._require_fitted()
        vecs = check_vectors(batch.vecs, self.dim_, "query vectors")
        if not len(self.space_):  # no label at all: wholly unsure
            return np.ones(len(vecs))
        with torch.inference_mode():
            top = torch.softmax(self._fitted_head()(torch.from_numpy(vecs)).double(), dim=1).max(dim=1).values.numpy()
        return 1.0 - top

    def footprint(self) -> Footprint:
        self._require_fitted()
        params = sum(p.numel() for p in self._fitted_head().parameters())
        return Footprint(entries=0, params=params, bytes=4 * params)


class LinearHead(HeadSystem, System):
    """Shared machinery: label space, seeded head, seed training, batched prediction."""

    family = "parametric"
    over_all_labels = True  # head over the dataset's whole label list, or the seed's labels only
    options = SEED_OPTIONS
    default_name = "linear"
    head_: torch.nn.Module | None = None  # until fit

    def fit(self, seed: Batch) -> LinearHead:
        import torch

        x, y = self._seed_tensors(seed, self.over_all_labels)
        self.generator_ = torch.Generator().manual_seed(derive_seed(self.seed, self.name))
        with warnings.catch_warnings():
            # an empty seed set over the seed's labels only gives a head with no output row
            # (predict then answers None); torch warns that initialising it does nothing
            warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
            if len(y):
                self.head_ = seed_head(x, y, len(self.space_), self.seed_training(), self.seed)
            else:  # nothing to train: seed_head's initial head, not its cache (keyed by the empty bytes of x)
                generator = torch.Generator().manual_seed(derive_seed(self.seed, "seed-head"))
                self.head_ = init_linear(x.shape[1], len(self.space_), generator).eval()
        self._after_seed_training(x, y)
        return self

    def seed_training(self) -> SeedTraining:
        return SeedTraining(self.seed_epochs, self.seed_lr, self.seed_weight_decay, self.seed_batch_size)

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Hook for methods that keep something of the seed state (Fisher, teacher, memory)."""

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        require_labels(batch, self.name)


class StaticLinear(LinearHead):
    """Softmax head over the seed set's classes only, trained once; corrections are ignored."""

    family = "strawman"
    learns = False  # corrections never change predictions (see System)
    over_all_labels = False
    default_name = "static_linear"


class OnlineLinear(LinearHead):
    """Head over every class, one plain SGD step (no momentum) per corrected item."""

    family = "strawman"
    options = {"lr": Option(0.05, float, low=0, help="SGD learning rate of a correction's step")}
    default_name = "online_linear"
    head_: torch.nn.Linear | None  # the seed head, grown by carry_rows: always one Linear layer

    def correct(self, batch: Batch) -> None:
        import torch

        vecs, ys = self._correction_arrays(batch)
        for i in range(len(ys)):  # one step per correction, in stream order
            x = torch.from_numpy(vecs[i : i + 1])
            y = torch.from_numpy(ys[i : i + 1])
            self._step(x, y)

    def _fitted_head(self) -> torch.nn.Linear:
        assert self.head_ is not None, "fit() sets head_"
        return self.head_

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One SGD step on this correction's loss."""
        import torch

        head = self._fitted_head()
        self._correction_grads(x, y)
        with torch.no_grad():
            for p in head.parameters():
                assert p.grad is not None  # the loss reaches every weight and bias
                p.add_(p.grad, alpha=-self.lr)

    def _correction_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.nn.functional.cross_entropy(self._fitted_head()(x), y)

    def _correction_grads(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Leave the correction loss's gradients on the head, as ``zero_grad(set_to_none=True)``
        and ``backward()`` leave them. This class's loss, plain cross-entropy, takes autograd's
        formulas without the graph (lean_steps: the same bits, about half the time)."""
        head = self._fitted_head()
        if type(self)._correction_loss is OnlineLinear._correction_loss:
            from ocrr.systems.heads.lean_steps import linear_cross_entropy_grads

            linear_cross_entropy_grads(head, x, y)
            return
        head.zero_grad(set_to_none=True)
        self._correction_loss(x, y).backward()

    def _grow_head(self) -> None:
        self.head_ = carry_rows(self._fitted_head(), init_linear(self.dim_, len(self.space_), self.generator_))
