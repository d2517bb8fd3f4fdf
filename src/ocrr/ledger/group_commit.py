"""Group commit: appends queued by many threads, written by one thread in groups.

A durable store acknowledges an append only once it is on disk, and each commit pays a
flush (an fsync of SQLite's WAL, or PostgreSQL's WAL flush). ``GroupCommit`` queues the
appends that arrive while a commit runs and writes them together in the next one: one
flush for all of them. ``extend`` waits for its entries' commit in the calling thread (the
first waiting caller leads the next group); ``submit`` queues them and returns at once, and
a committer thread started by the first submit leads the groups and tells each submitter
when its entries are on disk (the service's corrections, which must not hold a thread each
while they wait).

A store subclasses ``GroupCommit``, calls ``_start_group_commits()`` when it is made and
writes one group in ``_commit(batch)``: it gives every item its ids, or leaves it to fail.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.labels import check_new_label
from ocrr.ledger.rows import check_appended
from ocrr.utils.thread_names import name_os_thread

__all__ = ["Done", "GroupCommit", "Pending", "check_batch", "checked"]

# done(ids, error): a submitted append is on disk (ids) or failed (error); called once, by the committing thread.
Done = Callable[[range | None, BaseException | None], None]


class Pending:
    """One queued append: its rows; once ``done``, its ``ids`` or its ``error``."""

    __slots__ = ("vecs", "labels", "texts", "ids", "error", "done", "notify", "check")

    def __init__(
        self,
        vecs: np.ndarray,
        labels: list,
        texts: list,
        notify: Done | None = None,
        check: Callable[[], None] | None = None,
    ):
        self.vecs, self.labels, self.texts = vecs, labels, texts
        self.ids: range | None = None
        self.error: BaseException | None = None
        self.done = False
        self.notify, self.check = notify, check  # for ``submit``: whom to tell, what to check first


class GroupCommit:
    """Appends queued and committed in groups; the subclass writes a group (``_commit``).

    Expects ``path`` (shown in errors), ``dim`` (None until the first entry) and ``__len__``
    of the store. ``_broken``: once set, every later group fails with it (a store whose
    copy in memory no longer matches what it wrote)."""

    # The thread committing what ``submit`` queues, started by the first submit.
    _committer: threading.Thread | None = None
    # True: ``_commit`` runs the items' checks itself (``checked``), inside its write
    # transaction, where a store can answer them from what that transaction read already.
    _checks_in_commit = False
    path: object
    dim: int | None

    def _start_group_commits(self) -> None:
        self._cv = threading.Condition()
        self._queue: list[Pending] = []
        self._committing = False
        self._closed = False
        self._broken: BaseException | None = None
        self.commits = 0  # transactions, for the group-commit figures

    def __len__(self) -> int:
        raise NotImplementedError

    def _commit(self, batch: list[Pending]) -> None:
        """Write ``batch`` (the items whose checks passed, or with ``_checks_in_commit`` every
        item, whose checks it runs) in one transaction: each item gets its ids and ``done``,
        or an ``error`` and ``done``."""
        raise NotImplementedError

    def append(self, vector, label: str, text: str | None = None) -> int:
        """Append one entry; return its id once it is on disk."""
        vec = _floats(vector, "vector is")
        if vec.ndim != 1:
            raise OcrrError(f"append takes one vector of shape (d,), got shape {vec.shape}; use extend() for several")
        return self.extend(vec.reshape(1, -1), [label], [text])[0]

    def extend(self, vectors, labels: Sequence[str], texts: Sequence[str | None] | None = None) -> range:
        """Append entries atomically (all or none); return their ids once on disk."""
        item = self._pending(vectors, labels, texts)
        if not len(item.vecs):
            return range(len(self), len(self))
        with self._cv:
            self._queue.append(item)
            while not item.done:
                if self._committing:
                    self._cv.wait()
                    continue
                if self._closed:
                    raise OcrrError(f"ledger {self.path} is closed; reopen it to append")
                self._lead()  # commit everything waiting now, ours included
        if item.error is not None:
            raise item.error
        assert item.ids is not None  # done without an error: its commit gave it ids
        return item.ids

    def submit(
        self,
        vectors,
        labels: Sequence[str],
        texts: Sequence[str | None] | None,
        done: Done,
        check: Callable[[], None] | None = None,
    ) -> None:
        """Queue entries for the next group commit and return at once (bad input raises
        here, as ``extend`` would). ``done(ids, error)`` is called exactly once, by the
        committing thread, when they are on disk (their ids) or failed (an ``OcrrError``);
        keep it short. ``check``, if given, is called by the committing thread just before
        the group is written (once per group for equal checks); an exception it raises
        fails this item instead. What ``extend`` does, without a thread waiting per call."""
        item = self._pending(vectors, labels, texts, done, check)
        if not len(item.vecs):
            item.ids, item.done = range(len(self), len(self)), True
            done(item.ids, None)
            return
        with self._cv:
            if self._closed:
                raise OcrrError(f"ledger {self.path} is closed; reopen it to append")
            self._queue.append(item)
            if self._committer is None:
                self._holder = _Holder(self._cv, weakref.ref(self))
                # dropped while its committer waits: let it end (not at exit, where a daemon
                # thread may hold the lock for good)
                weakref.finalize(self, _wake, self._cv).atexit = False
                self._committer = threading.Thread(
                    target=_commit_submitted, args=(self._holder,), name="ocrr-commit", daemon=True
                )
                self._committer.start()
            elif not self._committing:
                self._cv.notify_all()  # the committer waits for work (nobody else waits while none runs)
            self._holder.ledger = self  # held until its queue is committed, even if dropped unclosed

    def _pending(
        self, vectors, labels, texts, done: Done | None = None, check: Callable[[], None] | None = None
    ) -> Pending:
        """An append checked at the door (``check_batch``; new labels: ``ocrr.ledger.labels``),
        ready to queue."""
        vecs = check_batch(vectors, labels, texts, self.dim)
        for i, label in enumerate(labels):
            check_new_label(i, label)
        return Pending(vecs, list(labels), list(texts) if texts is not None else [None] * len(labels), done, check)

    def _lead(self) -> None:
        """With ``_cv`` held and no commit running: commit everything queued as one group,
        outside the lock, and tell the submitters (and wake the threads waiting in ``extend``)."""
        self._committing, batch, self._queue = True, self._queue, []
        self._cv.release()
        try:
            self._commit_all(batch)
        finally:
            self._cv.acquire()
            self._committing = False
            self._cv.notify_all()

    def _commit_all(self, batch: list[Pending]) -> None:
        """Commit a group; every item ends done, with its ids or an error (never left
        waiting), and every submitted one is told."""
        try:
            ok = batch if self._checks_in_commit else checked(batch)
            if self._broken is not None:
                raise self._broken
            if ok:
                self._commit(ok)
        except BaseException as e:
            err = e if isinstance(e, OcrrError) else OcrrError(f"ledger {self.path}: append failed ({e})")
            for p in batch:
                if not p.done:
                    p.error, p.done = err, True
        finally:
            _tell(batch)


class _Holder:
    """What a committer thread holds of its ledger: the ledger itself while appends are queued
    (so that one dropped without ``close()`` still commits them and tells their submitters),
    else only a weak reference (so that it can be collected, its files and threads let go)."""

    __slots__ = ("cv", "ref", "ledger")

    def __init__(self, cv: threading.Condition, ref: weakref.ref[GroupCommit]):
        self.cv, self.ref = cv, ref
        self.ledger: GroupCommit | None = None


def _commit_submitted(holder: _Holder) -> None:
    """The committer thread: lead a group commit whenever appends are queued and none is
    running; on close, fail what is still queued; end once the ledger is collected."""
    name_os_thread()  # its CPU shows apart from the event loop's (benchmarks/bench_durable.py)
    with holder.cv:
        while True:
            led = holder.ledger if holder.ledger is not None else holder.ref()
            if led is None:
                return  # collected while nothing was queued
            if led._queue and not led._committing and not led._closed:
                led._lead()
            elif led._closed:
                left, led._queue = led._queue, []
                break
            elif led._committing:
                del led
                holder.cv.wait()  # an ``extend`` is committing: it notifies when done
            else:
                holder.ledger = led = None  # nothing queued: hold it weakly while waiting
                if holder.ref() is None:
                    return  # that was its last reference (its finalizer has run, here)
                holder.cv.wait()
    err = OcrrError(f"ledger {led.path} is closed; reopen it to append")
    holder.ledger = None
    for p in left:
        p.error, p.done = err, True
    _tell(left)


def _wake(cv: threading.Condition) -> None:
    """A ledger was collected: wake its committer, which then ends."""
    with cv:
        cv.notify_all()


def checked(batch: list[Pending]) -> list[Pending]:
    """The items of a group whose ``check`` passes (each distinct check is run once); the
    others end done with the check's error."""
    passed: list = []
    failed: list = []  # (check, its error)
    out = []
    for p in batch:
        if p.check is not None and p.check not in passed:
            err = next((e for c, e in failed if c == p.check), None)
            if err is None:
                try:
                    p.check()
                    passed.append(p.check)
                except Exception as e:  # noqa: BLE001 - handed to the item, raised by its submitter
                    failed.append((p.check, e))
                    err = e
            if err is not None:
                p.error, p.done = err, True
                continue
        out.append(p)
    return out


def _tell(batch: list[Pending]) -> None:
    """Call the ``done`` of every submitted item of a finished group."""
    for p in batch:
        if p.notify is not None:
            try:
                p.notify(p.ids if p.error is None else None, p.error)
            except Exception:  # noqa: BLE001, S110 - a submitter's bug must not keep the others untold
                pass


def check_batch(vectors, labels, texts, dim: int | None) -> np.ndarray:
    """The rows of an append as (m, ``dim``) float32, or one error naming the fix: numeric,
    finite, of unit norm (``ocrr.ledger.rows``), one non-empty label (and at most one text)
    per row, valid Unicode without NUL."""
    vecs = _floats(vectors, "vectors are")
    if isinstance(vectors, np.ndarray) and np.may_share_memory(vecs, vectors):
        # the caller's own array: what is checked, hashed and stored must not change if the
        # caller writes to it before the commit
        vecs = vecs.copy()
    if vecs.ndim != 2:
        raise OcrrError(f"vectors must have shape (m, d), got {vecs.shape}")
    if dim is not None and vecs.shape[1] != dim:
        raise OcrrError(
            f"vectors have dimension {vecs.shape[1]}, the ledger holds {dim}; encode with the ledger's encoder"
        )
    if vecs.shape[1] < 1:
        raise OcrrError("vectors must have at least one component")
    check_appended(vecs)  # finite, unit rows only: serve and import refuse others when reading them back
    for name, given in (("labels", labels), ("texts", texts)):
        if isinstance(given, str | bytes):  # its characters would be taken for one item each
            raise OcrrError(f"{name} must be a list with one per vector, got a single string; pass [{given!r:.40}]")
    if len(labels) != len(vecs) or (texts is not None and len(texts) != len(vecs)):
        raise OcrrError(
            f"got {len(vecs)} vectors but {len(labels)} labels"
            + ("" if texts is None else f" and {len(texts)} texts")
            + "; pass one per vector"
        )
    for i, (label, text) in enumerate(zip(labels, texts if texts is not None else [None] * len(labels))):
        if not isinstance(label, str) or not label:
            raise OcrrError(f"label must be a non-empty string, got {label!r}")
        if text is not None and not isinstance(text, str):
            raise OcrrError(f"text must be a string or None, got {type(text).__name__}")
        try:
            label.encode("utf-8")
            text is None or text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise OcrrError(f"label or text is not valid Unicode ({e.reason}); remove lone surrogates") from None
        if "\x00" in label or (text is not None and "\x00" in text):
            # one rule for every store: PostgreSQL's text cannot hold it, and a ledger moves between stores
            what = "label" if "\x00" in label else "text"
            raise OcrrError(
                f"the {what} of item {i} holds a NUL character (U+0000), which a ledger does not store; remove it"
            )
    return np.ascontiguousarray(vecs)


def _floats(values, what: str) -> np.ndarray:
    """``values`` as float32, or the error naming the fix (``what``: "vector is", "vectors are")."""
    try:
        return np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise OcrrError(f"{what} not numeric ({e}); pass an array of floats") from e
