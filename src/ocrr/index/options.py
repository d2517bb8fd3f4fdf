"""The search-backend settings of a system that owns a k-NN store (substrate, kNN-LM).

One object so that every such system takes the same hyperparameters
(``index``, ``hnsw_m``, ``ef_construction``, ``ef_search``, ``auto_threshold``,
``force_exact``), validates them the same way, and records only the knobs its backend
uses (exact search has none, so its runs keep their short hyperparameter record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ocrr.errors import OcrrError
from ocrr.index.auto import DEFAULT_THRESHOLD
from ocrr.index.factory import HNSW_DEFAULTS, KINDS, make_index


@dataclass(frozen=True)
class IndexOptions:
    index: str = "exact"
    hnsw_m: int = HNSW_DEFAULTS["m"]
    ef_construction: int = HNSW_DEFAULTS["ef_construction"]
    ef_search: int = HNSW_DEFAULTS["ef_search"]
    auto_threshold: int = DEFAULT_THRESHOLD
    force_exact: bool = False

    def check(self, owner: str) -> "IndexOptions":
        """Raise one error naming the fix for a bad setting; return self."""
        if self.index not in KINDS:
            raise OcrrError(f"{owner}: index must be one of {', '.join(KINDS)}, got {self.index!r}; "
                            f"write e.g. '{owner}:index=hnsw'.")
        for key in ("hnsw_m", "ef_construction", "ef_search", "auto_threshold"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise OcrrError(f"{owner}: {key} must be a whole number >= 1, got {value!r}.")
        return self

    @property
    def kind(self) -> str:
        """The backend in use: ``index``, or ``exact`` under ``force_exact`` (100 % recall)."""
        return "exact" if self.force_exact else self.index

    def hyperparameters(self) -> dict:
        """The backend and only the knobs it uses."""
        out = {"index": self.kind}
        if self.force_exact:
            out["force_exact"] = True
        if self.kind != "exact":
            if self.kind != "exact_sq8":
                out.update(hnsw_m=self.hnsw_m, ef_construction=self.ef_construction, ef_search=self.ef_search)
            if self.kind.startswith("auto"):
                out["auto_threshold"] = self.auto_threshold
        return out

    def make(self, dim: int, owner: str, source: Callable[[], np.ndarray] | None = None):
        """An empty index of this kind (``source``: a buffer exact kinds read instead of copying)."""
        try:
            return make_index(self.kind, dim, source=source, threshold=self.auto_threshold, m=self.hnsw_m,
                              ef_construction=self.ef_construction, ef_search=self.ef_search)
        except ValueError as err:
            raise OcrrError(f"{owner}: {err}") from None


class IndexedSystem:
    """Mixin for a system that owns a k-NN store: the options as plain attributes (each
    hyperparameter is an attribute of the same name, as for every system) and
    ``index_options`` built from them."""

    name: str

    def _set_index_options(self, index: str, hnsw_m: int, ef_construction: int, ef_search: int,
                           auto_threshold: int, force_exact: bool) -> None:
        self.index, self.hnsw_m, self.ef_construction = index, hnsw_m, ef_construction
        self.ef_search, self.auto_threshold, self.force_exact = ef_search, auto_threshold, bool(force_exact)
        self.index_options.check(self.name)

    @property
    def index_options(self) -> IndexOptions:
        return IndexOptions(self.index, self.hnsw_m, self.ef_construction, self.ef_search, self.auto_threshold,
                            self.force_exact)
