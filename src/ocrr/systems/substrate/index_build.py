"""A substrate's IVF index built from a checked ledger file a block of rows at a time.

``ocrr ledger index`` used to open the whole substrate (every row as float32, and Python
objects per entry) to train and fill the index it saves: at ten million entries more memory
than the machine has beside a service. This builds the same index holding only the index,
its training sample and one block of rows:

1. the caller checks the ledger without holding its rows (``scan_location(..., rows=False)``)
   and hands over the checked chain hashes (the scan's ``hashes``; the rows are read again
   with ``ocrr.ledger.location.CheckedRows``);
2. the training sample is the rows the service's own training reads (an IVF index trained at
   open trains k-means on every ``n // (nlist * train_per_list)``-th row and the codes on
   every ``n // 65536``-th: ``IVFIndex.kmeans`` and ``IVFIndex.train``), so only those rows
   are read, and the index is trained exactly as at open;
3. the rows are then read in blocks and added in id order, the chunks FAISS sees being the
   ones an open's add gives it.

Storage is untrusted between the check and these reads: every row read here is rehashed
and its chain hash compared with the checked one before it goes into the index
(``CheckedRows``: a row that changed since the check is refused, naming the entry). With
one FAISS thread the files are byte-identical to the ones a train-at-open index saves
(``tests/systems/test_saved_index.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from ocrr.errors import OcrrError
from ocrr.index.ivf import ADD_CHUNK, IVFIndex, nlist_for
from ocrr.ledger.location import CheckedRows, is_database_url
from ocrr.systems.substrate.core import Substrate

__all__ = ["build_index_in_blocks", "builds_in_blocks", "check_buildable", "training_rows"]

# Rows read and added at a time: a multiple of the index's own add chunk, so that FAISS is
# given the chunks an open's single add gives it.
BLOCK_ROWS = 4 * ADD_CHUNK
# The rows the codes (PQ codebooks, 8-bit ranges) train on: IVFIndex.train's own spread.
_CODE_SAMPLE = 65_536


def builds_in_blocks(location: object, system: Substrate) -> bool:
    """Whether ``build_index_in_blocks`` can build this index: a ledger file (a database's rows
    are read by its own engine), and no tuning target (tuning searches every row exactly)."""
    options = system.index_options
    tunes = bool(getattr(options, "target_recall", 0) or getattr(options, "target_agreement", 0))
    return isinstance(location, (str, os.PathLike)) and not is_database_url(location) and not tunes


def training_rows(index: IVFIndex, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the rows an index trained at open over ``n`` entries reads: (k-means's, the codes')."""
    nlist = min(index.nlist_setting or nlist_for(n), n)
    return np.arange(0, n, max(1, n // (nlist * index.train_per_list))), np.arange(0, n, max(1, n // _CODE_SAMPLE))


def build_index_in_blocks(
    path: str | os.PathLike[str],
    system: Substrate,
    dim: int,
    checked: Sequence[bytes],
    block: int = BLOCK_ROWS,
    progress: Callable[[str], None] | None = None,
) -> IVFIndex:
    """The IVF index ``system`` would train at open over entries 0 .. n-1 of the ledger file
    ``path`` (n = ``len(checked)``), reading the rows a ``block`` at a time (see the module
    docstring). Raises OcrrError naming the entry if a row read differs from the checked one."""
    n = len(checked)
    if block < 1 or block % ADD_CHUNK:
        raise ValueError(f"block must be a positive multiple of {ADD_CHUNK}, got {block}")
    window = _BlockWindow(n)
    index = _new_index(system, dim, window)
    _refuse_too_few(index, n)
    with CheckedRows(path, checked, dim) as stored:
        kmeans_ids, code_ids = training_rows(index, n)
        wanted = np.union1d(kmeans_ids, code_ids)
        if progress:
            progress(f"reading the {len(wanted)} rows the index trains on")
        sample = stored.rows(wanted)
        centroids = index.kmeans(sample[np.searchsorted(wanted, kmeans_ids)], n=n)
        index.train(sample[np.searchsorted(wanted, code_ids)], centroids)
        del sample
        index.trained_on = n  # what an open's training records: the entries it trained over
        for lo, rows, _labels in stored.blocks(block):
            window.show(lo, rows)
            index.add(rows, np.arange(lo, lo + len(rows), dtype=np.int64))
            if progress and (lo // block) % 16 == 15:
                progress(f"{lo + len(rows)} of {n} rows added")
        window.show(0, np.empty((0, dim), np.float32))
    return index


def check_buildable(system: Substrate, dim: int, n: int) -> None:
    """Refuse, before anything is read or signed, a ledger of ``n`` entries too small to train on."""
    _refuse_too_few(_new_index(system, dim, _BlockWindow(n)), n)


def _new_index(system: Substrate, dim: int, window: _BlockWindow) -> IVFIndex:
    """An empty index as the substrate makes it (``Substrate._new_index``), borrowing ``window``."""
    index = system.index_options.make(
        dim, system.name, source=cast(Callable[[], np.ndarray], lambda: window), k=system.k, vote_rule=system.rule_
    )
    if not isinstance(index, IVFIndex):
        raise OcrrError(f"{system.name} does not search with an IVF index; give --system substrate:index=ivf_pq")
    return index


def _refuse_too_few(index: IVFIndex, n: int) -> None:
    if n < index.min_train:
        raise OcrrError(
            f"the ledger holds {n} entries, fewer than the {index.min_train} an IVF index trains on; "
            "exact search serves so few fast: serve without an index file"
        )


class _BlockWindow:
    """Stands in for the ledger's row buffer while the index is filled: an index borrowing its
    rows checks, as rows are added, that they are the buffer's rows at their ids, and only that
    reads it here (no tuning, no search). It shows the block being added; the saved index
    keeps no rows (the service gives it the ledger's)."""

    def __init__(self, size: int):
        self.size, self.lo = size, 0
        self.rows = np.empty((0, 0), np.float32)

    def show(self, lo: int, rows: np.ndarray) -> None:
        self.lo, self.rows = lo, rows

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: Any) -> np.ndarray:
        return self.rows[int(i) - self.lo]
