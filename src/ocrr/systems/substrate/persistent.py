"""A substrate whose ledger lives on disk: corrections survive restarts.

``open_substrate(path)`` opens (or creates) a durable ledger file, checks it, and
rebuilds the substrate from it: the substrate is ``fit`` on every stored entry, which
recomputes each digest, so its in-memory chain must end at the file's chain head. Each
``correct`` is written (and fsynced, group-committed with concurrent ones) before the
substrate learns it. Bounded substrates replay their evictions the same way: the live
set is a function of the seed and the entry count, and the full history stays on file.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.index.exact import GEMV_BELOW, ExactIndex, top_k
from ocrr.index.vote import vote, vote_rows
from ocrr.ledger.heads import Signer
from ocrr.ledger.location import KnownPrefix, open_store
from ocrr.ledger.rows import check_rows
from ocrr.ledger.scan import LedgerReport
from ocrr.ledger.store import LedgerStore
from ocrr.systems.base import check_vectors
from ocrr.systems.registry import make_system
from ocrr.systems.substrate.core import Substrate
from ocrr.systems.substrate.saved_index import SavedIndex

__all__ = [
    "PersistentSubstrate",
    "Neighbour",
    "Explanation",
    "open_substrate",
    "open_checked",
    "servable",
    "POOLED_BELOW",
]

#: Requests of fewer queries than this share a pass in ``explain_each`` (the exact index
#: scans them one matrix-vector product per query; bigger ones with a matrix product).
POOLED_BELOW = GEMV_BELOW

# Rows per block of a pooled scan: ~3 MB of float32 at d=384, so the block is still in
# cache when the next query of the pool reads it.
_POOL_ROWS = 2048


@dataclass(frozen=True)
class Neighbour:
    id: int
    label: str
    similarity: float
    votes: bool  # inside the margin band, so it took part in the vote


@dataclass(frozen=True)
class Explanation:
    label: str | None
    neighbours: list[Neighbour]
    margin: float | None  # the band: neighbours within this of the top similarity vote


class PersistentSubstrate:
    """A substrate (``system``) over a durable ledger (``ledger``). Thread-safe: many
    threads may predict while corrections are committed."""

    def __init__(self, ledger: LedgerStore, system: Substrate):
        self.ledger, self.system = ledger, system

    # -- learning -------------------------------------------------------------------
    def correct(self, vecs, labels, texts=None) -> range:
        """Append corrections durably, then let the substrate learn them; return entry ids."""
        return self.ledger.extend(self.checked_corrections(vecs), labels, texts)

    def checked_corrections(self, vecs) -> np.ndarray:
        """``vecs`` as the ledger takes them (float32 rows of its dimension, unit length), or
        one error naming the fix: what ``correct`` checks, for a caller queuing its own append
        (the service hands corrections to the ledger's committer without waiting)."""
        return check_rows(check_vectors(vecs, self.ledger.dim, "correction vectors"), None, _correction_row)

    # -- inference --------------------------------------------------------------------
    def _fitted(self) -> Substrate:
        if self.system.ledger_ is None:
            raise OcrrError(
                f"ledger {self.ledger.path} is empty: nothing to predict from yet; correct some "
                "items first or start from a dataset (ocrr serve --fit DATASET)"
            )
        return self.system

    def _search(self, vecs):
        """Search and vote (Substrate.predict's steps, read-only: the index is searched
        directly, not through the substrate's query-set cache), under the read lock, after
        taking in what other processes committed to the file."""
        self.ledger.refresh()
        with self.ledger.lock.read():
            sub = self._fitted()
            ledger, index = sub._fitted_ledger(), sub._fitted_index()
            queries = bounded_queries(vecs, ledger.dim)
            return self._vote(sub, *index.search(queries, sub.k))

    def _vote(self, sub: Substrate, sims: np.ndarray, ids: np.ndarray):
        # A few rows (a served predict): the row-by-row vote, same winners at a fraction of the overhead.
        by = vote_rows if len(sims) < POOLED_BELOW else vote
        labels = sub.space_.decode_ranks(by(sims, ids, sub._neighbour_ranks(ids), sub.rule_))
        label_of = sub._fitted_ledger().label_of
        entry_labels = [[label_of(e) if e >= 0 else None for e in row.tolist()] for row in ids]
        return labels, sims, ids, entry_labels

    def check_queries(self, vecs) -> np.ndarray:
        """``vecs`` as float32 queries of the ledger's dimension, or the OcrrError a search would raise."""
        return bounded_queries(vecs, self._fitted()._fitted_ledger().dim)  # fixed once fitted: no lock

    def explain_each(self, requests: list[np.ndarray], shortlist=None) -> list[list[Explanation]]:
        """``explain`` of several requests (checked with ``check_queries``) at once, each
        answer equal to ``explain(request)`` alone.

        A search is a pass over every stored vector, and its cost is that memory traffic, not
        the arithmetic. The exact index scans a request of fewer than 8 queries with one
        matrix-vector product per query; here all such requests share one pass, block by
        block, each query's products over a block computed while the block is still in cache.
        A row's product does not depend on the block it is in (the same BLAS kernel per row),
        so similarities and neighbours are the same bits as the index's own. ``shortlist``
        (a ``index.shortlist.Shortlist``, used by one caller at a time) finds the same
        neighbours reading half the bytes.

        The pass reads the first n rows without the lock (n taken under it): rows are
        appended, never changed, and a grown buffer leaves the old one to this view, so a
        commit need not wait for a scan. The answer is the ledger's at size n, which counts
        every entry committed before the call, by this process or another."""
        self.ledger.refresh()
        with self.ledger.lock.read():
            sub = self._fitted()
            ledger, index = sub._fitted_ledger(), sub._fitted_index()
            n = len(index)
            pooled = isinstance(index, ExactIndex) and index.borrowed and n > 0
            matrix = ledger.vectors[:n]
        small = [r for r in range(len(requests)) if pooled and len(requests[r]) < POOLED_BELOW]
        found: dict[int, tuple] = {}
        if small:
            queries = np.concatenate([requests[r] for r in small])
            if shortlist is None:
                sims, ids = _pooled_scan(matrix, queries, sub.k)
            else:
                sims, ids = shortlist.search(matrix, queries, sub.k, _pooled_scan)
            at = np.cumsum([0] + [len(requests[r]) for r in small])
            found = {r: (sims[at[j] : at[j + 1]], ids[at[j] : at[j + 1]]) for j, r in enumerate(small)}
        with self.ledger.lock.read():  # the vote reads the label space, which a commit may grow
            out = []
            for r, queries in enumerate(requests):
                sims, ids = found[r] if r in found else index.search(queries, sub.k)
                out.append(self._explanations(*self._vote(sub, sims, ids)))
            return out

    def predict(self, vecs) -> list[str | None]:
        return self._search(vecs)[0]

    def explain(self, vecs) -> list[Explanation]:
        """Predicted label per query, with the neighbours that were retrieved."""
        return self._explanations(*self._search(vecs))

    def _explanations(self, labels, sims, ids, entry_labels) -> list[Explanation]:
        band = self.system.margin
        out = []
        for row, (s, i) in enumerate(zip(sims, ids)):
            live = i >= 0
            top = float(s[live].max()) if live.any() else 0.0
            nbrs = [
                Neighbour(int(e), entry_labels[row][j], float(v), band is None or float(v) >= top - band)
                for j, (v, e) in enumerate(zip(s, i))
                if e >= 0
            ]
            out.append(Explanation(labels[row], nbrs, band))
        return out

    # -- audit --------------------------------------------------------------------------
    def verify(self) -> LedgerReport:
        """Check the file on disk, then that the substrate's chain is the file's."""
        report = self.ledger.verify()
        if report and self.system.ledger_ is not None:
            with self.ledger.lock.read():
                head, n = base64.b64encode(self.system.ledger_.head).decode(), len(self.system.ledger_)
            same = head == report.chain_head or n > report.size  # grown since the file was read
            if not same:
                return LedgerReport(False, report.size, None, "the substrate's chain differs from the file's")
        return report

    def __len__(self) -> int:
        return len(self.ledger)

    def close(self) -> None:
        self.ledger.close()

    def __enter__(self) -> PersistentSubstrate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _correction_row(i: int) -> str:
    return f"correction vectors row {i}"


# Stored rows are unit vectors, so a similarity is at most about a query's norm: queries below
# this bound cannot overflow float32 (3.4e38), even summed over the neighbours of a vote.
_MAX_QUERY_NORM = 1e30
# Below float32's smallest normal number a query's products with unit rows vanish or lose their digits.
_MIN_QUERY_NORM = float(np.finfo(np.float32).tiny)


def bounded_queries(vecs, dim: int | None) -> np.ndarray:
    """``vecs`` as float32 queries of dimension ``dim`` whose similarities stay finite (so an
    answer is strict JSON) and tell entries apart (not all zero), or one OcrrError naming the
    first query that does not."""
    queries = check_vectors(vecs, dim, "query vectors")
    norms = np.linalg.norm(queries.astype(np.float64), axis=1)  # float64: no overflow below 1e154
    big = np.flatnonzero(~(norms <= _MAX_QUERY_NORM))
    if len(big):
        raise OcrrError(
            f"query vectors row {int(big[0])} has norm {float(norms[big[0]]):.4g}: its similarities would "
            "overflow float32; send unit vectors (divide each row by its L2 norm, as ocrr's encoders do)"
        )
    small = np.flatnonzero(norms < _MIN_QUERY_NORM)
    if len(small):
        # Its similarities would all be 0 (or lost below float32's precision): the vote among
        # those ties would answer a label from nothing.
        raise OcrrError(
            f"query vectors row {int(small[0])} has norm {float(norms[small[0]]):.4g}, so it is equally far from "
            "every entry and no label can be predicted from it; send the item's own vector (an encoder gives "
            "all zeros for a text it finds nothing in)"
        )
    return queries


def _pooled_scan(matrix: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """ExactIndex.search's top-k of each query over every row of ``matrix`` (id = row),
    by matrix-vector products over blocks of rows, every query per block."""
    n = len(matrix)
    sims = np.empty((len(queries), n), np.float32)
    for lo in range(0, n, _POOL_ROWS):
        block = matrix[lo : lo + _POOL_ROWS]
        for q, row in zip(queries, sims):
            np.matmul(block, q, out=row[lo : lo + _POOL_ROWS])
    return top_k(sims, 0, min(k, n))  # ids are row numbers: 0 .. n-1


def open_substrate(
    path: str | os.PathLike[str],
    system: str | Substrate = "substrate",
    dim: int | None = None,
    verify: str = "full",
    seed: int = 0,
    grow_ahead: bool = False,
    signer: Signer | None = None,
    index_file: str | os.PathLike[str] | None = None,
    known: KnownPrefix | None = None,
) -> PersistentSubstrate:
    """Open (or create) a substrate persisted in the ledger file ``path``.

    ``system``: a substrate spec (``substrate``, ``bounded_fifo_1000``,
    ``substrate:k=3``...) or an unfitted Substrate. The file is checked
    (``verify="full"``, or ``"checkpoint"`` to rehash only what follows its last
    checkpoint) and a damaged one is refused with the first bad entry. ``grow_ahead``:
    make each bigger vector buffer in the background before the current one fills
    (``Chain.grow_ahead``), for a process that answers requests while the ledger grows.
    ``signer``: signs the ledger's checkpoint records; only its records let ``"checkpoint"``
    skip rehashing (without one, every entry is rehashed). ``index_file``: an IVF index
    ``ocrr ledger index`` saved and ``signer``'s key signed, opened instead of trained
    (``ocrr.systems.substrate.saved_index``: refused, naming the fix, unless it checks out).
    ``known``: the file's first entries as another process read and checked them, rows
    included (``ocrr serve --workers N``: the supervisor's, in shared memory); only the
    entries after them are read and checked here.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import ocrr
        >>> folder = tempfile.TemporaryDirectory()
        >>> path = os.path.join(folder.name, "corrections.db")
        >>> substrate = ocrr.open_substrate(path, dim=4)
        >>> substrate.correct(np.eye(4, dtype=np.float32)[:2], ["refund", "transfer"], ["money back", "send"])
        range(0, 2)
        >>> substrate.predict(np.array([[0.9, 0.1, 0.0, 0.0]], dtype=np.float32))
        ['refund']
        >>> substrate.close()

        The corrections are in the file: opening it again checks it and learns them back.

        >>> again = ocrr.open_substrate(path)
        >>> again.predict(np.array([[0.0, 1.0, 0.0, 0.0]], dtype=np.float32))
        ['transfer']
        >>> again.verify().ok
        True
        >>> again.close()
        >>> folder.cleanup()
    """
    system = servable(system, seed)
    saved = None if index_file is None else SavedIndex.read(index_file, signer)
    if saved is not None:
        saved.check_system(system)
    opening = True

    def apply(vecs: np.ndarray, labels: Sequence, texts: Sequence, hashes: Sequence[bytes] | None) -> bytes:
        batch = Batch(vecs, texts, labels)
        if system.ledger_ is None:
            if opening and hashes is not None:
                # the stored entries, with the store's checked hashes; their rows buffer is the
                # scan's own (a commit's vectors are not: the first commit is fitted the usual way)
                system.fit_checked(batch, hashes, None if saved is None else saved.restore)
            else:
                system.fit(batch)  # the stored entries are the substrate's history
            if grow_ahead:
                system._fitted_ledger().grow_ahead()
        elif hashes is not None:  # a commit, hashed (and checked) by the store
            system.learn_committed(batch, hashes)
        else:
            system.correct(batch)
        return system._fitted_ledger().head

    # A file, or a postgresql:// URL. Its stored rows are checked against the rows' rules before
    # the substrate learns them (later ones come through checked_corrections): rows an older
    # import, another program or an edit that rehashed the chain wrote are refused.
    ledger = open_store(path, dim=dim, verify=verify, apply=apply, signer=signer, known=known, unit_rows=True)
    opening = False
    if saved is not None:
        try:
            saved.check_ledger(ledger)  # built over these very entries: before any answer comes from it
        except BaseException:
            ledger.close()
            raise
    return PersistentSubstrate(ledger, system)


def open_checked(
    path: str | os.PathLike[str],
    system: str | Substrate = "substrate",
    verify: str = "full",
    seed: int = 0,
    signer: Signer | None = None,
    known: KnownPrefix | None = None,
    index_file: str | os.PathLike[str] | None = None,
) -> PersistentSubstrate:
    """The ledger at ``path`` checked as ``open_substrate`` checks it (chain, tree, checkpoint
    records and the stored rows' rules), without the substrate learning its entries: for a
    process that answers no predicts, such as the supervisor of ``ocrr serve --workers N``,
    whose workers each open the substrate. Its ``system`` stays unfitted. ``known``: as
    ``open_substrate``'s (of no entries: the buffer the rows are read into). ``index_file``:
    a saved index checked as ``open_substrate`` checks it, except that it is not taken (so
    that a bad file is refused once, not by each worker in turn): its statement and settings
    before the ledger is read, its files' digests while it is read, its root after."""
    system = servable(system, seed)
    saved = None if index_file is None else SavedIndex.signed(index_file, signer)
    if saved is not None:
        saved.check_system(system)
    with ThreadPoolExecutor(1, thread_name_prefix="ocrr-index-check") as pool:
        files_read = None if saved is None else pool.submit(saved.read_files, keep=False)
        ledger = open_store(path, verify=verify, signer=signer, known=known, unit_rows=True)
    try:
        if saved is not None and files_read is not None:
            files_read.result()
            saved.check_root(ledger)
    except BaseException:
        ledger.close()
        raise
    return PersistentSubstrate(ledger, system)


def servable(system: str | Substrate, seed: int = 0) -> Substrate:
    """``system`` (a spec or an unfitted Substrate) as a substrate a persistent ledger can
    serve, or one OcrrError naming what to pass instead (``ocrr ledger index`` asks it too:
    an index is built for what ``ocrr serve`` will serve)."""
    if isinstance(system, str):
        system = make_system(system, seed=seed)
    if not isinstance(system, Substrate):
        raise OcrrError(
            f"{getattr(system, 'name', system)!r} is not a substrate; a persistent system needs a "
            "ledger (pass substrate, bounded_fifo_1000, substrate:k=3, ...)"
        )
    if type(system).predict is not Substrate.predict or not system.learns:
        # The persistent substrate (and the service) answer with the substrate's own search and
        # vote; serving a system whose answer is another rule would be silently wrong.
        raise OcrrError(
            f"{system.name!r} does not answer with the substrate's search and vote, which is what a "
            "persistent ledger serves; open it with substrate, substrate:k=3, bounded_fifo_1000 or "
            "bounded_reservoir_1000"
        )
    if system.ledger_ is not None:
        raise OcrrError("pass an unfitted substrate: open_substrate fits it on the ledger file's entries")
    if not system.store_text:
        raise OcrrError("a persistent substrate keeps each item's text in its ledger; do not pass store_text=False")
    return system
