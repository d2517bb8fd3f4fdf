"""The search-backend settings of a system that owns a k-NN store (substrate, kNN-LM).

Declared once, as the fields of ``IndexOptions`` (name, type, constraint, default, help:
``ocrr systems substrate`` lists them), so that every such system takes the same
hyperparameters, validates them the same way, and records only the knobs its backend
uses (exact search has none, so its runs keep their short hyperparameter record). With
``target_recall`` set, the ``nprobe`` and ``rerank`` an IVF index was tuned to are what
the system records (``IndexedSystem.index_hyperparameters``): a system rebuilt from its
record starts from the tuned values and, tuning again on the same data, ends there too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from ocrr.errors import OcrrError
from ocrr.index.auto import DEFAULT_THRESHOLD
from ocrr.index.factory import HNSW_DEFAULTS, KINDS, make_index
from ocrr.index.ivf import IVF_DEFAULTS
from ocrr.index.ivf_tune import min_queries_for
from ocrr.index.vote import VoteRule
from ocrr.specs import Option, field_options, option, validate


@dataclass(frozen=True)
class IndexOptions:
    """The search-backend options, each declared once: ``INDEX_OPTIONS`` (what the systems
    declare and ``make_system`` validates) and the owners' constructors are read from here."""

    index: str = option(
        default="exact", kind=str, choices=KINDS, help="search backend; exact: numpy brute force over the ledger"
    )
    hnsw_m: int = option(default=HNSW_DEFAULTS["m"], kind=int, low=2, help="HNSW graph degree M")
    ef_construction: int = option(default=HNSW_DEFAULTS["ef_construction"], kind=int, low=1, help="HNSW efConstruction")
    ef_search: int = option(default=HNSW_DEFAULTS["ef_search"], kind=int, low=1, help="HNSW efSearch")
    auto_threshold: int = option(
        default=DEFAULT_THRESHOLD, kind=int, low=1, help="auto kinds: entries before exact search hands over"
    )
    force_exact: bool = option(
        default=False, kind=bool, help="exact search whatever `index` says (100 % recall at any scale)"
    )
    nlist: int = option(
        default=int(IVF_DEFAULTS["nlist"]), kind=int, low=0, help="IVF lists; 0: chosen from the size at training"
    )
    nprobe: int = option(default=int(IVF_DEFAULTS["nprobe"]), kind=int, low=1, help="IVF lists searched per query")
    rerank: int = option(
        default=int(IVF_DEFAULTS["rerank"]), kind=int, low=1, help="IVF candidates re-ranked with the float32 vectors"
    )
    target_recall: float = option(
        default=IVF_DEFAULTS["target_recall"],
        kind=float,
        low=0,
        high=1,
        help="IVF: tune nprobe/rerank to this recall@k; 0: no tuning",
    )
    target_agreement: float = option(
        default=IVF_DEFAULTS["target_agreement"],
        kind=float,
        low=0,
        lt=1,
        help="IVF: tune until its top-k gives the exact vote this often; 0: no tuning",
    )

    def check(self, owner: str) -> IndexOptions:
        """Raise one error naming the fix for a bad setting (specs' message for a bad value);
        return self."""
        validate(owner, INDEX_OPTIONS, asdict(self))
        if self.target_agreement and not self.ivf:
            raise OcrrError(
                f"{owner}: target_agreement tunes an IVF index, and index={self.kind} has none; "
                f"write e.g. '{owner}:index=ivf_pq:target_agreement=0.99'."
            )
        return self

    @property
    def ivf(self) -> bool:
        """An inverted-file backend answers (``ivf*``, or ``auto*`` after its switch)."""
        return self.kind.startswith("ivf") or self.kind.startswith("auto")

    @property
    def kind(self) -> str:
        """The backend in use: ``index``, or ``exact`` under ``force_exact`` (100 % recall)."""
        return "exact" if self.force_exact else self.index

    def hyperparameters(self) -> dict:
        """The backend and only the knobs it uses."""
        out: dict[str, Any] = {"index": self.kind}
        if self.force_exact:
            out["force_exact"] = True
        if self.kind != "exact":
            if self.ivf:
                out.update(nlist=self.nlist, nprobe=self.nprobe, rerank=self.rerank, target_recall=self.target_recall)
                if self.target_agreement:  # recorded only when set: older records stay as they were
                    out["target_agreement"] = self.target_agreement
            elif self.kind not in ("exact_sq8", "certified_sq8"):
                out.update(hnsw_m=self.hnsw_m, ef_construction=self.ef_construction, ef_search=self.ef_search)
            if self.kind.startswith("auto"):
                out["auto_threshold"] = self.auto_threshold
        return out

    def make(
        self,
        dim: int,
        owner: str,
        source: Callable[[], np.ndarray] | None = None,
        k: int = 5,
        label_of: Callable[[np.ndarray], np.ndarray] | None = None,
        vote_rule: VoteRule | None = None,
    ) -> Any:
        """An empty index of this kind (``source``: a buffer exact kinds read instead of copying,
        and the IVF re-rank reads; ``k``: the neighbours the owner asks for, which tuning targets;
        ``label_of`` (ids -> label indices) and ``vote_rule``: the owner's vote, which
        ``target_agreement`` tunes for, on 1.5x the tuning queries needed to certify it)."""
        agreement: dict[str, Any] = {}
        if self.target_agreement:
            if label_of is None:
                raise OcrrError(
                    f"{owner}: target_agreement needs the system's entry labels; this system does "
                    "not give them (use target_recall)"
                )
            # 1.5x the fewest that can certify it: with exactly that many, only a perfect score
            # reaches the bound (0.99: 396 of 396), and one disagreement would fail a good index.
            need = min_queries_for(float(self.target_agreement))
            agreement = dict(
                target_agreement=float(self.target_agreement),
                label_of=label_of,
                vote_rule=vote_rule,
                tune_queries=max(200, (3 * need + 1) // 2),
            )
        try:
            return make_index(
                self.kind,
                dim,
                source=source,
                threshold=self.auto_threshold,
                m=self.hnsw_m,
                ef_construction=self.ef_construction,
                ef_search=self.ef_search,
                nlist=self.nlist,
                nprobe=self.nprobe,
                rerank=self.rerank,
                target_recall=float(self.target_recall),
                tune_k=int(k),
                **agreement,
            )
        except ValueError as err:
            raise OcrrError(f"{owner}: {err}") from None


INDEX_OPTIONS = field_options(IndexOptions)


class IndexedSystem:
    """Mixin, before ``System`` among the bases, for a system that owns a k-NN store: it
    declares the ``INDEX_OPTIONS``, which ``System``'s constructor keeps as plain attributes of
    the same name (as every option), and ``index_options`` is built from them; its constructor
    adds the checks that involve several of them (``IndexOptions.check``)."""

    name: str
    options: ClassVar[dict[str, Option]] = INDEX_OPTIONS  # merged into the owner's (System.declared_options)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index_options.check(self.name)

    @staticmethod
    def _anticipate_search(index: object, queries: np.ndarray, k: int) -> None:
        """Hand a stream's queries to an index that can pre-score them (``ExactIndex.anticipate``:
        the same answers, sooner); other backends have nothing to gain and ignore the hint."""
        anticipate = getattr(index, "anticipate", None)
        if anticipate is not None:
            anticipate(queries, k)

    @property
    def index_options(self) -> IndexOptions:
        """The attributes, as one object (a system pickled before an option existed: its default)."""
        return IndexOptions(**{key: getattr(self, key, declared.default) for key, declared in INDEX_OPTIONS.items()})

    def index_hyperparameters(self) -> dict:
        """``index_options.hyperparameters()``, with the ``nprobe`` and ``rerank`` a tuned IVF
        index settled on in place of the starting ones."""
        out = self.index_options.hyperparameters()
        index: Any = getattr(self, "index_", None)
        index = getattr(index, "backend", index)  # auto: the index answering now
        if "nprobe" in out and getattr(index, "tuning", None):
            out.update(nprobe=int(index.nprobe), rerank=int(index.rerank))
        return out
