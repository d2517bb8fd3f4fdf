"""One place for seed training and seeding of the parametric heads (paper Appendix B).

Every linear-head system trains its seed state here: AdamW (lr 1e-2, weight decay
1e-4), batch 256, 30 epochs, shuffled by a torch.Generator derived from the run seed.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch


def derive_seed(seed: int, key: str) -> int:
    """A stable 63-bit seed from the run seed and a name (never Python's hash())."""
    ss = np.random.SeedSequence([int(seed), zlib.crc32(key.encode("utf-8"))])
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclass(frozen=True)
class SeedTraining:
    epochs: int = 30
    lr: float = 1e-2
    weight_decay: float = 1e-4
    batch_size: int = 256


def init_linear(n_in: int, n_out: int, generator: torch.Generator) -> torch.nn.Linear:
    """nn.Linear with PyTorch's default init, drawn from our generator, not the global RNG."""
    head = torch.nn.Linear(n_in, n_out)
    bound = 1.0 / np.sqrt(n_in)
    with torch.no_grad():
        head.weight.uniform_(-bound, bound, generator=generator)
        head.bias.uniform_(-bound, bound, generator=generator)
    return head


def train_seed(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: SeedTraining,
               generator: torch.Generator) -> None:
    """Mini-batch cross-entropy training of ``model`` on the seed set."""
    if len(y) == 0 or cfg.epochs <= 0:
        return
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    model.train()
    n = len(y)
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=generator)
        for lo in range(0, n, cfg.batch_size):
            idx = order[lo : lo + cfg.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
    model.eval()
