"""The rules a vector row obeys at every persistent door, written once.

A ledger that a substrate serves holds rows that are finite, of the ledger's dimension and
of unit L2 norm (the vote's similarities are cosines computed as dot products): what
``/correct`` takes, what ``open_substrate`` finds stored, what ``ocrr ledger import`` loads
into a file or a PostgreSQL database, what a durable ledger's appends take
(``check_appended``). ``check_rows`` checks them and names the first offending row;
``check_dim`` bounds a dimension read from storage or a header before anything is
allocated for it, and ``check_memory`` the rows an open is about to read into memory. The
in-memory experiment path (``Chain``) does not come through here.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ocrr.errors import OcrrError
from ocrr.utils.memory import available_bytes

__all__ = [
    "MAX_DIM",
    "UNIT_TOLERANCE",
    "check_appended",
    "check_dim",
    "check_memory",
    "check_rows",
    "check_stored",
    "rows_obey",
]

#: The largest dimension a ledger may claim (sentence encoders give 384 to 4096).
MAX_DIM = 1 << 16

#: How far a row's L2 norm may be from 1. Encoders normalise in float32, which leaves norms
#: within ~1e-6 of 1; a row off by more was not normalised.
UNIT_TOLERANCE = 1e-3

_UNIT_FIX = (
    "Divide each row by its L2 norm first: vecs / np.linalg.norm(vecs, axis=1, keepdims=True) "
    "(ocrr's encoders already do)."
)


def check_dim(dim: object, what: str) -> int:
    """``dim`` as a dimension (an int in 1..MAX_DIM), or one OcrrError naming ``what`` claimed it."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= MAX_DIM:
        raise OcrrError(f"{what} claims dimension {dim!r}; a ledger's dimension is a whole number in 1..{MAX_DIM}")
    return dim


def check_memory(entries: int, dim: int, what: str = "for their rows") -> None:
    """An ``OcrrError`` when ``entries`` float32 rows of ``dim`` would not fit in the memory
    left (``ocrr.utils.memory.available_bytes``): asked before an open reads them, so that a
    machine or container too small gets this error, not the kernel's out-of-memory killer
    half way through, which may pick another process. Rows that take little are not asked
    about."""
    need = entries * dim * 4
    if need < _ASK_FROM:
        return
    free = available_bytes()
    if free is not None and need > free:
        raise OcrrError(
            f"the ledger's {entries:,} entries of {dim} float32 need {need / 1e9:.1f} GB of memory {what}, and "
            f"{free / 1e9:.1f} GB is left here (the machine's available memory, or what its container's memory "
            "limit leaves, plus free swap); open it where more memory is free, or free memory here first"
        )


_ASK_FROM = 1 << 26  # bytes of rows from which check_memory reads the system's figures


def check_rows(
    vecs: np.ndarray,
    dim: int | None,
    row: Callable[[int], str],
    fix: str = _UNIT_FIX,
) -> np.ndarray:
    """``vecs`` ((m, d) floats) if every row is finite, ``dim`` wide (when given) and of unit
    norm within ``UNIT_TOLERANCE``; else one OcrrError naming the first bad row (``row(i)``
    says how: "correction vectors row 3", "a.jsonl:7 (entry 5)") and ``fix``."""
    if vecs.ndim != 2:
        raise OcrrError(f"{row(0)}: vectors must have shape (m, d), got {vecs.shape}")
    if dim is not None and vecs.shape[1] != dim:
        raise OcrrError(f"{row(0)} has dimension {vecs.shape[1]}, the ledger holds {dim}; encode with its encoder")
    if _surely_unit(vecs):
        return vecs
    with np.errstate(over="ignore", invalid="ignore"):  # a huge or non-finite row gives inf/nan: named below
        # np.linalg.norm's float64 sums, without its temporaries (fresh memory is slow to touch)
        norms = np.sqrt(np.square(vecs, dtype=np.float64).sum(axis=1))
    finite = np.isfinite(vecs).all(axis=1)
    bad = np.flatnonzero(~finite | ~(np.abs(norms - 1.0) <= UNIT_TOLERANCE))
    if len(bad):
        i = int(bad[0])
        if not finite[i]:
            raise OcrrError(f"{row(i)} contains NaN or infinity; a ledger stores finite vectors. {fix}")
        raise OcrrError(
            f"{row(i)} has norm {float(norms[i]):.4g}; a ledger stores unit vectors (cosine similarity). {fix}"
        )
    return vecs


def rows_obey(vecs: np.ndarray) -> bool:
    """Whether ``check_rows`` takes ``vecs`` (``dim`` not given): a reader that holds a block of
    rows anyway notes it, and the open does not read them all again (a row that fails is left
    to that later check, which names it)."""
    try:
        check_rows(vecs, None, _batch_row)
    except OcrrError:
        return False
    return True


_STORED_FIX = (
    "The ledger holds rows that its checked doors (/correct, `ocrr ledger import`) refuse: it was "
    "written by another program or edited. Restore it from a backup, or rebuild it from unit vectors."
)

# Stored rows checked at once by ``check_stored``.
_STORED_BLOCK = 4096


def check_stored(vecs: np.ndarray, where: str, first: int = 0) -> None:
    """``check_rows`` over rows an open finds stored (those of entries ``first`` on), naming a
    bad one by its entry ("``where``: entry 7"). A block at a time: its float64 temporaries
    then stay small and reused, where whole they would be eight bytes per stored value of
    fresh memory, which is slow to touch on a loaded VM. Two threads check blocks (numpy
    lets go of the GIL); the first bad row in entry order is the one named."""

    def check(lo: int) -> None:
        check_rows(vecs[lo : lo + _STORED_BLOCK], None, _entry_namer(where, first + lo), _STORED_FIX)

    starts = range(0, len(vecs), _STORED_BLOCK)
    if len(starts) < 2:
        for lo in starts:
            check(lo)
        return
    with ThreadPoolExecutor(2, thread_name_prefix="ocrr-check") as pool:
        for _ in pool.map(check, starts):  # (in order: the first block's error is raised first)
            pass


def _entry_namer(where: str, first: int) -> Callable[[int], str]:
    """How ``check_rows`` names row i of a block that starts at entry ``first``."""
    return lambda i: f"{where}: entry {first + i}"


def check_appended(vecs: np.ndarray) -> np.ndarray:
    """``check_rows`` at a ledger's append doors (``extend``, ``append``), naming a row by its
    place in the batch ("vector 3"): a ledger takes no row that ``ocrr serve`` or ``ocrr ledger
    import`` would refuse when reading it back. Vectorised: a batch of unit float32 rows costs
    one pass over it, however many millions of rows a bulk append brings."""
    return check_rows(vecs, None, _batch_row)


def _batch_row(i: int) -> str:
    return f"vector {i}"


_F32_ROUNDING = 2.0**-24


def _surely_unit(vecs: np.ndarray) -> bool:
    """Whether every float32 row is finite and of unit norm within ``UNIT_TOLERANCE``, judged
    from float32 sums of squares only where their rounding cannot change the verdict: a
    sum of d squares is off by at most (d + 1) roundings of it, so a sum inside the band
    shrunk by that much is inside it exactly. False (the float64 check then decides and
    names the row) for any other row: outside or near the band's edges, inf or NaN (a
    non-finite value or an overflowing square makes the sum so)."""
    if vecs.dtype != np.float32 or not vecs.size:
        return False
    slack = (vecs.shape[1] + 3) * _F32_ROUNDING * 1.01  # (the extra roundings: the bounds' own)
    low, high = (1.0 - UNIT_TOLERANCE) ** 2 * (1.0 + slack), (1.0 + UNIT_TOLERANCE) ** 2 * (1.0 - slack)
    if not low < high:
        return False  # (so wide a row: the float64 check only)
    with np.errstate(over="ignore", invalid="ignore"):
        sums = np.einsum("ij,ij->i", vecs, vecs).astype(np.float64)
    return bool(((sums >= low) & (sums <= high)).all())  # (NaN compares False)
