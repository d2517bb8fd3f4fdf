"""A ledger file's rows read again after its check, a block at a time, each proven the checked one.

A caller that needs every row of a large ledger but not all at once (``ocrr ledger index``
building the saved index, a benchmark computing the exact vote beside a running service)
checks the file without holding its rows (``scan_location(..., rows=False)``: the chain and
the tree), keeps the checked chain hashes (the scan's ``hashes``, 32 bytes an entry) and then
reads the rows it needs with ``CheckedRows``. The file is storage, untrusted between the
check and these reads: every row read is rehashed, linked to the checked hash before it, and
its hash compared with the checked one before it is handed out, so a row edited since the
check is refused with one message naming the entry.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.scan import Damage, check_stored_rows
from ocrr.ledger.sqlite.schema import connect

__all__ = ["CheckedRows"]

_SELECT = "SELECT id, label, text, vector, prev_hash, hash FROM entries"


class CheckedRows:
    """Read access to entries 0 .. ``len(checked)``-1 of the ledger file ``path``, of ``dim``
    floats a row, every row read proven to be the checked one (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], checked: Sequence[bytes], dim: int):
        self.path, self.checked, self.dim = path, checked, dim
        self._conn = connect(Path(path), readonly=True)

    def __len__(self) -> int:
        return len(self.checked)

    def block(self, lo: int, hi: int) -> tuple[np.ndarray, list[str]]:
        """Entries ``lo .. hi-1``: their rows as float32 and their labels."""
        found = self._conn.execute(f"{_SELECT} WHERE id >= ? AND id < ? ORDER BY id", (lo, hi))
        rows = np.empty((hi - lo, self.dim), np.float32)
        labels = []
        for got, (label, vector) in enumerate(self._verified(found, lo)):
            rows[got] = np.frombuffer(vector, "<f4")
            labels.append(label)
        if len(labels) != hi - lo:
            raise self._changed(lo + len(labels), "it is missing")
        return rows, labels

    def blocks(self, size: int) -> Iterator[tuple[int, np.ndarray, list[str]]]:
        """(first id, rows, labels) of every entry in id order, ``size`` entries at a time."""
        for lo in range(0, len(self), size):
            yield (lo, *self.block(lo, min(lo + size, len(self))))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The rows of entries ``ids``, as float32, in the order given."""
        out = np.empty((len(ids), self.dim), np.float32)
        for at, i in enumerate(np.asarray(ids, np.int64).tolist()):
            if not 0 <= i < len(self):
                raise ValueError(f"entry {i} is not among the {len(self)} checked")
            found = self._conn.execute(f"{_SELECT} WHERE id = ?", (i,)).fetchall()
            vectors = [vector for _label, vector in self._verified(found, i)]
            if len(vectors) != 1:
                raise self._changed(i, "it is missing")
            out[at] = np.frombuffer(vectors[0], "<f4")
        return out

    def _verified(self, rows: Iterable[tuple], start: int) -> Iterator[tuple[str, bytes]]:
        """(label, vector bytes) of ``rows`` (entries ``start``, ``start + 1``, …): each rehashed,
        linked to the checked hash before it, and its own hash the checked one."""
        i, checked = start, self.checked
        before = checked[start - 1] if start else GENESIS
        try:
            for label, _text, vector, digest, _leaf in check_stored_rows(rows, start, before, self.dim):
                if i >= len(checked) or digest != checked[i]:
                    raise Damage(i, "its hash is not the one the check read")
                yield label, vector
                i += 1
        except Damage as d:
            raise self._changed(d.first_bad if d.first_bad is not None else i, d.reason) from None
        except (TypeError, ValueError, UnicodeError) as e:
            raise self._changed(i, f"a value of the wrong kind ({e})") from None

    def _changed(self, entry: int, why: str) -> OcrrError:
        shown = str(self.path)  # a file's path: nothing to redact
        return OcrrError(
            f"ledger {shown} changed since it was checked: entry {entry} differs from the checked one ({why}); "
            f"run `ocrr ledger verify {shown}`, then run the command again"
        )

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> CheckedRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
