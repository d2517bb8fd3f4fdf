"""Continual-learning baselines over the online linear head: EWC, A-GEM, LwF (paper 4.2).

Each is an OnlineLinear with the same seed training (``training.train_seed``) and the
same one-SGD-step-per-corrected-item rule (lr 0.05); they differ only in what they
keep from the seed state and in the loss or step of a correction.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

from ocrr.specs import Option
from ocrr.systems.base import Footprint
from ocrr.systems.buffers import reservoir_indices
from ocrr.systems.heads.linear import OnlineLinear
from ocrr.systems.seeds import derive_seed

if TYPE_CHECKING:  # torch is imported where a head is built or run (see ocrr.systems.heads.linear)
    import torch


def predicted_class_fisher(head: torch.nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Diagonal Fisher of a linear softmax head: mean over rows of x of the squared gradient
    of log p(c|x), c the head's own predicted class.

    For logits Wx + b, d log p_c / dW = (e_c - p) x^T and d/db = e_c - p, so the mean of
    the squares is ((e_c - p)^2)^T (x^2) / n: closed form, no per-sample backward passes.
    """
    import torch

    with torch.no_grad():
        x64 = x.double()
        logits = x64 @ head.weight.double().T + head.bias.double()
        p = torch.softmax(logits, dim=1)
        r = -p
        r[torch.arange(len(x)), logits.argmax(dim=1)] += 1.0
        r2 = r.square()
        n = max(len(x), 1)
        return (r2.T @ x64.square() / n).float(), (r2.sum(dim=0) / n).float()


class EWC(OnlineLinear):
    """Elastic weight consolidation: one SGD step on CE + ewc_lambda/2 * sum F (theta - theta*)^2
    per corrected item (see ``_step`` for the cap that keeps large lambdas stable).

    F: diagonal Fisher (predicted-class log-likelihood) on ``fisher_samples`` seed items
    drawn without replacement; theta*: the seed head. Output rows added for labels first
    met in a correction get F = 0 (nothing to protect).
    """

    family = "continual"

    options = {
        "ewc_lambda": Option(1000.0, float, low=0, help="weight of the Fisher penalty"),
        "fisher_samples": Option(2000, int, low=0, help="seed items the Fisher is estimated on"),
    }
    default_name = "ewc"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        import torch

        # Own generator: the head's generator must stay in step with online_linear's.
        gen = torch.Generator().manual_seed(derive_seed(self.seed, self.name + "/fisher"))
        idx = torch.randperm(len(x), generator=gen)[: self.fisher_samples]
        self.fisher_n_ = len(idx)
        head = self._fitted_head()
        self.fisher_w_, self.fisher_b_ = predicted_class_fisher(head, x[idx])
        self.anchor_w_ = head.weight.detach().clone()
        self.anchor_b_ = head.bias.detach().clone()

    def penalty(self) -> torch.Tensor:
        """ewc_lambda/2 * sum F (theta - theta*)^2 over weight and bias (differentiable)."""
        head = self._fitted_head()
        w, b = head.weight, head.bias
        quad = (self.fisher_w_ * (w - self.anchor_w_).square()).sum() + (
            self.fisher_b_ * (b - self.anchor_b_).square()
        ).sum()
        return 0.5 * self.ewc_lambda * quad

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One SGD step on CE + penalty, the penalty's gradient lambda F (theta - theta*) taken
        in closed form. Its pull on a coordinate is capped at returning it to the anchor:
        plain SGD overshoots where lr * lambda * F > 1 and diverges beyond 2 (small or
        unconverged seed sets at lambda 1000); below the cap this is exactly plain SGD."""
        import torch

        head = self._fitted_head()
        self._correction_grads(x, y)
        with torch.no_grad():
            for p, fisher, anchor in (
                (head.weight, self.fisher_w_, self.anchor_w_),
                (head.bias, self.fisher_b_, self.anchor_b_),
            ):
                pull = (self.lr * self.ewc_lambda * fisher).clamp_(max=1.0) * (p - anchor)
                assert p.grad is not None  # the loss reaches the weight and the bias
                p.add_(p.grad, alpha=-self.lr)
                p.sub_(pull)

    def capped_parameters(self) -> int:
        """How many coordinates the pull cap applies to (0: every step is plain SGD)."""
        return int(
            (self.lr * self.ewc_lambda * self.fisher_w_ > 1).sum()
            + (self.lr * self.ewc_lambda * self.fisher_b_ > 1).sum()
        )

    def _grow_head(self) -> None:
        import torch.nn.functional as F

        super()._grow_head()
        extra = self._fitted_head().out_features - self.fisher_w_.shape[0]
        self.fisher_w_ = F.pad(self.fisher_w_, (0, 0, 0, extra))
        self.fisher_b_ = F.pad(self.fisher_b_, (0, extra))
        self.anchor_w_ = F.pad(self.anchor_w_, (0, 0, 0, extra))
        self.anchor_b_ = F.pad(self.anchor_b_, (0, extra))

    def footprint(self) -> Footprint:
        fp = super().footprint()  # head, plus the Fisher and the anchor: 3x the head's bytes
        return Footprint(
            entries=0,
            params=fp.params,
            bytes=3 * fp.bytes,
            extra={"fisher_samples": self.fisher_n_, "capped_params": self.capped_parameters()},
        )


def agem_project(g: torch.Tensor, g_mem: torch.Tensor) -> torch.Tensor:
    """A-GEM: if g conflicts with the memory gradient (g . g_mem < 0), drop its component
    along g_mem, so the step does not increase the memory loss to first order."""
    import torch

    dot = torch.dot(g, g_mem)
    if dot < 0:
        norm2 = torch.dot(g_mem, g_mem)
        if norm2 > 0:
            return g - (dot / norm2) * g_mem
    return g


class AGEM(OnlineLinear):
    """Averaged GEM: a reservoir memory of ``memory_size`` seed items; each correction's
    gradient is projected against the mean-CE gradient of ``memory_batch`` memory items.

    The memory holds seed items only (the seed task is the one to protect); the batch is
    drawn without replacement by a generator derived from the run seed.
    """

    family = "continual"

    options = {
        "memory_size": Option(1000, int, low=0, help="seed items kept in the episodic memory (a reservoir)"),
        "memory_batch": Option(64, int, low=0, help="memory items whose gradient a step is projected against"),
    }
    default_name = "a_gem"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        import torch

        rng = np.random.default_rng(derive_seed(self.seed, self.name + "/memory"))
        keep = torch.from_numpy(reservoir_indices(len(x), self.memory_size, rng))
        self.memory_x_ = x[keep].clone()
        self.memory_y_ = y[keep].clone()
        self.batch_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, self.name + "/batches"))

    def _flat_grad(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy's gradient over weight then bias, flat: autograd's values,
        from its formulas without the graph (lean_steps)."""
        import torch

        from ocrr.systems.heads.lean_steps import linear_cross_entropy_gradients

        weight_grad, bias_grad = linear_cross_entropy_gradients(self._fitted_head(), x, y)
        return torch.cat([weight_grad.reshape(-1), bias_grad])

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        import torch

        g = self._flat_grad(x, y)
        if len(self.memory_y_) and self.memory_batch:
            pick = torch.randperm(len(self.memory_y_), generator=self.batch_generator_)[: self.memory_batch]
            g = agem_project(g, self._flat_grad(self.memory_x_[pick], self.memory_y_[pick]))
        with torch.no_grad():
            offset = 0
            for p in self._fitted_head().parameters():
                p.add_(g[offset : offset + p.numel()].view_as(p), alpha=-self.lr)
                offset += p.numel()

    def footprint(self) -> Footprint:
        fp = super().footprint()
        n, d = self.memory_x_.shape
        return Footprint(entries=n, params=fp.params, bytes=fp.bytes + n * (4 * d + 8))


class LwF(OnlineLinear):
    """Learning without forgetting: CE + lwf_lambda * T^2 * KL(teacher_T || student_T) on
    the corrected item, the teacher a frozen copy of the seed head.

    The KL runs over the teacher's outputs (every class the seed head had); rows added
    later for labels first met in a correction are not distilled.
    """

    family = "continual"

    options = {
        "lwf_lambda": Option(1.0, float, low=0, help="weight of the distillation loss"),
        "temperature": Option(2.0, float, gt=0, help="softmax temperature of the distillation"),
    }
    default_name = "lwf"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.teacher_ = copy.deepcopy(self._fitted_head()).requires_grad_(False)

    def _log_teacher(self, x: torch.Tensor) -> torch.Tensor:
        """log softmax(teacher(x) / T): the distillation's fixed target."""
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            return F.log_softmax(self.teacher_(x) / self.temperature, dim=1)

    def distillation_loss(self, x: torch.Tensor) -> torch.Tensor:
        """T^2 * KL(softmax(teacher/T) || softmax(student/T)), mean over rows of x."""
        import torch.nn.functional as F

        t = self.temperature
        log_teacher = self._log_teacher(x)
        student = self._fitted_head()(x)[:, : log_teacher.shape[1]]
        kl = F.kl_div(F.log_softmax(student / t, dim=1), log_teacher, reduction="batchmean", log_target=True)
        return t * t * kl

    def _correction_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return super()._correction_loss(x, y) + self.lwf_lambda * self.distillation_loss(x)

    def _correction_grads(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """``_correction_loss``'s gradients without the graph (lean_steps: the same bits)."""
        from ocrr.systems.heads.lean_steps import linear_lwf_grads

        if type(self)._correction_loss is not LwF._correction_loss:
            super()._correction_grads(x, y)  # a subclass's own loss: autograd
            return
        linear_lwf_grads(self._fitted_head(), x, y, self._log_teacher(x), self.lwf_lambda, self.temperature)

    def footprint(self) -> Footprint:
        fp = super().footprint()
        teacher = sum(p.numel() for p in self.teacher_.parameters())
        return Footprint(entries=0, params=fp.params, bytes=fp.bytes + 4 * teacher)
