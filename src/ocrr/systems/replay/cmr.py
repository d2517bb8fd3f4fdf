"""The replay family of continual model refinement (CMR, Lin et al. 2022, Sec. 4.3).

Every method here keeps the paper's bi-memory: M_u, the upstream items the head was fitted
on, and M_o, every error revealed so far (E_t joins M_o after the call that learns it).
Every ``replay_every`` calls of ``correct`` (the first call included) a replay set R_t of
``replay_size`` items is chosen, half from each memory (when M_o holds fewer than half,
the rest comes from M_u), and trained on with E_t: mixed into one set (``mode=mixed``, the
paper's Mixed-Tuning) or first R_t, then E_t (``mode=two_stage``, ER as Rolnick et al.).

* ER: R_t drawn uniformly without replacement from each memory.
* MIR / MaxLoss: ``candidates`` items drawn from each memory; a virtual copy of f_{t-1}
  is fine-tuned on E_t with the CFT settings (same lr, epochs, batch size); each memory's
  half of R_t is its candidates with the largest loss increase, loss(virtual) - loss(f_{t-1})
  (MIR), or the largest virtual loss (MaxLoss).
* MIR + OnlineL2Reg: MIR, trained with the OnlineL2Reg penalty to f_{t-1}.
* OfflineRefining (the upper reference): f_0 serves the stream; when it ends, f_0 is
  fine-tuned once on all of its errors plus as many upstream items (f_0 -> f_T).

Defaults inside the preset's search grids (``ocrr.studies.cmr_preset``, after the paper's
appendix A.2 and Table 1): |R_t| 32 (the paper's pick), k 1, c 256, mixed.
"""

from __future__ import annotations

import copy

import torch

from ocrr.specs import Option
from ocrr.systems.base import Footprint, check_vectors, require_labels
from ocrr.systems.buffers import Memory
from ocrr.systems.heads.refine import OnlineL2Reg, Penalty, RefiningHead, l2_penalty, output_layer, per_item_loss
from ocrr.systems.seeds import derive_seed

MODES = ("mixed", "two_stage")


# A replay set R_t: (memory, row indices) for M_u, then for M_o.
Picks = tuple[tuple[Memory, torch.Tensor], ...]


class ExperienceReplay(RefiningHead):
    """ER with the bi-memory: CFT on E_t plus a uniform replay of both memories."""

    options = {
        "replay_size": Option(32, int, low=0, help="items of the replay set R_t, half from each memory"),
        "replay_every": Option(1, int, low=1, help="replay on every N-th correct() call"),
        "mode": Option("mixed", str, choices=MODES, help="R_t mixed with E_t, or R_t first, then E_t"),
    }
    default_name = "er"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super()._after_seed_training(x, y)
        self.upstream_ = Memory(x.shape[1])
        self.upstream_.add(x, y)
        self.online_ = Memory(x.shape[1])
        self.replay_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "cmr-refine/replay"))
        self.last_replay_: tuple[int, ...] = (0, 0)  # items replayed from (M_u, M_o) by the last call, for inspection

    def shares(self) -> tuple[int, int]:
        """How many items R_t takes from (M_u, M_o): half each, M_u filling what M_o lacks."""
        from_online = min(self.replay_size // 2, len(self.online_))
        return min(self.replay_size - from_online, len(self.upstream_)), from_online

    def _refine(self, x: torch.Tensor, y: torch.Tensor) -> None:
        penalty = self._penalty()  # built from f_{t-1}, before anything moves
        head = self._fitted_head()
        picks: Picks = ()
        if (self.calls_ - 1) % self.replay_every == 0 and self.replay_size:
            picks = self._choose(x, y)
        self.last_replay_ = tuple(len(idx) for _, idx in picks) if picks else (0, 0)
        parts = [memory.rows(idx) for memory, idx in picks if len(idx)]
        if parts and self.mode == "two_stage":
            self.train_on(head, torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), penalty)
            self.train_on(head, x, y, penalty)
        else:
            self.train_on(head, torch.cat([x, *(p[0] for p in parts)]), torch.cat([y, *(p[1] for p in parts)]), penalty)
        self.online_.add(x, y)

    def _choose(self, x: torch.Tensor, y: torch.Tensor) -> Picks:
        """((M_u, indices), (M_o, indices)) of this call's replay set R_t."""
        n_up, n_on = self.shares()
        return (
            (self.upstream_, self._draw(len(self.upstream_), n_up)),
            (self.online_, self._draw(len(self.online_), n_on)),
        )

    def _draw(self, n: int, k: int) -> torch.Tensor:
        """k of range(n) uniformly without replacement."""
        return torch.randperm(n, generator=self.replay_generator_)[:k]

    def footprint(self) -> Footprint:
        fp = super().footprint()
        entries = len(self.upstream_) + len(self.online_)
        return Footprint(
            entries=entries,
            params=fp.params,
            bytes=fp.bytes + entries * (4 * self.dim_ + 8),
            extra={"online_memory": len(self.online_)},
        )


class MaxLossReplay(ExperienceReplay):
    """MaxLoss: from ``candidates`` items of each memory, replay those with the largest loss
    under a virtual update of f_{t-1} on E_t (CFT settings)."""

    score = "virtual_loss"

    options = {"candidates": Option(256, int, low=1, help="items drawn from each memory to choose R_t among")}
    default_name = "max_loss"

    def _choose(self, x: torch.Tensor, y: torch.Tensor) -> Picks:
        n_up, n_on = self.shares()
        pools = [
            (self.upstream_, self._draw(len(self.upstream_), self.candidates), n_up),
            (self.online_, self._draw(len(self.online_), self.candidates), n_on),
        ]
        virtual = copy.deepcopy(self._fitted_head())
        self.train_on(virtual, x, y)  # the virtual model: CFT on E_t, no penalty
        chosen: list[tuple[Memory, torch.Tensor]] = []
        for memory, pool, k in pools:
            cx, cy = memory.rows(pool)
            scores = self.interference(virtual, cx, cy)
            top = torch.argsort(scores, descending=True, stable=True)[:k]
            chosen.append((memory, pool[top]))
        return tuple(chosen)

    def interference(self, virtual: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each candidate's score: its loss under the virtual model."""
        return per_item_loss(virtual, x, y)


class MIRReplay(MaxLossReplay):
    """MIR (Aljundi et al. 2019): replay the candidates whose loss the virtual update raises most."""

    score = "loss_increase"
    default_name = "mir"

    def interference(self, virtual: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return per_item_loss(virtual, x, y) - per_item_loss(self._fitted_head(), x, y)


class MIRWithL2(MIRReplay):
    """MIR + OnlineL2Reg: MIR's replay, trained with l2_lambda * ||theta - theta_{t-1}||^2."""

    options = {"l2_lambda": OnlineL2Reg.options["l2_lambda"]}
    default_name = "mir_l2"

    def _penalty(self) -> Penalty | None:
        return l2_penalty(self._fitted_head(), self.l2_lambda)


class OfflineRefining(RefiningHead):
    """OfflineRefining, the paper's upper reference (f_0 -> f_T, Sec. 5.1): f_0 serves the
    whole stream unchanged, so what it is corrected with are f_0's own errors E_<=T; when the
    stream ends (the runner calls ``end_of_stream``) f_0 is fine-tuned once (``epochs``
    passes of the CFT optimiser) on E_<=T plus an upstream sample D' of the same size (all
    upstream items if there are fewer). Its evaluations before the end are f_0's; the cmr
    report shows only its final values, as the paper's Table 1 does.
    """

    default_name = "offline_refining"

    def _after_seed_training(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super()._after_seed_training(x, y)
        self.upstream_ = Memory(x.shape[1])
        self.upstream_.add(x, y)
        self.online_ = Memory(x.shape[1])
        self.upstream_head_ = copy.deepcopy(self._fitted_head())  # f_0
        self.sample_generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "cmr-refine/offline"))

    def correct(self, batch) -> None:
        """Keep the errors; f_0 keeps serving (new labels join the label space only)."""
        self._require_fitted()
        labels = require_labels(batch, self.name)
        vecs = check_vectors(batch.vecs, self.dim_, "vectors")
        if not len(labels):
            return
        self.space_.add(labels)
        self.online_.add(torch.from_numpy(vecs).clone(), torch.from_numpy(self.space_.encode(labels)))
        self.calls_ += 1

    def end_of_stream(self) -> None:
        """f_T: f_0 fine-tuned on every error kept so far plus an upstream sample of as many."""
        self._require_fitted()
        if not len(self.online_):
            return
        self.head_ = copy.deepcopy(self.upstream_head_)
        if output_layer(self._fitted_head()).out_features < len(self.space_):
            self._grow_head()
        errors = self.online_.rows(torch.arange(len(self.online_)))
        pick = torch.randperm(len(self.upstream_), generator=self.sample_generator_)[: len(self.online_)]
        sample = self.upstream_.rows(pick)
        self.train_on(self._fitted_head(), torch.cat([errors[0], sample[0]]), torch.cat([errors[1], sample[1]]))

    def footprint(self) -> Footprint:
        fp = super().footprint()  # the head and f_0, plus both memories
        entries = len(self.upstream_) + len(self.online_)
        return Footprint(
            entries=entries,
            params=fp.params,
            bytes=2 * fp.bytes + entries * (4 * self.dim_ + 8),
            extra={"online_memory": len(self.online_)},
        )
