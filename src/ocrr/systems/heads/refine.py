"""Continual model refinement (CMR, Lin et al. 2022, Sec. 4) over a head on frozen embeddings.

The deployed model f_0 is a softmax head (linear by default, ``head=mlp`` for one hidden
layer) trained on the upstream items. After each episode the protocol calls ``correct``
once with the episode's revealed errors E_t; the method refines f_{t-1} into f_t by
``epochs`` passes of AdamW (a fresh optimizer per call) over what it trains on, in
shuffled mini-batches of ``batch_size``, gradients clipped to norm ``clip_norm``. Under
the held-out protocol ``correct`` gets one item at a time: the same rule, E_t = that item.

This module: the upstream head (``cmr_frozen``), continual fine-tuning (``cft``) and the
two regularisers (``online_l2``, ``online_ewc``). The replay family is in
``ocrr.systems.replay.cmr``.

Defaults (the validation-stream search picks the final ones), from one CLINC150 cmr stream
(seed 0, default stream settings) over the preset's grids (``ocrr.studies.cmr_preset``: the
paper's appendix A.2 grids scaled to a head on frozen embeddings): lr 1e-2 and 5 epochs (OEC^(T)
0.83; 10 epochs or lr 3e-2 fix more errors but wipe the upstream classes, UKR^(T) < 0.25),
batch 16, clip 1.0, EWC lambda 1 (of {1, 10, 100, 1000}: OEC^(T) 0.79, 0.72, 0.69, 0.14)
and gamma 0.9. L2 lambda 0.01 lies *below* the paper's grid {1, 5, ..., 100}: the penalty
sums over every weight of the head, and already at 0.1 it blocks most fixes (EFR 0.14,
against 0.73 at 0.01).

Randomness: the linear upstream head is the shared memoised seed head of
``ocrr.systems.heads.training`` (so f_0 is the same as online_linear's, EWC's, ...); the
mini-batch order and the rows added for new labels come from torch generators derived from
the run seed and a fixed key (not the spec), so every method with the same seed shuffles the
same way: CFT and OnlineEWC with lambda 0 take exactly the same steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from ocrr.batch import Batch
from ocrr.specs import Option
from ocrr.systems.base import Footprint, check_vectors, require_labels
from ocrr.systems.heads.lean_steps import AdamW, clip_grad_norm, linear_cross_entropy_grads
from ocrr.systems.heads.linear import LinearHead
from ocrr.systems.heads.training import carry_rows, init_linear, train_seed
from ocrr.systems.labels import LabelSpace
from ocrr.systems.seeds import derive_seed

HEADS = ("linear", "mlp")
# A tensor; the float 0.0 only for a head without parameters (a sum over none of them).
Penalty = Callable[[torch.nn.Module], torch.Tensor | float]


def output_layer(head: torch.nn.Linear | torch.nn.Sequential) -> torch.nn.Linear:
    """The layer with one row per label (the head itself for a linear head)."""
    if isinstance(head, torch.nn.Linear):
        return head
    last = head[-1]
    assert isinstance(last, torch.nn.Linear), "an mlp head ends in its output layer"
    return last


def per_item_loss(head: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each row under ``head`` (no gradient)."""
    with torch.no_grad():
        return F.cross_entropy(head(x), y, reduction="none")


class UpstreamHead(LinearHead):
    """The upstream model f_0: a softmax head over every label, trained on the fit items.

    ``head=linear`` reuses the shared seed head (same f_0 as online_linear); ``head=mlp``
    adds one hidden layer of ``hidden`` ReLU units, trained with the same seed settings.
    """

    family = "cmr refinement"
    options = {
        "head": Option("linear", str, choices=HEADS, help="the upstream head: linear, or one hidden ReLU layer"),
        "hidden": Option(256, int, low=1, help="hidden units of head=mlp"),
    }
    default_name = "cmr_frozen"
    head_: torch.nn.Linear | torch.nn.Sequential | None  # the seed head, or head=mlp's layers

    def _fitted_head(self) -> torch.nn.Linear | torch.nn.Sequential:
        assert self.head_ is not None, "fit() sets head_"
        return self.head_

    def fit(self, seed: Batch) -> UpstreamHead:
        if self.head == "linear":
            super().fit(seed)  # the shared seed head, then _after_seed_training
            return self
        x, y = self._seed_tensors(seed)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "cmr-refine/mlp"))
        self.head_ = torch.nn.Sequential(
            init_linear(self.dim_, self.hidden, gen),
            torch.nn.ReLU(),
            init_linear(self.hidden, len(self.space_), gen),
        )
        train_seed(self.head_, x, y, self.seed_training(), gen)
        self._after_seed_training(x, y)
        return self

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        require_labels(batch, self.name)
        check_vectors(batch.vecs, self.dim_, "vectors")


class FrozenUpstream(UpstreamHead):
    """FrozenUpstream: f_0 as deployed; the revealed errors are never learned (the floor)."""

    learns = False
    default_name = "cmr_frozen"

    def fit(self, seed: Batch) -> FrozenUpstream:
        super().fit(seed)
        if not len(seed):  # fitted on nothing, the head is untrained: it knows no label and answers None
            self.space_ = LabelSpace()  # (as static_linear; f_0 never learns one later)
        return self


class RefiningHead(UpstreamHead):
    """Continual fine-tuning (CFT): f_{t-1} fine-tuned on E_t alone.

    Subclasses add a penalty to the loss (``_penalty``) or change what is trained on
    (``_refine``); the optimiser loop (``train_on``) is shared.
    """

    options = {
        "lr": Option(1e-2, float, gt=0, help="AdamW learning rate of a refinement"),
        "epochs": Option(5, int, low=1, help="passes over what a correct() call trains on"),
        "batch_size": Option(16, int, low=1, help="mini-batch size of a refinement"),
        "clip_norm": Option(1.0, float, gt=0, allow_none=True, help="gradient norm clip; none: no clipping"),
        "weight_decay": Option(0.0, float, low=0, help="AdamW weight decay of a refinement"),
    }
    default_name = "cft"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.batch_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "cmr-refine/batches"))
        self.init_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "cmr-refine/new-rows"))
        self.calls_ = 0  # correct() calls with at least one item: episodes under the cmr protocol

    def correct(self, batch: Batch) -> None:
        vecs, ys = self._correction_arrays(batch)
        if not len(ys):
            return
        self.calls_ += 1
        self._refine(torch.from_numpy(vecs).clone(), torch.from_numpy(ys))

    def _refine(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """f_{t-1} -> f_t on this call's errors."""
        self.train_on(self._fitted_head(), x, y, self._penalty())

    def _penalty(self) -> Penalty | None:
        """The regulariser of this call, built from f_{t-1} (None: plain fine-tuning)."""
        return None

    def train_on(self, head: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, penalty: Penalty | None = None) -> None:
        """``epochs`` passes of a fresh AdamW over (x, y) in shuffled mini-batches."""
        if not len(y):
            return
        # torch.optim.AdamW, clip_grad_norm_ and (a linear head without a penalty) backward(),
        # the same arithmetic at a fraction of the per-step cost: ocrr.systems.heads.lean_steps
        params = list(head.parameters())
        opt = AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        linear = head if penalty is None and isinstance(head, torch.nn.Linear) and head.bias is not None else None
        for _ in range(self.epochs):
            order = torch.randperm(len(y), generator=self.batch_generator_)
            for lo in range(0, len(y), self.batch_size):
                idx = order[lo : lo + self.batch_size]
                if linear is not None:
                    linear_cross_entropy_grads(linear, x[idx], y[idx])
                else:
                    opt.zero_grad()
                    loss = F.cross_entropy(head(x[idx]), y[idx])
                    if penalty is not None:
                        loss = loss + penalty(head)
                    loss.backward()
                if self.clip_norm is not None:
                    clip_grad_norm(params, self.clip_norm)
                opt.step()

    def _grow_head(self) -> None:
        """Add output rows for labels first met in a correction (PyTorch's default init)."""
        head = self._fitted_head()
        old = output_layer(head)
        new = carry_rows(old, init_linear(old.in_features, len(self.space_), self.init_generator_))
        if isinstance(head, torch.nn.Linear):
            self.head_ = new
        else:
            head[-1] = new
        self._after_growth()

    def _after_growth(self) -> None:
        """Hook: pad per-parameter state (Fisher, anchors) to the grown head."""


def snapshot(head: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in head.named_parameters()}


def pad_rows(state: dict[str, torch.Tensor], head: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Zero rows for output rows the head gained since ``state`` was taken."""
    out = {}
    for key, p in head.named_parameters():
        extra = p.shape[0] - state[key].shape[0]
        out[key] = torch.cat([state[key], state[key].new_zeros((extra, *p.shape[1:]))]) if extra else state[key]
    return out


class OnlineL2Reg(RefiningHead):
    """OnlineL2Reg: CFT on E_t + l2_lambda * ||theta - theta_{t-1}||^2 (theta_{t-1}: f_{t-1})."""

    options = {"l2_lambda": Option(0.01, float, low=0, help="weight of the squared distance to f_{t-1}")}
    default_name = "online_l2"

    def _penalty(self) -> Penalty | None:
        return l2_penalty(self._fitted_head(), self.l2_lambda)


def l2_penalty(head: torch.nn.Module, lam: float) -> Penalty | None:
    """lam * squared distance to the parameters ``head`` has now (None when lam is 0)."""
    if lam == 0:
        return None
    anchor = snapshot(head)
    return lambda h: lam * sum((p - anchor[k]).square().sum() for k, p in h.named_parameters())


class OnlineEWC(RefiningHead):
    """Online EWC (Schwarz et al. 2018): CFT on E_t + ewc_lambda/2 * sum F (theta - theta*)^2.

    After each call, F_t is the mean squared per-example gradient of the loss on E_t at the
    refined f_t (true labels), then F <- ewc_gamma * F + F_t (gamma applied once per call)
    and theta* <- f_t. F starts at zero, so the first call is plain CFT.
    """

    options = {
        "ewc_lambda": Option(1.0, float, low=0, help="weight of the Fisher penalty"),
        "ewc_gamma": Option(0.9, float, low=0, help="decay of the running Fisher per call"),
    }
    default_name = "online_ewc"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super()._after_seed_training(x, y)
        self.anchor_ = snapshot(self._fitted_head())
        self.fisher_ = {k: torch.zeros_like(v) for k, v in self.anchor_.items()}

    def _after_growth(self) -> None:
        head = self._fitted_head()
        self.anchor_ = pad_rows(self.anchor_, head)
        self.fisher_ = pad_rows(self.fisher_, head)

    def _penalty(self) -> Penalty | None:
        if self.ewc_lambda == 0:
            return None
        lam, fisher, anchor = self.ewc_lambda, self.fisher_, self.anchor_
        return lambda h: 0.5 * lam * sum((fisher[k] * (p - anchor[k]).square()).sum() for k, p in h.named_parameters())

    def _refine(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super()._refine(x, y)
        head = self._fitted_head()
        new = per_example_fisher(head, x, y)
        self.fisher_ = {k: self.ewc_gamma * self.fisher_[k] + new[k] for k in new}
        self.anchor_ = snapshot(head)

    def footprint(self) -> Footprint:
        fp = super().footprint()  # head, plus the running Fisher and the anchor
        return Footprint(entries=0, params=fp.params, bytes=3 * fp.bytes)


def per_example_fisher(head: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Diagonal empirical Fisher: the mean over rows of the squared gradient of each row's
    cross-entropy, one vectorised pass (torch.func) rather than a backward per row."""
    params = snapshot(head)

    def loss_of_one(p, xi, yi):
        return F.cross_entropy(functional_call(head, p, (xi[None],)), yi[None])

    grads = vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, x, y)
    return {k: g.square().mean(dim=0) for k, g in grads.items()}
