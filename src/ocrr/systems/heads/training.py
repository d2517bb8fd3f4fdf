"""One place for seed training and seeding of the parametric heads (paper Appendix B).

Every linear-head system trains its seed state here: AdamW (lr 1e-2, weight decay
1e-4), batch 256, 30 epochs, shuffled by a torch.Generator derived from the run seed.
The upstream head depends only on (seed set, label list, training config, seed), not
on the method that will later correct it: online_linear, EWC, A-GEM, LwF and kNN-LM
therefore all start from the same seed model, so their differences are due to how
they absorb corrections alone. It is trained once (kept in memory and in the seed-state
cache, systems/fit_cache.py) and copied.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from ocrr.systems.fit_cache import cached_fit
from ocrr.systems.seeds import derive_seed

if TYPE_CHECKING:  # torch is imported where a head is built
    import torch


@dataclass(frozen=True)
class SeedTraining:
    epochs: int = 30
    lr: float = 1e-2
    weight_decay: float = 1e-4
    batch_size: int = 256


def carry_rows(old: torch.nn.Linear, new: torch.nn.Linear) -> torch.nn.Linear:
    """``new`` (more output rows) with ``old``'s rows copied over its first ones: a head grown
    for labels first met in a correction keeps everything it learned."""
    import torch

    with torch.no_grad():
        new.weight[: old.out_features] = old.weight
        new.bias[: old.out_features] = old.bias
    return new


def init_linear(n_in: int, n_out: int, generator: torch.Generator) -> torch.nn.Linear:
    """nn.Linear with PyTorch's default init, drawn from our generator, not the global RNG."""
    import torch

    head = torch.nn.Linear(n_in, n_out)
    bound = 1.0 / np.sqrt(n_in)
    with torch.no_grad():
        head.weight.uniform_(-bound, bound, generator=generator)
        head.bias.uniform_(-bound, bound, generator=generator)
    return head


def train_seed(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: SeedTraining, generator: torch.Generator
) -> None:
    """Mini-batch cross-entropy training of ``model`` on the seed set (fused AdamW)."""
    import torch

    if len(y) == 0 or cfg.epochs <= 0:
        return
    plain_linear = type(model) is torch.nn.Linear and model.bias is not None
    step = _linear_step(cast("torch.nn.Linear", model), cfg) if plain_linear else _autograd_step(model, cfg)
    model.train()
    n = len(y)
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=generator)
        for lo in range(0, n, cfg.batch_size):
            idx = order[lo : lo + cfg.batch_size]
            step(x[idx], y[idx])
    model.eval()  # the last batch's gradients stay on the model, as autograd leaves them


def _autograd_step(model: torch.nn.Module, cfg: SeedTraining):
    """One step of torch's fused AdamW after ``loss.backward()``."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def _linear_step(head: torch.nn.Linear, cfg: SeedTraining):
    """``_autograd_step`` for a linear head, bit for bit: autograd's gradient formulas and
    torch's fused AdamW kernel, without the graph and the optimiser's machinery (22-35 %
    sooner; tests/systems/test_lean_steps.py checks it against torch)."""
    from ocrr.systems.heads.lean_steps import FusedAdamW, linear_cross_entropy_grads

    opt = FusedAdamW([head.weight, head.bias], lr=cfg.lr, weight_decay=cfg.weight_decay)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        linear_cross_entropy_grads(head, x, y)
        opt.step()

    return step


_SEED_HEADS: OrderedDict[bytes, dict] = OrderedDict()
_SEED_HEADS_KEPT = 4


def seed_head(x: torch.Tensor, y: torch.Tensor, n_out: int, cfg: SeedTraining, seed: int) -> torch.nn.Linear:
    """A fresh copy of the upstream linear head for this seed set (trained on first request)."""
    import torch

    key = hashlib.blake2b(x.numpy().tobytes(), digest_size=16)
    key.update(y.numpy().tobytes())
    key.update(repr((tuple(x.shape), n_out, astuple(cfg), int(seed))).encode())
    digest = key.digest()
    generator = torch.Generator().manual_seed(derive_seed(seed, "seed-head"))
    head = init_linear(x.shape[1], n_out, generator)
    if digest in _SEED_HEADS:
        _SEED_HEADS.move_to_end(digest)
    else:

        def train() -> dict:
            train_seed(head, x, y, cfg, generator)
            return {k: v.detach().clone() for k, v in head.state_dict().items()}

        # on disk too: a sweep runs each seed for every system in turn, so a worker's few
        # in-memory heads are evicted long before the next system asks for the same one
        _SEED_HEADS[digest] = cached_fit("seed-head", [torch.__version__, digest], train)
        while len(_SEED_HEADS) > _SEED_HEADS_KEPT:
            _SEED_HEADS.popitem(last=False)
    head.load_state_dict(_SEED_HEADS[digest])
    head.eval()
    return head
