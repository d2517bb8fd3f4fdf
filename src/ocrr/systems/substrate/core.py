"""The substrate: a hash-chained append-only ledger plus k-NN retrieval and a margin-band vote.

``fit`` appends the seed set to the ledger; ``correct`` appends the corrected items;
nothing is ever updated in place, so nothing learned is ever overwritten (paper 4.3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeAlias

import numpy as np

from ocrr.batch import Batch
from ocrr.index import (
    AutoIndex,
    CertifiedSQ8Index,
    ExactIndex,
    FaissIndex,
    IVFIndex,
    exact_search,
    recall_at_k,
)
from ocrr.index.cache import IncrementalSearch
from ocrr.index.options import IndexedSystem
from ocrr.index.vote import VoteRule, vote, vote_margin, vote_one, vote_rows
from ocrr.ledger import Ledger, VerifyResult
from ocrr.specs import Option
from ocrr.systems.base import Footprint, System, check_vectors, require_labels
from ocrr.systems.labels import LabelSpace
from ocrr.utils.grow_ahead import room_at_open

# Fewer rows than this are voted in plain Python (``vote_rows``): numpy's per-call costs
# outweigh its work on a few rows of k neighbours.
_VOTE_ROWS_BELOW = 8

#: The most neighbours a query may ask for: far beyond any useful vote, so a mistyped k is
#: refused at the door instead of sizing the search's arrays.
MAX_K = 100_000

#: What ``IndexOptions.make`` builds (ocrr.index.make_index): a substrate's ``index_``.
SearchIndex: TypeAlias = ExactIndex | CertifiedSQ8Index | FaissIndex | IVFIndex | AutoIndex


class Substrate(IndexedSystem, System):
    """Append-only ledger + cosine k-NN + margin-band majority vote.

    Hyperparameters (paper Appendix B): k=5, margin=0.05, count weighting, max-similarity
    then recency tie-breaks. ``store_text`` keeps each item's text in the ledger entry.

    Retrieval backend (paper 6.5): the index options declared in ocrr.index.options
    (``ocrr systems substrate`` lists them): ``index`` is one of ocrr.index.KINDS, ``exact``
    by default (numpy brute force reading the ledger's own vector buffer, no second copy);
    ``force_exact=True`` overrides it with exact search, the 100 %-recall mode at any scale.
    The ledger is the store of record; the index is a cache of it (``rebuild_index``), and
    ``verify_recall`` measures how much of the exact top-k an approximate index finds.

    ``vectors_on_disk=<folder>`` keeps the ledger's float32 vectors in a memory-mapped
    scratch file there instead of RAM: with a compressed index (``exact_sq8``,
    ``hnsw_sq8``) a 10M-entry substrate then needs a few GB of memory, not 20+.
    """

    family = "retrieval"
    execution_settings = ("vectors_on_disk",)  # where the vectors live, not what is computed
    options = {
        "k": Option(5, int, low=1, high=MAX_K, help="neighbours retrieved per query"),
        "margin": Option(
            0.05, float, low=0, allow_none=True, help="band below the top similarity whose neighbours vote; none: all k"
        ),
        "weighting": Option(
            "count", str, choices=("count", "sumsim"), help="a vote: 1 per neighbour, or its similarity"
        ),
        "tiebreak_maxsim": Option(True, bool, help="break count ties by the highest similarity"),
        "tiebreak_recency": Option(True, bool, help="then by the newest entry"),
        "store_text": Option(True, bool, help="keep each item's text in its ledger entry"),
        "vectors_on_disk": Option(
            None, str, allow_none=True, help="folder for a memory-mapped vector file instead of RAM (how, not what)"
        ),
    }  # then INDEX_OPTIONS (ocrr.index.options): index, hnsw_m, …, target_agreement
    default_name = "substrate"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule_ = VoteRule(self.k, self.margin, self.weighting, self.tiebreak_maxsim, self.tiebreak_recency)
        self.ledger_: Ledger | None = None
        self.index_: SearchIndex | None = None
        self.space_ = LabelSpace(self.labels or ())
        self._entry_label = np.empty(0, np.int64)  # label index of every ledger entry

    def hyperparameters(self) -> dict:
        return {
            "k": self.k,
            "margin": self.margin,
            "weighting": self.weighting,
            "tiebreak_maxsim": self.tiebreak_maxsim,
            "tiebreak_recency": self.tiebreak_recency,
            "store_text": self.store_text,
            **self.index_hyperparameters(),
        }

    @property
    def index_kind(self) -> str:
        """The backend in use: ``index``, or ``exact`` under ``force_exact``."""
        return self.index_options.kind

    # -- learning -------------------------------------------------------------------
    def fit(self, seed: Batch) -> Substrate:
        dim = int(np.asarray(seed.vecs).shape[1])
        self.ledger_ = Ledger(dim, vectors_on_disk=self.vectors_on_disk)
        self.index_ = self._new_index(dim)
        self.search_ = IncrementalSearch(self.index_)
        self._entry_label = np.empty(0, np.int64)
        if len(seed):
            self._append(seed, who="fit")
        return self

    def fit_checked(
        self, seed: Batch, hashes: Sequence[bytes], saved_index: Callable[[SearchIndex, int], int] | None = None
    ) -> Substrate:
        """``fit`` on entries a durable store has read and checked, taking their chain hashes
        (``hashes``, the store's) instead of recomputing them: the store holds the chain and
        tree of these very entries and compares the head after, so hashing them again here
        would only repeat its work. The vectors are taken as they are (the store checked
        them), and their buffer too when it has room to grow (``Chain._from_stored``). A
        substrate whose learning differs (bounded ones evict), or whose vectors live on
        disk, is fitted the usual way. ``saved_index(index, n)``: fills the new, empty index
        from a saved one (``ocrr.systems.substrate.saved_index``, which refuses the substrates
        fitted the usual way) and returns how many of the first entries it holds; only the
        entries after those are added."""
        own_steps = type(self).fit is Substrate.fit and type(self)._index_new is Substrate._index_new
        if not own_steps or self.vectors_on_disk is not None or not self.store_text or not len(seed):
            assert saved_index is None, "a saved index is for the substrate's own steps (saved_index.check_saveable)"
            return self.fit(seed)
        vecs = np.asarray(seed.vecs)
        dim, n = int(vecs.shape[1]), len(vecs)
        labels = require_labels(seed, "fit")
        texts = seed.texts if seed.texts is not None else [None] * n
        self.ledger_ = ledger = Ledger._from_stored(dim, None, labels, texts, vecs, None, hashes, adopt=True)
        self.index_ = self._new_index(dim)
        self._entry_label = _with_room(self.space_.encode(labels, grow=True), room_at_open(n, 64))
        held = 0 if saved_index is None else saved_index(self.index_, n)
        self.search_ = IncrementalSearch(self.index_)
        self._index_new(ledger.vectors[held:], np.arange(held, n, dtype=np.int64))
        return self

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        if len(batch):
            self._append(batch, who=self.name)

    def learn_committed(self, batch: Batch, hashes: Sequence[bytes]) -> None:
        """``correct(batch)`` for entries a durable store committed: the ledger takes the chain
        hashes the store computed from these very fields (``hashes``) instead of hashing
        them again (``ocrr.ledger.held``)."""
        self._require_fitted()
        if len(batch):
            # Without texts kept, the ledger's entries are not the store's: hash them (and differ).
            self._append(batch, who=self.name, hashes=hashes if self.store_text else None)

    def _append(self, batch: Batch, who: str, hashes: Sequence[bytes] | None = None) -> np.ndarray:
        ledger = self._fitted_ledger()
        labels = require_labels(batch, who)
        vecs = check_vectors(batch.vecs, ledger.dim, "vectors")
        texts = list(batch.texts) if (self.store_text and batch.texts is not None) else None
        if hashes is not None:  # committed by a durable store, which hashed every field
            ids = np.asarray(ledger.extend_hashed(vecs, labels, texts or [None] * len(vecs), hashes), np.int64)
            codes: int | np.ndarray = self.space_.encode(labels, grow=True)
        elif len(vecs) == 1:  # one correction: the ledger's single-entry path (vecs are checked)
            first = ledger.append_checked(vecs[0], labels[0], texts[0] if texts else None)
            ids = np.arange(first, first + 1, dtype=np.int64)
            codes = self.space_.encode_one(labels[0])
        else:
            ids = np.asarray(ledger.extend(vecs, labels, texts), np.int64)
            codes = self.space_.encode(labels, grow=True)
        end = int(ids[-1]) + 1
        if end > len(self._entry_label):  # a quarter more at first, then doubling: corrections come one at a time
            capacity = max(room_at_open(end, 64), 2 * len(self._entry_label))
            self._entry_label = _with_room(self._entry_label, capacity)
        self._entry_label[int(ids[0]) : end] = codes  # ids are consecutive: a slice, not fancy indexing
        self._index_new(vecs, ids)
        return ids

    def _index_new(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        """Make new ledger entries searchable (bounded variants override to evict)."""
        index = self._fitted_index()
        if isinstance(index, ExactIndex):
            index.add_from_source(vecs, ids)  # the rows the ledger just wrote: no copy, no compare
        else:
            index.add(vecs, ids)

    def _fitted_ledger(self) -> Ledger:
        """The ledger ``fit`` made (callers run after ``fit``, or ``_require_fitted``)."""
        assert self.ledger_ is not None, "fit() makes the ledger"
        return self.ledger_

    def _fitted_index(self) -> SearchIndex:
        """The index ``fit`` made (callers run after ``fit``, or ``_require_fitted``)."""
        assert self.index_ is not None, "fit() makes the index"
        return self.index_

    def _fitted(self) -> tuple[Ledger, SearchIndex]:
        """(ledger, index) once fitted; NotFittedError (``_require_fitted``) before ``fit``."""
        self._require_fitted()
        return self._fitted_ledger(), self._fitted_index()

    def _new_index(self, dim: int) -> SearchIndex:
        """An empty index of ``index_kind``. Exact kinds borrow the ledger's vector buffer
        (row i = entry i), so vectors are stored once; see ExactIndex. (A partial, not a
        lambda, so the system still pickles.)"""
        return self.index_options.make(
            dim,
            self.name,
            source=partial(getattr, self.ledger_, "vectors"),
            k=self.k,
            label_of=self._labels_of_ids,
            vote_rule=self.rule_,
        )

    def _labels_of_ids(self, ids: np.ndarray) -> np.ndarray:
        """Label index of each entry id (what ``target_agreement`` tuning votes with)."""
        return self._entry_label[ids]

    def rebuild_index(self, chunk: int = 65_536) -> None:
        """Drop the index and rebuild it from the ledger (the store of record).

        The rebuilt index holds the same live ids with their ledger vectors, added in id
        order. Exact kinds then give identical results. An HNSW graph is rebuilt from
        scratch, so it is not the graph that grew one correction at a time: the live set
        and the vectors are the same, neighbours and predictions can differ where the
        search is approximate (measure with ``verify_recall``); two rebuilds of the same
        ledger with one FAISS thread give identical graphs. An IVF index is retrained on
        an even spread of the whole ledger (its maintenance step once ``needs_retrain``
        says the ledger has outgrown the training sample), then tuned if
        ``target_recall`` is set.
        """
        ledger, old = self._fitted()
        live = np.sort(np.asarray(old.ids, np.int64))
        vectors = ledger.vectors
        assert ledger.dim is not None  # fit made the ledger with the seed set's dim
        self.index_ = index = self._new_index(ledger.dim)
        if hasattr(index, "build"):  # IVF: k-means over the whole ledger, not its first chunk
            everything = len(live) == len(vectors)
            index.build(vectors if everything else vectors[live], live)
        else:
            for lo in range(0, len(live), chunk):
                ids = live[lo : lo + chunk]
                index.add(vectors[ids], ids)
        self.search_ = IncrementalSearch(index)

    def verify_recall(self, k: int = 5, n_queries: int = 200, seed: int = 0, queries=None) -> float:
        """Recall@k of the index against exact search over the ledger's live vectors.

        Queries: ``queries`` if given, else ``n_queries`` live entries sampled with ``seed``
        (a stored vector is its own nearest neighbour, which exact search always finds;
        pass fresh queries to leave that out). Returns the mean, over queries, of the
        fraction of the exact top-k ids that the index's top-k contains (1.0 for exact).
        """
        ledger, index = self._fitted()
        live = np.sort(np.asarray(index.ids, np.int64))
        vectors = ledger.vectors
        if queries is None:
            if len(live) == 0:
                return 1.0
            rng = np.random.default_rng(seed)
            pick = np.sort(rng.choice(len(live), size=min(n_queries, len(live)), replace=False))
            queries = vectors[live[pick]]
        else:
            queries = check_vectors(queries, ledger.dim, "query vectors")
        _, approx = index.search(queries, k)
        everything = len(live) == len(vectors) and (len(live) == 0 or live[-1] == len(live) - 1)
        _, truth = exact_search(vectors, queries, k, rows=None if everything else live)
        return recall_at_k(approx, truth)

    # -- inference ------------------------------------------------------------------
    def predict(self, batch: Batch) -> list[str | None]:
        ledger, _ = self._fitted()
        queries = check_vectors(batch.vecs, ledger.dim, "query vectors")
        sims, ids = self.search_.search(queries, self.k)
        if len(sims) == 1 and self.rule_.weighting == "count":  # one served query: no arrays around its vote
            return [self.space_.decode_rank(vote_one(sims[0], ids[0], self._neighbour_ranks(ids)[0], self.rule_))]
        by = vote_rows if len(sims) < _VOTE_ROWS_BELOW else vote  # the same winners (tests/index/test_vote.py)
        winners = by(sims, ids, self._neighbour_ranks(ids), self.rule_)
        return self.space_.decode_ranks(winners)

    def anticipate(self, batch: Batch) -> None:
        """Score the stream's queries against the entries held now in one matrix product
        (``ExactIndex.anticipate``): each predict of them then scores only their few candidates
        and the entries appended since, each query as it is scored alone, bit for bit; other
        backends ignore it."""
        ledger, index = self._fitted()
        if len(batch):
            self._anticipate_search(index, check_vectors(batch.vecs, ledger.dim, "query vectors"), self.k)

    def uncertainty(self, batch: Batch) -> np.ndarray:
        """Per item, minus the vote margin (``vote_margin``): higher means less sure."""
        ledger, _ = self._fitted()
        queries = check_vectors(batch.vecs, ledger.dim, "query vectors")
        sims, ids = self.search_.search(queries, self.k)
        ranks = self._neighbour_ranks(ids)
        return -vote_margin(sims, ranks, vote(sims, ids, ranks, self.rule_), self.rule_)

    def _neighbour_ranks(self, ids: np.ndarray) -> np.ndarray:
        """Sorted-order rank of each neighbour's label (so the last tie-break is 'sorts first')."""
        if ids.size == 0:
            return np.empty(ids.shape, np.int64)
        if ids.min() >= 0:
            return self.space_.ranks[self._entry_label[ids]]
        ranks = self.space_.ranks[self._entry_label[np.maximum(ids, 0)]]
        return np.where(ids >= 0, ranks, -1)  # id -1: a slot an approximate index left empty

    # -- audit and accounting -----------------------------------------------------------
    def verify(self, expected_head: bytes | None = None) -> VerifyResult:
        ledger, _ = self._fitted()
        return ledger.verify(expected_head)

    def footprint(self) -> Footprint:
        ledger, index = self._fitted()
        live = len(index)
        dim = ledger.dim or 0
        # Per live entry: the float32 vector, its label index, and its 32-byte hash. An
        # approximate index is a second structure a deployment must hold, so its bytes
        # (vectors or codes + graph + id map) are added; exact search needs no second copy
        # (the unbounded substrate's reads the ledger's buffer; a bounded variant's copy of
        # its live rows is reported in extra["index_bytes"] only).
        index_bytes = int(getattr(index, "nbytes", 0))
        extra_bytes = 0 if self.index_kind == "exact" else index_bytes
        return Footprint(
            entries=live,
            params=0,
            bytes=live * (4 * dim + 8 + 32) + extra_bytes,
            extra={"ledger_entries": len(ledger), "index": self.index_kind, "index_bytes": index_bytes},
        )

    def _is_fitted(self) -> bool:
        return self.ledger_ is not None  # the vote rule and label space exist from __init__


def _with_room(codes: np.ndarray, capacity: int) -> np.ndarray:
    """``codes`` (each entry's label) at the start of a buffer of ``capacity``: the corrections
    after an open fill its free rows, where a buffer of exactly the entries opened would be
    copied whole into one twice its size by the first of them (at ten million entries, 80 MB
    of fresh memory while that correction waits). The free rows cost no memory until written."""
    grown = np.empty(capacity, np.int64)
    grown[: len(codes)] = codes
    return grown
