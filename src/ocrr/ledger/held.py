"""The held ledger: what every store keeps beside its storage, and how it takes rows in.

Storage is untrusted input. Whatever engine holds the log (``ocrr.ledger.sqlite``,
``ocrr.ledger.postgres``), the store holds the checked entries' Merkle tree and chain
hashes in memory (and a mirror of the entries: a ``Chain``, or whatever ``apply`` feeds,
e.g. a substrate), answers heads and proofs from them, and checks every row storage returns
against them before using it. ``HeldLedger`` is that part, written once; an engine
subclass reads and writes its storage:

* ``_commit(batch)`` (``ocrr.ledger.group_commit``): write one group, calling
  ``_check_tail`` in the write transaction (``ocrr.ledger.tail``), ``_hashed_of`` for the
  new rows, and ``_commit_done`` / ``_commit_failed`` after;
* ``_row_reader()``: rows ``(id, label, text, vector, prev_hash, hash)`` as stored now, for
  ``check_slice``, read several in a row (e.g. on one connection); other processes' rows go
  through ``_take_in_rows``;
* ``scan``, ``refresh``, ``read_entries``, ``_record_checkpoint``, ``_verification_rows``,
  ``record_verification``, ``last_verification``, ``data_version``, ``follow``, ``close``.

The ``LedgerStore`` protocol (``ocrr.ledger.store``) is what the service uses of a store.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Self

import numpy as np

from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError
from ocrr.ledger import hashed_ahead
from ocrr.ledger.chain import F4LE, GENESIS, Chain
from ocrr.ledger.checkpoint_records import record_note
from ocrr.ledger.columns import HashColumn
from ocrr.ledger.group_commit import GroupCommit, Pending
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import each_node
from ocrr.ledger.rows import check_stored
from ocrr.ledger.scan import Damage, LedgerReport, Scan, check_stored_rows
from ocrr.ledger.tail import StoredTail, check_tail
from ocrr.utils.rwlock import RWLock

__all__ = ["Apply", "HeldLedger", "damage_in"]


# apply(vectors (m, d) float32, labels, texts, hashes) -> the in-memory chain head afterwards:
# feeds entries to the in-memory side. ``hashes``: their chain hashes as the store computed
# them (its own commits) or checked them (entries an open read, others' entries), for the side
# to take as they are, or None: the side hashes the entries itself, and its head must then be
# the store's (the check that it was opened with the settings that wrote them). A
# three-argument apply (before ``hashes``) is still taken: it is called without them.
Apply = Callable[[np.ndarray, Sequence, Sequence, Sequence | None], bytes]


class HeldLedger(GroupCommit):
    """The tree, chain and mirror a store holds of its checked entries, with the proofs made
    from them and the checks of every row taken in. ``lock`` (an RWLock) is held for writing
    while the mirror changes; read the mirror under ``lock.read()``."""

    path: Path | str  # where the ledger lives, as messages show it (a URL without its password)
    # While a commit runs its items' checks: (its thread, its connection, the latest
    # verification record's id its transaction read), for the store's ``damage_since``.
    _checking: tuple[int, Any, int] | None = None

    def _checks_in_transaction(self, conn: Any, verified: int | None, checked: Callable, batch: list) -> list:
        """``checked(batch)``, the appenders' checks, run inside the commit's transaction on
        ``conn``: meanwhile the store's ``damage_since``, asked from this thread, answers from
        ``verified`` (the latest verification record's id, read with the stored tail) and reads
        any newer record on ``conn``, at no statement of its own."""
        self._checking = (threading.get_ident(), conn, -1 if verified is None else verified)
        try:
            return checked(batch)
        finally:
            self._checking = None

    def _start_mirror(self, scan: Scan, report: LedgerReport) -> None:
        """The state every store keeps beside its storage: the checked entries' tree and chain,
        the lock over the mirror, the group-commit queue."""
        self.dim: int | None = scan.dim
        self.tree = scan.tree
        # the checked entries' chain hashes, compact (the scan's own column when it made one)
        self._hashes = scan.hashes if isinstance(scan.hashes, HashColumn) else HashColumn(scan.hashes)
        self.report = report
        self.lock = RWLock()  # write: the mirror changes; read: a consistent view of it
        self._start_group_commits()
        self.followed = 0  # entries other processes committed, taken in by this one
        self._guess: hashed_ahead.Hashed | None = None  # entries hashed while waiting on storage
        self.broken_at: int | None = None  # the entry that stopped taking in others' entries
        # Taking in other processes' entries and feeding our own commits to the mirror happen
        # in id order under _follow; _own: the ids our commit in flight will add (fed by it).
        self._follow = threading.Condition()
        self._own: tuple[int, int] | None = None
        self.memory: Chain | None = None
        self._apply: Apply
        # Signs the checkpoint records of full checks; its verifier key is the one whose
        # records this store trusts (set by open; None: records none, trusts none).
        self.signer: Signer | None = None

    def _take_in_scan(self, scan: Scan, apply: Apply | None, unit_rows: bool = False) -> None:
        """Hand the checked entries to the caller's ``apply``, or (None) keep a plain Chain
        mirror built from the checked columns without rehashing. ``unit_rows``: the rows must
        obey the rows' rules (``ocrr.ledger.rows``: a substrate's cosine vote needs them), so
        those the scan did not check as it read them are checked first, a bad one named."""
        if unit_rows:
            first = min(scan.rows_checked, len(scan.hashes))
            check_stored(scan.vectors[first : len(scan.hashes)], f"ledger {self.path}", first)
        if apply is None:
            self.memory = Chain._from_stored(
                self.dim,
                None,  # ids and links as a checked scan's are: positions, each the hash before
                scan.labels,
                scan.texts,
                scan.vectors,
                None,
                scan.hashes,  # (the chain takes its own copy: it appends on its own)
                adopt=True,  # the scan's rows buffer, not a second copy of it
            )
            self._apply = self._apply_memory
        else:
            self._apply = apply if _takes_hashes(apply) else _ignoring_hashes(apply)
            if scan.hashes:
                self._feed(scan.vectors, scan.labels, scan.texts, scan.hashes)

    @property
    def broken(self) -> BaseException | None:
        """What failed this ledger closed (damage found, or the mirror part-way), or None."""
        return self._broken

    @property
    def vkeys(self) -> tuple[str, ...]:
        """The verifier keys whose checkpoint records this store trusts: its signer's, or none."""
        return () if self.signer is None else (self.signer.vkey,)

    # -- reading ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._hashes)

    @property
    def chain_head(self) -> bytes:
        hashes = self._hashes
        return hashes[-1] if hashes else GENESIS

    def entry_hash(self, i: int) -> bytes:
        return self._hashes[i]

    def root(self, size: int | None = None) -> bytes:
        """Merkle root of the first ``size`` entries (default: every committed one)."""
        return self.tree.root(len(self) if size is None else self._size(size))

    def head(self) -> tuple[int, bytes, bytes]:
        """(size, root, chain head) of the committed log, read together."""
        size, root, chain, _ = self.head_with_proofs(())
        return size, root, chain

    def head_with_proofs(
        self,
        ids,
        encode: Callable[[bytes], Any] = bytes,
        encode_all: Callable[[bytes], Sequence[Any]] | None = None,
    ) -> tuple[int, bytes, bytes, list[tuple[int, Any, list[Any]]]]:
        """The committed head and, for each id, (id, leaf hash, inclusion proof) at that head;
        ``encode``: what the leaves and proofs' nodes are handed out as, called once per
        distinct node (``b64``: ready for ``InclusionProof.documents(..., encoded=True)``);
        ``encode_all``: the same for all of them in one call (``b64_nodes``), instead."""
        if encode_all is None:
            encode_all = each_node(encode)
        with self.lock.read():
            size = len(self._hashes)
            ids = ids if isinstance(ids, range) else list(ids)  # a range: its proofs take the shorter way
            leaves, found = self.tree.leaves_and_proofs(ids, size, encode_all)
            proofs = list(zip(ids, leaves, found))
            return size, self.tree.root(size), self._hashes[size - 1] if size else GENESIS, proofs

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        return self.tree.inclusion_proof(index, len(self) if size is None else self._size(size))

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        return self.tree.consistency_proof(size1, len(self) if size2 is None else self._size(size2))

    def _size(self, size: int) -> int:
        # The tree may already hold the leaves of a commit in flight: never prove past the committed end.
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= len(self):
            raise IndexError(f"size {size!r} is outside 0..{len(self)} (the committed log)")
        return size

    # -- checking what storage holds ----------------------------------------------------
    def scan(self, verify: str = "full", rows: bool = True) -> tuple[LedgerReport, Scan | None]:
        """Check the ledger as stored now (read-only): the report, and what it holds when intact
        (``rows`` False: an engine may leave out its vectors, labels and texts)."""
        raise NotImplementedError

    def _row_reader(self) -> AbstractContextManager[Callable[[int, int], list[tuple]]]:
        """A reader of rows ``(id, label, text, vector, prev_hash, hash)`` ``lo``..``hi - 1``
        as stored now, for several reads in a row (an engine may keep one connection open for
        them, each read still its own transaction)."""
        raise NotImplementedError

    def check_slice(
        self, lo: int, hi: int, step: int = 0, rest: Callable[[float], bool] | None = None
    ) -> tuple[int, str] | None:
        """Rehash entries ``lo``..``hi - 1`` as they are stored now and compare them with the
        chain this process holds; the first that differs (its id and why), or None. The
        background check's rolling pass over entries older than the last checkpoint.
        ``step``: read and rehash that many entries at a time (0: all at once), calling
        ``rest(seconds the step took)`` between steps; a ``rest`` that returns True ends the
        check early (None: nothing found so far)."""
        hi = min(hi, len(self))
        if lo >= hi or self.dim is None:
            return None
        step = step if step > 0 else hi - lo
        with self._row_reader() as read:
            for start in range(lo, hi, step):
                began = time.monotonic()
                found = self._check_rows(read, start, min(start + step, hi))
                if found is not None:
                    return found
                if rest is not None and start + step < hi and rest(time.monotonic() - began):
                    return None
        return None

    def _check_rows(self, read: Callable[[int, int], list[tuple]], lo: int, hi: int) -> tuple[int, str] | None:
        try:
            rows = read(lo, hi)
            prev = self._hashes[lo - 1] if lo else GENESIS
            for i, (*_, digest, _leaf) in enumerate(check_stored_rows(rows, lo, prev, self.dim or 0), lo):
                if digest != self._hashes[i]:
                    return i, f"entry {i}: its hash differs from the one committed (history rewritten)"
        except Damage as e:
            return (lo if e.first_bad is None else e.first_bad), e.reason
        if len(rows) != hi - lo:
            return lo + len(rows), f"entry {lo + len(rows)} is missing (entries were removed)"
        return None

    def verify(self, verify: str = "full") -> LedgerReport:
        """Re-read and check storage as it is now; record a checkpoint if intact (full check)."""
        report, _ = self.scan(verify, rows=False)
        self.report = report
        if report and verify == "full":
            self.refresh()  # other processes may have appended: vouch only for entries this one holds too
            self._record_checkpoint(min(report.size, len(self)))
        return report

    def refresh(self) -> int:
        """Take in what other processes committed since this one last looked; how many."""
        raise NotImplementedError

    def _checkpoint_row(self, size: int | None) -> tuple | None:
        """The checkpoint record of the first ``size`` entries (default: all), with its signed
        note; None when there is nothing to vouch for or no key to sign with (an unsigned
        record would be ignored by every reader)."""
        size = len(self) if size is None else size
        if size == 0 or self.signer is None:
            return None
        chain_head, root = self._hashes[size - 1], self.tree.root(size)
        return (size, chain_head, root, time.time(), record_note(self.signer, size, root, chain_head))

    def _record_checkpoint(self, size: int | None = None) -> None:
        raise NotImplementedError

    # -- appending ----------------------------------------------------------------------
    def _check_tail(self, tail: StoredTail) -> None:
        """In the write transaction: storage ends where this ledger does (``ocrr.ledger.tail``),
        or the ledger fails closed: this append and every later one are refused."""
        try:
            check_tail(self.path, len(self._hashes), self.chain_head, tail)
        except LedgerIntegrityError as e:
            self._broken = e
            raise

    def _same_dim(self, batch: list[Pending]) -> tuple[list[Pending], int]:
        """The items of the ledger's dimension (the first commit fixes it), and that dimension;
        the others fail."""
        dim = self.dim or batch[0].vecs.shape[1]
        ok = [p for p in batch if p.vecs.shape[1] == dim]
        for p in batch:
            if p.vecs.shape[1] != dim:
                p.error, p.done = (
                    OcrrError(
                        f"vectors have dimension {p.vecs.shape[1]}, the ledger holds {dim}; "
                        "encode with the ledger's encoder"
                    ),
                    True,
                )
        return ok, dim

    def _hashed_of(self, ok: list[Pending]) -> tuple[hashed_ahead.Hashed, list[tuple[int, int, bytes]]]:
        """New entries chained on from the last one, hashed (what a guess hashed of them
        already is taken: ``ocrr.ledger.hashed_ahead``), and the tree nodes they complete, as
        runs (``MerkleTree.extend``)."""
        n = len(self._hashes)
        hashed = hashed_ahead.take(self._guess, ok, n, self.chain_head)
        self._guess = None
        for p in ok:
            p.ids = range(n, n + len(p.labels))
            n += len(p.labels)
        return hashed, self.tree.extend(hashed.leaves)

    def _hash_next(self, start: int, prev: bytes) -> None:
        """While the group ending before entry ``start`` (its last hash ``prev``) is being made
        durable: hash the items queued now, the likely next group."""
        with self._cv:
            queued = list(self._queue)
        self._hash_ahead(queued, start, prev)

    def _hash_ahead(self, items: list[Pending], start: int | None = None, prev: bytes | None = None) -> None:
        """While the committing thread waits on storage: hash ``items`` (the group about to be
        written, or the one queued after it) on from entry ``start`` and hash ``prev`` (by
        default, the last entry held), extending the guess made so far where it fits. A guess
        only: should it fail, it is dropped (the commit hashes its items itself), never a commit."""
        if self.dim is None:
            return  # the first commit fixes the dimension: nothing to guess from
        try:
            if start is None or prev is None:
                with self.lock.read():
                    start, prev = len(self._hashes), self.chain_head
            items = [p for p in items if p.vecs.shape[1] == self.dim]
            if items:
                self._guess = hashed_ahead.take(self._guess, items, start, prev)
        except Exception:  # noqa: BLE001 - a commit in flight must not fail over an optimisation
            self._guess = None

    def _commit_failed(self, n0: int | None, batch: list[Pending], err: BaseException) -> None:
        """A group commit wrote nothing: drop its leaves from the tree (added from ``n0``) and
        fail its items that are not done with ``err``."""
        with self._follow:
            if n0 is not None:
                self.tree.truncate(n0)
            self._own = None
            self._follow.notify_all()
        for p in batch:
            if not p.done:
                p.error, p.done = err, True

    def _commit_done(self, ok: list[Pending], digests: list[bytes], dim: int) -> None:
        """A group commit is in storage: the mirror follows it, and its items are done."""
        self.commits += 1
        self.dim = dim
        with self._follow, self.lock.write():
            self._own = None
            self._follow.notify_all()
            self._hashes.extend(digests)
            vecs = np.concatenate([p.vecs for p in ok]) if len(ok) > 1 else ok[0].vecs
            try:
                self._feed(vecs, [x for p in ok for x in p.labels], [x for p in ok for x in p.texts], digests)
            except BaseException as e:  # in storage but not in memory: refuse appends until reopened
                self._broken = OcrrError(
                    f"ledger {self.path}: the in-memory copy could not take committed entries ({e}); reopen the ledger"
                )
                raise self._broken from e
        for p in ok:
            p.done = True

    # -- other processes' entries -------------------------------------------------------
    def _take_in_rows(self, rows: Sequence[tuple], size: int, stop: str) -> int:
        """Under ``_follow``: add ``rows`` (``(id, label, text, vector, prev_hash, hash[, leaf])``
        from the entry this ledger holds next, read by the engine up to ``size``, the size its
        storage says it holds) to the tree, the chain and the mirror, each checked to chain on
        from the one before. Any failure fails the ledger closed (``stop``: what the message
        tells the operator to stop)."""
        n0 = len(self._hashes)
        try:
            tree_leaves, digests, labels, texts, vectors = [], [], [], [], []
            try:
                for label, text, vec, digest, leaf in check_stored_rows(rows, n0, self.chain_head, self.dim or 0):
                    tree_leaves.append(leaf)
                    digests.append(digest)
                    labels.append(label)
                    texts.append(text)
                    vectors.append(vec)
            except Damage as e:
                self.broken_at = e.first_bad
                raise LedgerIntegrityError(
                    f"entry {e.first_bad}, written by another process, does not chain on from entry "
                    f"{(e.first_bad or 0) - 1} ({e.reason})",
                    e.first_bad,
                ) from None
            if len(rows) != size - n0:
                raise LedgerIntegrityError(
                    f"storage says it holds {size} entries but has {n0 + len(rows)}", n0 + len(rows)
                )
            vecs = np.frombuffer(b"".join(vectors), F4LE).reshape(len(rows), self.dim or 0)
            with self.lock.write():
                self.tree.extend(tree_leaves)
                self._hashes.extend(digests)
                self._feed(vecs.astype(np.float32), labels, texts, digests)
        except BaseException as e:  # the mirror may be part-way: refuse to go on until reopened
            raise self._take_in_failed(e, stop) from e
        self.followed += len(rows)
        return len(rows)

    def _take_in_failed(self, e: BaseException, stop: str) -> OcrrError:
        """Fail closed over ``e``, raised while taking in others' entries: the error (an integrity
        error when the rows were bad, a storage error otherwise) that every later call raises too."""
        message = (
            f"ledger {self.path}: could not take in entries other processes committed "
            f"({e}); stop the {stop} writing it and run `ocrr ledger verify {self.path}`"
        )
        self._broken = (
            LedgerIntegrityError(message, e.first_bad)
            if isinstance(e, LedgerIntegrityError)
            else LedgerStorageError(message)
        )
        return self._broken

    def _feed(self, vecs: np.ndarray, labels: Sequence, texts: Sequence, hashes: Sequence[bytes] | None = None) -> None:
        """Hand entries to the mirror (``hashes``: theirs, computed or checked here, or None:
        the mirror hashes them, and must reach the same chain head)."""
        if self._apply(vecs, labels, texts, hashes) != self.chain_head:  # same bytes in, same digests out
            raise OcrrError(
                f"ledger {self.path}: the in-memory chain does not match the file (was the "
                "substrate opened with other settings than the ones that wrote it?)"
            )

    def _apply_memory(
        self, vecs: np.ndarray, labels: Sequence, texts: Sequence, hashes: Sequence[bytes] | None
    ) -> bytes:
        memory = self.memory
        assert memory is not None  # made in _take_in_scan whenever this method is the apply
        if memory.dim is None:
            memory = self.memory = Chain(vecs.shape[1])
        if hashes is not None:
            memory.extend_hashed(vecs, labels, texts, hashes)
        elif len(labels) == 1:
            memory.append_checked(vecs[0], labels[0], texts[0])
        else:
            memory.extend(vecs, labels, texts)
        return memory.head

    # -- capabilities (engines override what they have) ----------------------------------
    def follow(
        self,
        every: float,
        on_error: Callable[[OcrrError], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> object | None:
        """Keep this ledger current in the background (a follower, which ``close`` stops), or
        None when the engine needs none (its readers ``refresh`` before they answer)."""
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError


def _takes_hashes(apply: Callable) -> bool:
    """Whether ``apply`` takes the fourth argument, ``hashes`` (an apply written before it did not)."""
    try:
        inspect.signature(apply).bind(None, None, None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): assume the current form
        return True
    return True


def _ignoring_hashes(apply: Callable) -> Apply:
    """A three-argument ``apply`` called as the current four-argument one: it hashes the entries itself."""
    return lambda vecs, labels, texts, hashes: apply(vecs, labels, texts)


def damage_in(rows: Iterable[tuple[int, str]], after: int, where: str) -> tuple[int, dict | None]:
    """Verification records ``(id, report JSON)`` in id order, read past ``after``: the last id
    (``after`` when none) and the first report that found damage (``ok`` not true), or None.
    A record that cannot be read counts as damage (``where``: "the file", "the database")."""
    last, bad = after, None
    for id_, text in rows:
        last = id_
        if bad is not None:
            continue
        report = read_report(text, where)
        if report.get("ok") is not True:
            bad = report
    return last, bad


def read_report(text: object, where: str) -> dict:
    """A verification record's report, or one that says it is unreadable (``where``: "the
    file", "the database"): never an exception, never anything but a JSON object."""
    try:
        report = json.loads(text)  # type: ignore[arg-type]  # whatever storage held: checked here
    except (TypeError, ValueError):
        return {"ok": False, "reason": f"a verification record in {where} is unreadable"}
    return report if isinstance(report, dict) else {"ok": False, "reason": f"a bad verification record in {where}"}
