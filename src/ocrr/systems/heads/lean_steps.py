"""Training steps for small heads with torch's exact arithmetic, minus its per-step overhead.

A CMR refinement takes thousands of optimiser steps per run on a head of some 60,000
weights and mini-batches of 16 rows. There ``torch.optim.AdamW.step``,
``torch.nn.utils.clip_grad_norm_`` and the autograd engine cost more than the arithmetic
they do: hooks, profiler records, grad-mode switches, state lookups, device grouping and
graph bookkeeping around a handful of small tensor ops. The functions here make the same
tensor calls in the same order as torch does (single-tensor AdamW on CPU, not fused, no
amsgrad; foreach norm and scale; the backward formulas autograd applies to a linear
layer under a mean cross-entropy), so the parameters come out bit for bit the same
(tests/systems/test_lean_steps.py checks each against torch, step by step), only sooner.

The seed heads train with ``fused=True``: ``FusedAdamW`` calls that same fused kernel
with the same arguments. Building torch's first optimiser in a process also imports
``torch._dynamo`` (slow: docs/reference/measurements.md); these steps never do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

_MEAN = 1  # torch's enum value of reduction="mean"
_NO_IGNORED = -100  # cross_entropy's default ignore_index
_ONE = torch.ones(())  # the gradient autograd seeds a scalar loss with


class AdamW:
    """``torch.optim.AdamW(params, lr, betas, eps, weight_decay)`` for CPU float tensors.

    The state (step count, first and second moments) starts at zero like torch's and is
    kept per parameter; a parameter without a gradient is skipped, as torch skips it.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        self.params = list(params)
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.beta1, self.beta2 = float(betas[0]), float(betas[1])
        self.eps = float(eps)
        self.steps = self._zero_counts()
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def _zero_counts(self) -> list:
        return [0] * len(self.params)

    def zero_grad(self) -> None:
        """Drop the gradients (torch's ``zero_grad(set_to_none=True)``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        lr, beta1, beta2, eps = self.lr, self.beta1, self.beta2, self.eps
        for i, param in enumerate(self.params):
            grad = param.grad
            if grad is None:
                continue
            exp_avg, exp_avg_sq = self.exp_avg[i], self.exp_avg_sq[i]
            self.steps[i] += 1
            step = float(self.steps[i])  # torch counts in a float32 tensor and reads it back as a float
            if self.weight_decay != 0:
                param.mul_(1 - lr * self.weight_decay)  # decoupled weight decay
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1 - beta1**step)
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


class FusedAdamW(AdamW):
    """``torch.optim.AdamW(params, lr, betas, eps, weight_decay, fused=True)`` for CPU float
    tensors: torch's step-count increment and its fused kernel, called as its optimiser
    calls them (the step counts are float32 tensors; a parameter without a gradient is
    skipped)."""

    def _zero_counts(self) -> list:
        return [torch.zeros((), dtype=torch.float32) for _ in self.params]

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        steps = [self.steps[i] for i in live]
        torch._foreach_add_(steps, 1)
        torch._fused_adamw_(
            [self.params[i] for i in live],
            [self.params[i].grad for i in live],  # type: ignore[misc]
            [self.exp_avg[i] for i in live],
            [self.exp_avg_sq[i] for i in live],
            [],
            steps,
            amsgrad=False,
            lr=self.lr,
            beta1=self.beta1,
            beta2=self.beta2,
            weight_decay=self.weight_decay,
            eps=self.eps,
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )


@torch.no_grad()
def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> None:
    """Scale the gradients so their joint 2-norm is at most ``max_norm``, as
    ``torch.nn.utils.clip_grad_norm_(params, max_norm)`` does on CPU: the foreach norm of
    each, the norm of those, the coefficient ``max_norm / (norm + 1e-6)`` clamped to 1."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    norms = torch._foreach_norm(grads, 2.0)
    total_norm = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    clip_coef = float(max_norm) / (total_norm + 1e-6)
    torch._foreach_mul_(grads, torch.clamp(clip_coef, max=1.0))


@torch.no_grad()
def linear_cross_entropy_gradients(
    head: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``F.cross_entropy(head(x), y)`` (mean over rows) with respect to
    ``head``'s weight and bias, the values and memory layout ``loss.backward()`` leaves after
    ``zero_grad(set_to_none=True)``, without building a graph: autograd's own formulas
    (nll_loss_backward, _log_softmax_backward_data, then addmm's: grad^T x for the weight,
    the column sums for the bias), called directly."""
    return _head_gradients(_cross_entropy_logit_grads(F.linear(x, head.weight, head.bias), y), x)


def _cross_entropy_logit_grads(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy's gradient with respect to the logits, by autograd's formulas."""
    logp = torch.log_softmax(logits, 1)
    _, total_weight = torch.ops.aten.nll_loss_forward(logp, y, None, _MEAN, _NO_IGNORED)
    grad_logp = torch.ops.aten.nll_loss_backward(_ONE, logp, y, None, _MEAN, _NO_IGNORED, total_weight)
    return torch.ops.aten._log_softmax_backward_data(grad_logp, logp, 1, logp.dtype)


def _head_gradients(grad_logits: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A linear layer's weight and bias gradients from its logits' (addmm's backward)."""
    return grad_logits.t().mm(x), grad_logits.sum(0)


def linear_cross_entropy_grads(head: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor) -> None:
    """Set ``head``'s gradients to ``linear_cross_entropy_gradients``: what
    ``zero_grad(set_to_none=True)`` then ``loss.backward()`` leave on it."""
    head.weight.grad, head.bias.grad = linear_cross_entropy_gradients(head, x, y)


@torch.no_grad()
def linear_lwf_grads(
    head: torch.nn.Linear,
    x: torch.Tensor,
    y: torch.Tensor,
    log_teacher: torch.Tensor,
    lwf_lambda: float,
    temperature: float,
) -> None:
    """Set ``head``'s gradients of LwF's loss, ``cross_entropy(head(x), y) + lwf_lambda * T^2 *
    kl_div(log_softmax(head(x)[:, :c] / T), log_teacher, "batchmean", log_target=True)``
    (c the teacher's classes), as ``zero_grad(set_to_none=True)`` and ``backward()`` leave
    them: each of the loss's two passes through the head gets its own weight and bias
    gradient, summed at the end as autograd sums a leaf's; the distillation's backward is
    autograd's, node by node (the two scalings, the batch mean, the sum, ``exp(target) *
    (target - input)``, log-softmax, the temperature, the slice)."""
    t, n, c = temperature, len(x), log_teacher.shape[1]
    logits = F.linear(x, head.weight, head.bias)  # both passes compute these same values
    ce_weight, ce_bias = _head_gradients(_cross_entropy_logit_grads(logits, y), x)
    student = torch.log_softmax(logits[:, :c] / t, 1)
    scale = _ONE * lwf_lambda * (t * t) / n
    grad_student = -(scale.expand(n, c) * torch.exp(log_teacher))
    grad_scaled = torch.ops.aten._log_softmax_backward_data(grad_student, student, 1, student.dtype) / t
    grad_logits = logits.new_zeros(logits.shape)
    grad_logits[:, :c] = grad_scaled
    kd_weight, kd_bias = _head_gradients(grad_logits, x)
    head.weight.grad, head.bias.grad = ce_weight + kd_weight, ce_bias + kd_bias
