"""``LedgerStore``: everything the service and the persistent substrate use of a durable ledger.

Two engines implement it (``ocrr.ledger.sqlite.store.DurableLedger`` on a file,
``ocrr.ledger.postgres.store.PostgresLedger`` in a database), both ``HeldLedger``s
(``ocrr.ledger.held``); ``ocrr.ledger.location.open_store`` opens either. Code above the
ledger names this protocol, never an engine: what differs between them is a capability
here (``follow`` starts a follower or returns None; ``data_version`` is a change marker or
None), and an error that is storage out of reach, not damage, is a ``LedgerStorageError``
(``ocrr.errors``) while ``broken`` stays None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, Self

from ocrr.errors import OcrrError
from ocrr.ledger.group_commit import Done
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.scan import LedgerReport, Scan

__all__ = ["LedgerStore"]


class _ReadWriteLock(Protocol):
    def read(self) -> AbstractContextManager[object]: ...

    def write(self) -> AbstractContextManager[object]: ...


class LedgerStore(Protocol):
    """A durable, checked, append-only ledger (see the module's docstring)."""

    dim: int | None
    tree: MerkleTree
    report: LedgerReport  # the outcome of the last check
    signer: Signer | None  # signs checkpoint records; the key whose records are trusted
    commits: int  # group commits this process wrote
    followed: int  # entries other processes committed, taken in by this one
    broken_at: int | None  # the entry that stopped taking in others' entries

    @property
    def path(self) -> Path | str: ...  # where it lives, as messages show it (a URL without its password)

    @property
    def lock(self) -> _ReadWriteLock: ...  # write: the mirror changes; read: a consistent view

    @property
    def broken(self) -> BaseException | None: ...  # what failed it closed, or None

    @property
    def vkeys(self) -> tuple[str, ...]: ...

    @property
    def chain_head(self) -> bytes: ...

    # -- the held log and its proofs
    def __len__(self) -> int: ...

    def entry_hash(self, i: int) -> bytes: ...

    def root(self, size: int | None = None) -> bytes: ...

    def head(self) -> tuple[int, bytes, bytes]: ...

    def head_with_proofs(
        self,
        ids,
        encode: Callable[[bytes], Any] = bytes,
        encode_all: Callable[[bytes], Sequence[Any]] | None = None,
    ) -> tuple[int, bytes, bytes, list[tuple[int, Any, list[Any]]]]: ...

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]: ...

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]: ...

    # -- appending
    def append(self, vector, label: str, text: str | None = None) -> int: ...

    def extend(self, vectors, labels: Sequence[str], texts: Sequence[str | None] | None = None) -> range: ...

    def submit(
        self,
        vectors,
        labels: Sequence[str],
        texts: Sequence[str | None] | None,
        done: Done,
        check: Callable[[], None] | None = None,
    ) -> None: ...

    # -- what storage holds now
    def refresh(self) -> int: ...

    def read_entries(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple]: ...

    def scan(self, verify: str = "full", rows: bool = True) -> tuple[LedgerReport, Scan | None]: ...  # the check

    def verify(self, verify: str = "full") -> LedgerReport: ...

    def check_slice(
        self, lo: int, hi: int, step: int = 0, rest: Callable[[float], bool] | None = None
    ) -> tuple[int, str] | None: ...

    def data_version(self) -> int | None: ...  # a change marker, or None: never reuse a result

    # -- records beside the log
    def record_verification(self, report: dict) -> None: ...

    def damage_since(self, after: int, wait: bool = True) -> tuple[int, dict | None] | None: ...

    def last_verification(self) -> dict | None: ...

    # -- capabilities
    def follow(
        self,
        every: float,
        on_error: Callable[[OcrrError], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> object | None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...
