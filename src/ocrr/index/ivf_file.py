"""An IVF index on disk: ``save_ivf`` after a build, ``open_ivf`` at start-up, warmed.

A 10M-entry ``ivf_pq`` takes minutes to build and a second to read back: a service restarts
from the file. Two files: ``path`` is the FAISS index (``faiss.write_index``: centroids,
HNSW links, codes and ids of every list) and ``path + ".npz"`` the bookkeeping around it
(settings, which rows are live, and in owned mode the float32 rows and their ids). In
borrowed mode the float32 rows are not saved: the opener passes the same ``source`` (the
ledger's buffer or its vector file), row i being the vector of id i as before.

Warm start. The first query after an open used to pay for everything done once per
process: FAISS's search code paged in from its library, its thread pool started, the
coarse quantiser's graph and the lookup-table buffers touched, numpy's re-rank path.
``open_ivf(..., warm=True)`` runs one query (a unit vector, at the index's own
``nprobe`` and ``rerank``) before returning, so that cost is paid at open; the first real
query then costs what any other does, plus reading its re-ranked rows if they are not
cached (``ocrr.index.file_rows`` fetches those in parallel).

From bytes. ``restore_ivf`` fills an empty index from the two files' bytes as read once by
a caller that has checked them (``ocrr.systems.substrate.saved_index`` compares their
SHA-256 with a signed statement first, so that no byte FAISS parses is read after the check).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ocrr.index.ivf import IVFIndex
from ocrr.utils.grow_ahead import room_at_open

_SETTINGS = ("dim", "kind", "pq_m", "nprobe", "rerank", "min_train", "train_per_list", "grouped_quantizer_from", "seed")
# What shapes the lists and codes: an index restored into one made otherwise would mislead.
_STRUCTURE = ("dim", "kind", "pq_m", "min_train", "train_per_list", "grouped_quantizer_from", "seed", "borrowed")
_FORMAT = 1


def _faiss() -> Any:
    import faiss  # imported lazily: only approximate backends need it

    return faiss


def save_ivf(index: IVFIndex, path: str | Path) -> None:
    """Write a trained ``index`` to ``path`` (FAISS) and ``path.npz`` (the rest)."""
    if not index.trained:
        raise ValueError("only a trained IVF index can be saved (it still searches its staged entries exactly)")
    path = Path(path)
    _faiss().write_index(index._index, str(path))
    meta = {
        "format": _FORMAT,
        **{key: getattr(index, key) for key in _SETTINGS},
        "nlist": index.nlist,
        "nlist_setting": index.nlist_setting,
        "retrain_growth": index.retrain_growth,
        "retune_growth": index.retune_growth,
        "trained_on": index.trained_on,
        "tuned_at": index.tuned_at,
        "rows": index._rows,
        "live": index._live,
        "borrowed": index.borrowed,
    }
    arrays: dict[str, Any] = {"alive": index._alive[: index._rows]}
    if not index.borrowed:
        arrays.update(own=index._own[: index._rows], row_ids=index._row_ids[: index._rows])
    with open(side_path(path), "wb") as fh:
        np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)


def side_path(path: str | Path) -> Path:
    """The bookkeeping file ``save_ivf`` writes beside the FAISS file ``path``."""
    return Path(f"{path}.npz")


def open_ivf(path: str | Path, source: Callable[[], Any] | None = None, warm: bool = True) -> IVFIndex:
    """The index ``save_ivf`` wrote to ``path``; ``source``: the float32 rows it re-ranks
    from, for an index saved in borrowed mode. ``warm``: run one query before returning."""
    path = Path(path)
    side = side_path(path)
    if not path.exists() or not side.exists():
        raise FileNotFoundError(f"no saved IVF index at {path} (it needs {path.name} and {side.name})")
    meta, arrays = _read_side(side.read_bytes(), str(side))
    if meta["borrowed"] and source is None:
        raise ValueError("this IVF index was saved borrowing its vectors: open it with source= the same rows")
    index = IVFIndex(
        **{key: meta[key] for key in _SETTINGS},
        source=source if meta["borrowed"] else None,
        nlist=meta["nlist_setting"],
        retrain_growth=meta["retrain_growth"],
        retune_growth=meta["retune_growth"],
    )
    _restore(index, _faiss().read_index(str(path)), meta, arrays)
    if warm:
        warm_up(index)
    return index


def restore_ivf(index: IVFIndex, faiss_bytes: bytes, side_bytes: bytes, where: str = "the saved index") -> None:
    """Fill ``index`` (new, untrained, made with the settings the index was saved with:
    ``structure_of`` both must agree) from the bytes of the two files ``save_ivf`` wrote.
    Its search knobs (``nprobe``, ``rerank``) stay its own, unless it tunes itself: then it
    takes the values the saved index was tuned to. Raises ValueError naming what differs."""
    meta, arrays = _read_side(side_bytes, where)
    if index.trained or len(index):
        raise ValueError("restore_ivf fills a new, empty index")
    saved, wanted = _structure(meta), structure_of(index)
    if saved != wanted:
        differ = sorted(key for key in wanted if saved.get(key) != wanted[key])
        shown = ", ".join(f"{key} {saved.get(key)!r} (wanted {wanted[key]!r})" for key in differ)
        raise ValueError(f"{where} was built with other settings: {shown}")
    if index.tunes and meta["tuned_at"]:
        index.nprobe, index.rerank = int(meta["nprobe"]), int(meta["rerank"])
    _restore(index, _parsed(faiss_bytes), meta, arrays)


def _parsed(faiss_bytes: bytes) -> Any:
    """The FAISS index in ``faiss_bytes``, handed to FAISS's reader a chunk at a time:
    ``faiss.deserialize_index`` would first copy all of them (a 10M-entry index: a gigabyte more
    at the moment each worker opens it)."""
    faiss, view, at = _faiss(), memoryview(faiss_bytes), 0

    def chunk(n: int) -> bytes:
        nonlocal at
        piece = view[at : at + n]
        at += len(piece)
        return bytes(piece)

    return faiss.read_index(faiss.PyCallbackIOReader(chunk))


def structure_of(index: IVFIndex) -> dict:
    """The settings that shape a saved index's lists and codes (not its search knobs)."""
    return {**{key: getattr(index, key) for key in _STRUCTURE}, "nlist_setting": index.nlist_setting}


def _structure(meta: dict) -> dict:
    return {**{key: meta.get(key) for key in _STRUCTURE}, "nlist_setting": meta.get("nlist_setting")}


def _read_side(data: bytes, where: str) -> tuple[dict, dict]:
    """(meta, arrays) of a ``.npz`` written by ``save_ivf`` (never unpickled)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            arrays = {key: saved[key] for key in saved.files if key != "meta"}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{where} is not an IVF index's .npz file ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(f"{where}: IVF index file format {got}, this version reads {_FORMAT}")
    if "hnsw_quantizer_from" in meta:  # the option's earlier name, in indexes saved before it changed
        meta["grouped_quantizer_from"] = meta.pop("hnsw_quantizer_from")
    return meta, arrays


def _restore(index: IVFIndex, faiss_index: Any, meta: dict, arrays: dict) -> None:
    """Put a read FAISS index and its bookkeeping into ``index`` (made with the saved settings)."""
    rows, alive = meta["rows"], arrays["alive"]
    if alive.dtype != bool or alive.shape != (rows,) or int(alive.sum()) != meta["live"]:
        raise ValueError(f"the saved index's live rows disagree with its count of {rows} rows, {meta['live']} live")
    index._index = faiss_index
    index._staged = None
    index.nlist, index.trained_on, index.tuned_at = meta["nlist"], meta["trained_on"], meta["tuned_at"]
    index._grow(room_at_open(rows, 1024))  # free rows: the first addition after an open copies nothing
    index._alive[:rows] = alive
    index._rows, index._live = rows, meta["live"]
    if not meta["borrowed"]:
        index._own[:rows] = arrays["own"]
        index._row_ids[:rows] = arrays["row_ids"]


def warm_up(index: IVFIndex) -> None:
    """One search at the index's settings (a unit vector as the query): pays, at
    open, what a process's first query pays once (see the module docstring)."""
    if not index.trained or len(index) == 0:
        return
    query = np.zeros((1, index.dim), np.float32)
    query[0, 0] = 1.0  # any unit vector: the paths and structures are the same for every query
    index.search(query, min(5, len(index)))
