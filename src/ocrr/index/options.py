"""The search-backend settings of a system that owns a k-NN store (substrate, kNN-LM).

One object so that every such system takes the same hyperparameters
(``index``, ``hnsw_m``, ``ef_construction``, ``ef_search``, ``auto_threshold``,
``force_exact``, and for the IVF kinds ``nlist``, ``nprobe``, ``rerank``,
``target_recall``, ``target_agreement``), validates them the same way, and records only the knobs its backend
uses (exact search has none, so its runs keep their short hyperparameter record). With
``target_recall`` set, the ``nprobe`` and ``rerank`` an IVF index was tuned to are what
the system records (``IndexedSystem.index_hyperparameters``): a system rebuilt from its
record starts from the tuned values and, tuning again on the same data, ends there too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ocrr.errors import OcrrError
from ocrr.index.auto import DEFAULT_THRESHOLD
from ocrr.index.factory import HNSW_DEFAULTS, KINDS, make_index
from ocrr.index.ivf import IVF_DEFAULTS
from ocrr.index.ivf_tune import min_queries_for
from ocrr.index.vote import VoteRule


@dataclass(frozen=True)
class IndexOptions:
    index: str = "exact"
    hnsw_m: int = HNSW_DEFAULTS["m"]
    ef_construction: int = HNSW_DEFAULTS["ef_construction"]
    ef_search: int = HNSW_DEFAULTS["ef_search"]
    auto_threshold: int = DEFAULT_THRESHOLD
    force_exact: bool = False
    nlist: int = int(IVF_DEFAULTS["nlist"])
    nprobe: int = int(IVF_DEFAULTS["nprobe"])
    rerank: int = int(IVF_DEFAULTS["rerank"])
    target_recall: float = IVF_DEFAULTS["target_recall"]
    target_agreement: float = 0.0  # tune the IVF index until its top-k gives the owner's vote (ivf_tune)

    def check(self, owner: str) -> IndexOptions:
        """Raise one error naming the fix for a bad setting; return self."""
        if self.index not in KINDS:
            raise OcrrError(
                f"{owner}: index must be one of {', '.join(KINDS)}, got {self.index!r}; "
                f"write e.g. '{owner}:index=hnsw'."
            )
        for key in ("hnsw_m", "ef_construction", "ef_search", "auto_threshold"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise OcrrError(f"{owner}: {key} must be a whole number >= 1, got {value!r}.")
        for key, low in (("nprobe", 1), ("rerank", 1), ("nlist", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise OcrrError(
                    f"{owner}: {key} must be a whole number >= {low}, got {value!r}"
                    + (" (0: chosen from the size at training)." if key == "nlist" else ".")
                )
        t = self.target_recall
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) or not 0 <= t <= 1:
            raise OcrrError(
                f"{owner}: target_recall must be a number in [0, 1] (0: no tuning), got {t!r}; "
                f"write e.g. '{owner}:index=ivf_pq:target_recall=0.95'."
            )
        a = self.target_agreement
        if isinstance(a, bool) or not isinstance(a, (int, float, np.floating)) or not 0 <= a < 1:
            raise OcrrError(
                f"{owner}: target_agreement must be a number in [0, 1) (0: no tuning), got {a!r}; "
                f"write e.g. '{owner}:index=ivf_pq:target_agreement=0.99'."
            )
        if a and not (self.kind.startswith("ivf") or self.kind.startswith("auto")):
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


class IndexedSystem:
    """Mixin for a system that owns a k-NN store: the options as plain attributes (each
    hyperparameter is an attribute of the same name, as for every system) and
    ``index_options`` built from them."""

    name: str

    def _set_index_options(
        self,
        index: str,
        hnsw_m: int,
        ef_construction: int,
        ef_search: int,
        auto_threshold: int,
        force_exact: bool,
        nlist: int = int(IVF_DEFAULTS["nlist"]),
        nprobe: int = int(IVF_DEFAULTS["nprobe"]),
        rerank: int = int(IVF_DEFAULTS["rerank"]),
        target_recall: float = IVF_DEFAULTS["target_recall"],
        target_agreement: float = 0.0,
    ) -> None:
        self.index, self.hnsw_m, self.ef_construction = index, hnsw_m, ef_construction
        self.ef_search, self.auto_threshold, self.force_exact = ef_search, auto_threshold, bool(force_exact)
        self.nlist, self.nprobe, self.rerank, self.target_recall = nlist, nprobe, rerank, target_recall
        self.target_agreement = target_agreement
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
        return IndexOptions(
            self.index,
            self.hnsw_m,
            self.ef_construction,
            self.ef_search,
            self.auto_threshold,
            self.force_exact,
            self.nlist,
            self.nprobe,
            self.rerank,
            self.target_recall,
            getattr(self, "target_agreement", 0.0),
        )

    def index_hyperparameters(self) -> dict:
        """``index_options.hyperparameters()``, with the ``nprobe`` and ``rerank`` a tuned IVF
        index settled on in place of the starting ones."""
        out = self.index_options.hyperparameters()
        index: Any = getattr(self, "index_", None)
        index = getattr(index, "backend", index)  # auto: the index answering now
        if "nprobe" in out and getattr(index, "tuning", None):
            out.update(nprobe=int(index.nprobe), rerank=int(index.rerank))
        return out
