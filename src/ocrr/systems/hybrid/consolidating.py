"""consolidating: the substrate's ledger and vote for instant fixes, plus a head consolidated
from the ledger as the stream goes (fast episodic memory, slow parametric memory).

The substrate's memory already holds what a good classifier needs; its 5-neighbour vote
uses it poorly where a class is diffuse (CLINC150's out-of-scope) or a new class has few
entries. So a softmax head over frozen embeddings is re-fitted from the ledger every
``refit_every`` corrections: warm-started from the current head, ``refit_steps`` AdamW
steps (a fresh optimizer each time) on mini-batches of ``refit_batch`` ledger entries drawn
by ``sampling``: ``prior`` (default) draws a label at its seed-set frequency (a label known
only from corrections at the median label's), then one of its entries, so a new class with a
handful of corrections is seen as often as a typical seed class; ``balanced`` and ``share``
are the alternatives (see ``_sampler``). A correction itself only appends to the ledger: its cost is the substrate's,
except on every ``refit_every``-th one, which also consolidates (timed apart in
``consolidation_seconds_``).

Prediction combines the two memories (``combine``):

* ``mix`` (default): the entries newer than the head (not yet consolidated) decide where
  they are in the vote's margin band: the substrate's vote answers (the instant fix).
  Elsewhere, p = (1 - w) p_head + w p_vote, p_vote the band's vote shares per label.
* ``fresh``: the same override, the head alone elsewhere.
* ``head``: the head alone (ablation: no instant fix between consolidations).
* ``vote``: the vote alone (ablation: the substrate; the head is trained but never asked).

Randomness: the seed head is the shared memoised one (the same as online_linear's); each
consolidation draws its batches from a torch generator seeded by SeedSequence(run seed,
crc32(key), consolidation number), so a seed gives the same heads and answers every time.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.index.vote import band, vote
from ocrr.specs import Option
from ocrr.systems.base import Footprint, check_vectors
from ocrr.systems.buffers import LABEL_SAMPLINGS, label_sampler
from ocrr.systems.heads.training import SeedTraining, carry_rows, init_linear, seed_head
from ocrr.systems.labels import LabelSpace
from ocrr.systems.seeds import derive_seed
from ocrr.systems.substrate.core import Substrate

if TYPE_CHECKING:  # torch is imported where a head is built or run (see ocrr.systems.heads.linear)
    import torch

    from ocrr.systems.heads.lean_steps import AdamW

COMBINE = ("mix", "fresh", "head", "vote")
_BACKGROUND: ThreadPoolExecutor | None = None


def _background() -> ThreadPoolExecutor:
    """One thread for every background consolidation of the process (they queue)."""
    global _BACKGROUND
    if _BACKGROUND is None:
        _BACKGROUND = ThreadPoolExecutor(1, thread_name_prefix="ocrr-consolidate")
    return _BACKGROUND


def _on_torch_threads(threads: int, work, *args):
    """Run ``work`` with ``threads`` torch threads on this thread. A thread's torch thread
    count is its own, fixed when the thread first uses torch (the process's latest
    ``set_num_threads``, e.g. a caller's temporary one-thread setting), and it sets the
    summation order: the background head matches the synchronous one only on as many threads."""
    import torch

    torch.set_num_threads(threads)
    return work(*args)


SAMPLING = LABEL_SAMPLINGS


class ConsolidatingMemory(Substrate):
    family = "hybrid"
    options = {
        "refit_every": Option(10, int, low=1, help="corrections between consolidations"),
        "refit_steps": Option(50, int, low=0, help="AdamW steps of a consolidation"),
        "refit_batch": Option(64, int, low=1, help="ledger entries per step"),
        "sampling": Option("prior", str, choices=SAMPLING, help="how a step draws its entries (see _sampler)"),
        "correction_share": Option(0.5, float, low=0, high=1, help="sampling=share: share of corrections per batch"),
        "lr": Option(1e-2, float, gt=0, help="AdamW learning rate of a consolidation"),
        "weight_decay": Option(1e-4, float, low=0, help="AdamW weight decay of a consolidation"),
        "combine": Option("mix", str, choices=COMBINE, help="how the head and the vote answer together"),
        "vote_weight": Option(0.5, float, low=0, high=1, help="combine=mix: weight of the vote's shares"),
        "keep_optimizer": Option(False, bool, help="one AdamW across consolidations instead of a fresh one"),
        "seed_epochs": Option(30, int, low=0, help="epochs of the seed head's training"),
        "background": Option(False, bool, help="consolidate on a background thread, one interval later"),
    }
    default_name = "consolidating"
    widened_options = ("correction_share", "lr", "weight_decay", "vote_weight")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.background and self.keep_optimizer:
            raise OcrrError(
                f"{self.name}: background=true trains each head on a copy, so there is no optimizer to keep "
                "from one consolidation to the next; drop keep_optimizer or background."
            )

    def hyperparameters(self) -> dict:
        extra = (
            {"background": True} if self.background else {}
        )  # (absent when off: older runs' records stay as they were)
        return {
            **super().hyperparameters(),
            "refit_every": self.refit_every,
            "refit_steps": self.refit_steps,
            "refit_batch": self.refit_batch,
            "sampling": self.sampling,
            "correction_share": self.correction_share,
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "combine": self.combine,
            "vote_weight": self.vote_weight,
            "seed_epochs": self.seed_epochs,
            "keep_optimizer": self.keep_optimizer,
            **extra,
        }

    # -- learning -------------------------------------------------------------------
    def fit(self, seed: Batch) -> ConsolidatingMemory:
        import torch

        super().fit(seed)
        ledger = self._fitted_ledger()
        assert ledger.dim is not None  # fit made the ledger with the seed set's dim
        self.n_seed_ = len(ledger)
        labels = list(seed.labels) if seed.labels is not None else []
        self.head_space_ = LabelSpace.over(self.labels, labels)
        x = torch.from_numpy(np.array(np.asarray(seed.vecs, np.float32).reshape(len(seed), ledger.dim)))
        y = torch.from_numpy(self.head_space_.encode(labels))
        self.head_ = seed_head(x, y, len(self.head_space_), SeedTraining(epochs=self.seed_epochs), self.seed)
        self.consolidated_upto_ = self.n_seed_  # ledger entries the head has been trained with
        self.consolidations_ = 0
        self.consolidation_seconds_ = 0.0
        self.opt_: AdamW | None = None
        # (a consolidation's result: (head, space, optimizer, rows trained on, seconds); see _refit)
        self.job_: Future[tuple] | tuple | None = (
            None  # background: the consolidation under way (a Future, or its result once pickled)
        )
        self.job_due_ = 0  # background: the ledger size at which its head is installed
        self.handover_wait_seconds_ = 0.0  # background: time corrections waited for a head at its hand-over
        self._snapshot_head()
        return self

    def correct(self, batch: Batch) -> None:
        super().correct(batch)  # the ledger append: the instant fix
        ledger = self._fitted_ledger()
        if not self.background:
            if len(ledger) - self.consolidated_upto_ >= self.refit_every:
                self.consolidate()
            return
        if self.job_ is not None and len(ledger) >= self.job_due_:
            self._install_job()
        if self.job_ is None and len(ledger) - self.consolidated_upto_ >= self.refit_every:
            import torch

            job = (_on_torch_threads, torch.get_num_threads(), self._refit, *self._refit_inputs())
            self.job_ = _background().submit(*job)
            self.job_due_ = len(ledger) + self.refit_every

    def consolidate(self) -> None:
        """Re-fit the head from the ledger now (also called every ``refit_every`` corrections;
        with ``background``, the consolidation under way is installed first)."""
        self._require_fitted()
        if self.job_ is not None:
            self._install_job()
        self._install(*self._refit(*self._refit_inputs()))

    def _refit_inputs(self) -> tuple:
        """What a consolidation reads, as of now. Background: a copy of the head (the system
        goes on answering with its own meanwhile) and the rows it trains on."""
        ledger = self._fitted_ledger()
        n = len(ledger)
        vecs, entry_label = ledger.vectors[:n], self._entry_label[:n]
        if self.background:  # (the ledger's rows are append-only: a view of the first n stays as it is)
            head, space = copy.deepcopy(self.head_), copy.deepcopy(self.head_space_)
            return head, space, None, vecs, entry_label.copy(), list(self.space_.names), self.consolidations_
        return self.head_, self.head_space_, self.opt_, vecs, entry_label, list(self.space_.names), self.consolidations_

    def _refit(self, head, space, opt, vecs: np.ndarray, entry_label: np.ndarray, names: list, number: int):
        """The ``number``-th consolidation of ``head`` (over ``space``) on ledger rows
        ``vecs`` with substrate label indices ``entry_label`` (label names ``names``): the
        same arithmetic whether it runs in ``correct`` or in the background thread, so the
        two give the same heads. Returns (head, space, optimizer, rows trained on, seconds)."""
        import torch

        from ocrr.systems.heads.lean_steps import AdamW, linear_cross_entropy_grads

        t0 = time.perf_counter()
        n = len(vecs)
        head, space, grew = self._grown(head, space, names)
        if grew:
            opt = None  # its moments belong to the old parameters
        if self.refit_steps and n > 0:
            gen = torch.Generator().manual_seed(self._refit_seed(number))
            rows = np.asarray(vecs)  # each batch gathered from it, a copy for torch (not the whole ledger's)
            y_all = torch.from_numpy(space.encode(names)[entry_label])
            draw = self._sampler(y_all, gen)
            if opt is None or not self.keep_optimizer:
                opt = AdamW(head.parameters(), lr=self.lr, weight_decay=self.weight_decay)
            head.train()
            for _ in range(self.refit_steps):
                idx = draw()
                # torch.optim.AdamW after loss.backward(), the same arithmetic without the graph
                linear_cross_entropy_grads(head, torch.from_numpy(rows[idx.numpy()]), y_all[idx])
                opt.step()
            head.eval()
        return head, space, opt, n, time.perf_counter() - t0

    def _install(self, head, space, opt, n: int, seconds: float) -> None:
        self.head_, self.head_space_, self.opt_ = head, space, opt
        self.consolidated_upto_ = n
        self.consolidations_ += 1
        self._snapshot_head()
        self.consolidation_seconds_ += seconds

    def _install_job(self) -> None:
        """Wait for the background consolidation (at its fixed hand-over point: the answers
        never depend on how fast it ran) and answer with its head from now on."""
        job = self.job_
        assert job is not None  # callers install only a consolidation under way
        t0 = time.perf_counter()
        result = job.result() if isinstance(job, Future) else job
        self.handover_wait_seconds_ += time.perf_counter() - t0
        self.job_ = None
        self._install(*result)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if isinstance(state.get("job_"), Future):  # a thread's future does not pickle: its result does
            state["job_"] = state["job_"].result()
        return state

    def _sampler(self, y_all: torch.Tensor, gen: torch.Generator):
        """A function drawing one mini-batch of ledger rows, by ``sampling`` (buffers.label_sampler)."""
        return label_sampler(y_all, self.n_seed_, self.refit_batch, self.sampling, self.correction_share, gen)

    def _refit_seed(self, number: int) -> int:
        ss = np.random.SeedSequence([derive_seed(self.seed, "consolidating-refit"), number])
        return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def _grown(self, head, space: LabelSpace, names: list) -> tuple:
        """(head, space, grew): rows for labels the ledger holds and the head does not (an open label space)."""
        import torch

        if not space.add(names):
            return head, space, False
        gen = torch.Generator().manual_seed(derive_seed(self.seed, f"consolidating-grow-{len(space)}"))
        return carry_rows(head, init_linear(head.in_features, len(space), gen)), space, True

    def _snapshot_head(self) -> None:
        # float64 copies: the same arithmetic for one query or many (batched == one by one)
        self.w64_ = self.head_.weight.detach().double().numpy().copy()
        self.b64_ = self.head_.bias.detach().double().numpy().copy()

    # -- inference ------------------------------------------------------------------
    def _scores(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(combined probabilities over the substrate's label space (n, C), the vote's band
        shares (n, C), the vote's winning label index per row, whether the vote answers)."""
        sims, ids = self.search_.search(queries, self.k)
        ranks = self._neighbour_ranks(ids)
        winners = vote(sims, ids, ranks, self.rule_)
        winner_idx = np.full(len(queries), -1, np.int64)
        has = winners >= 0
        if has.any():
            # (ranks >= 0 decode to names, never None)
            winner_idx[has] = self.space_.encode(cast("list[str]", self.space_.decode_ranks(winners[has])))
        labels = np.where(ids >= 0, self._entry_label[np.maximum(ids, 0)], -1)
        band = self._band(sims, labels)
        n_labels = len(self.space_)
        p_vote = np.zeros((len(queries), n_labels))
        rows, cols = np.nonzero(band)
        np.add.at(p_vote, (rows, labels[rows, cols]), 1.0)
        total = p_vote.sum(axis=1, keepdims=True)
        p_vote = np.divide(p_vote, total, out=np.zeros_like(p_vote), where=total > 0)
        fresh = (band & (ids >= self.consolidated_upto_)).any(axis=1)
        if self.combine == "vote":
            return p_vote, p_vote, winner_idx, has
        p_head = self._head_proba(queries)
        if self.combine == "head":
            return p_head, p_vote, winner_idx, np.zeros(len(queries), bool)
        if self.combine == "fresh":
            return p_head, p_vote, winner_idx, fresh & has
        w = self.vote_weight
        return (1 - w) * p_head + w * p_vote, p_vote, winner_idx, fresh & has

    def _band(self, sims: np.ndarray, labels: np.ndarray) -> np.ndarray:
        if sims.shape[1] == 0:
            return labels >= 0
        return band(sims, labels, self.rule_.margin)[2]

    def _head_proba(self, queries: np.ndarray) -> np.ndarray:
        """p_head over the substrate's label space (labels newer than the head get 0)."""
        logits = queries.astype(np.float64) @ self.w64_.T + self.b64_
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        cols, rows = self._head_columns()
        out = np.zeros((len(queries), len(self.space_)))
        out[:, cols] = p[:, rows]
        return out

    def _head_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(substrate label indices the head has a row for, those rows); cached per space size."""
        key = (len(self.space_), len(self.head_space_))
        if getattr(self, "_columns_key", None) != key:
            known = [i for i, name in enumerate(self.space_.names) if name in self.head_space_]
            self._columns = (
                np.asarray(known, np.int64),
                self.head_space_.encode([self.space_.names[i] for i in known]),
            )
            self._columns_key = key
        return self._columns

    def predict(self, batch: Batch) -> list[str | None]:
        ledger, _ = self._fitted()
        queries = check_vectors(batch.vecs, ledger.dim, "query vectors")
        p, _, winner_idx, override = self._scores(queries)
        choice = np.where(override, winner_idx, self._argmax(p))
        return self.space_.decode(choice)

    def _argmax(self, p: np.ndarray) -> np.ndarray:
        """Highest combined probability; ties to the label that sorts first; -1 for an empty row."""
        if p.shape[1] == 0:
            return np.full(len(p), -1, np.int64)
        best = p.max(axis=1, keepdims=True)
        ranked = np.where(p == best, self.space_.ranks[None, :], np.iinfo(np.int64).max)
        # (every row's minimum is a rank: each row has its best column; ranks decode to names, never None)
        choice = self.space_.encode(cast("list[str]", self.space_.decode_ranks(ranked.min(axis=1))))
        return np.where(best[:, 0] > 0, choice, -1)

    def uncertainty(self, batch: Batch) -> np.ndarray:
        """Per item, 1 - the answer's probability: the winner's band share where the vote
        answers, the top combined probability elsewhere (higher: less sure)."""
        ledger, _ = self._fitted()
        queries = check_vectors(batch.vecs, ledger.dim, "query vectors")
        p, p_vote, winner_idx, override = self._scores(queries)
        if p.shape[1] == 0:
            return np.ones(len(queries))
        top = p.max(axis=1)
        if override.any():
            top = np.where(override, p_vote[np.arange(len(queries)), np.maximum(winner_idx, 0)], top)
        return 1.0 - top

    def footprint(self) -> Footprint:
        base = super().footprint()
        params = sum(p.numel() for p in self.head_.parameters())
        return Footprint(
            entries=base.entries,
            params=params,
            bytes=base.bytes + 4 * params,
            extra={**base.extra, "consolidations": self.consolidations_},
        )
