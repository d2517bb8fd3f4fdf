"""Witnessing: the service's checkpoints cosigned by its witnesses (c2sp.org/tlog-witness).

``ocrr serve --witness URL=VKEY … --quorum K``. A signed checkpoint proves who wrote it, not
that everyone was shown the same log; witnesses that remember what they cosigned and refuse
anything that does not extend it do (``ocrr witness``). Here:

* ``Witnessing`` (one per service: the single process, or worker 0 of ``--workers N``) runs one
  thread per witness. Whenever the log grew past what that witness cosigned, the thread makes
  the checkpoint of the current head **through** ``SignedState`` (never a head that does not
  extend what the key signed) and posts it: ``old <size the witness last cosigned, as known
  here>``, the consistency proof from that size out of the held tree, a blank line, the note.
  One request in flight per witness, always the newest head (commits coalesce). A 409 names the
  witness's size: retried once from it; a 409 naming the very size sent, or a 422, means the
  witness holds another history (a fork): logged loudly, counted, and that witness is not
  asked again until the service restarts. A witness that is down is retried with backoff.
* Once ``quorum`` distinct witnesses cosigned one checkpoint, it is the **witnessed head**,
  written (with the cosignature lines) to a file beside the signed-state record
  (``witnessed_path``). ``WitnessedFile`` reads it back in every worker: a cosigned note is
  self-authenticating, so each reader checks the log's signature and the quorum (cached by
  the file's identity and mtime) and that the ledger it holds extends it, before
  ``/checkpoint`` serves it. Until a head reaches the quorum, ``/checkpoint`` keeps serving
  the last witnessed head (older than ``/head`` meanwhile), and 503 before the first.
"""

from __future__ import annotations

import http.client
import os
import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ocrr.errors import LedgerIntegrityError, OcrrError
from ocrr.ledger.cosignature import attach_cosignatures, check_quorum, cosigned_by, verify_cosignature
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.proofs import b64
from ocrr.ledger.signed_state import SignedState, default_state_path
from ocrr.ledger.store import LedgerStore

__all__ = ["POLL", "TIMEOUT", "WitnessedFile", "WitnessedHead", "Witnessing", "witnessed_path"]

POLL = 0.1  # seconds between looks at the ledger for new entries (other workers commit too)
TIMEOUT = 5.0  # seconds a witness has to answer one add-checkpoint
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0  # seconds before retrying a witness that failed, doubling
_SIZE = re.compile(r"(0|[1-9][0-9]{0,18})\n?")
_MAX_ANSWER = 64 * 1024  # a cosignature answer is a line or two


def witnessed_path(key: Path, signed_state: Path | None) -> Path:
    """Where the witnessed head is shared: beside the record of what ``key`` signed."""
    record = signed_state if signed_state is not None else default_state_path(key)
    return record.with_name(record.name + ".witnessed")


@dataclass(frozen=True)
class WitnessedHead:
    """A checkpoint the log signed and at least a quorum of its witnesses cosigned."""

    note: str  # the signed note with the cosignature lines
    size: int
    root: bytes
    cosigners: tuple[str, ...]  # the witnesses' names


class WitnessedFile:
    """The witnessed head shared through ``path``, verified on every change of the file."""

    def __init__(self, path: Path, log_vkey: str, witnesses: list[str], quorum: int):
        self.path, self.log_vkey, self.witnesses, self.quorum = path, log_vkey, list(witnesses), quorum
        self._lock = threading.Lock()
        self._seen: tuple[tuple, WitnessedHead | None, str] | None = None  # (file identity, head, why none)

    def load(self) -> tuple[WitnessedHead | None, str]:
        """(the witnessed head, "") or (None, why there is none)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None, f"no checkpoint has been cosigned by {self.quorum} of the {len(self.witnesses)} witnesses yet"
        identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if self._seen is not None and self._seen[0] == identity:
                return self._seen[1], self._seen[2]
            head, why = self._read()
            self._seen = (identity, head, why)
            return head, why

    def _read(self) -> tuple[WitnessedHead | None, str]:
        try:
            note = self.path.read_text(encoding="utf-8")
            _, size, root = verify_checkpoint(note, self.log_vkey)
            found = check_quorum(note, self.witnesses, self.quorum)
        except (OSError, UnicodeDecodeError, OcrrError) as e:
            return None, (
                f"the witnessed head in {self.path} is refused ({e}); the service writes a new one once its "
                "witnesses cosign the next checkpoint"
            )
        return WitnessedHead(note, size, root, tuple(v.split("+", 1)[0] for v in found)), ""

    def current(self, led: LedgerStore) -> tuple[WitnessedHead | None, str]:
        """``load``, checked against the ledger ``led`` holds (refreshed by the caller): a
        witnessed head the ledger does not extend raises LedgerIntegrityError."""
        head, why = self.load()
        if head is not None:
            check_extends_witnessed(head, led, self.path)
        return head, why

    def publish(self, note: str) -> None:
        """Replace the file with ``note`` (readers see the old or the new one, never a part).
        Not fsynced: it is a copy of what the witnesses hold; one lost is written again."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(note, encoding="utf-8")
        os.replace(tmp, self.path)


def check_extends_witnessed(head: WitnessedHead, led: LedgerStore, where: Path) -> None:
    """Raise LedgerIntegrityError unless the ledger held holds the witnessed head's tree."""
    with led.lock.read():
        have = len(led)
        same = head.size <= have and led.root(head.size) == head.root
    if not same:
        what = f"holds {have} entries" if head.size > have else f"has another root at size {head.size}"
        raise LedgerIntegrityError(
            f"the ledger {what} than the checkpoint of {head.size} entries its witnesses cosigned ({where}): it "
            "was rewound or forked since. Restore the ledger that extends it; clients holding that checkpoint "
            "would see a fork"
        )


@dataclass
class WitnessStats:
    """What /metrics says of the witnessing (totals since the service started)."""

    requests: int = 0  # add-checkpoint requests sent
    failures: int = 0  # no answer, a timeout, or an answer that is not the protocol's
    refusals: int = 0  # the witness refused the checkpoint (a fork, a rollback, an unknown log or key)


@dataclass
class _Target:
    """The newest head, as a checkpoint signed through SignedState."""

    size: int
    root: bytes
    note: str  # signed by the log alone: what the witnesses are sent
    lines: dict[str, str] = field(default_factory=dict)  # witness vkey -> its cosignature line
    resumed: str = ""  # cosignature lines of this checkpoint from the shared file (after a restart)
    resumed_by: frozenset[str] = frozenset()  # the witnesses whose lines those are


@dataclass
class _Link:
    """One witness, as this service knows it."""

    url: str
    vkey: str
    known: int = 0  # the size this witness last cosigned, as this service knows it
    known_root: bytes | None = None
    failures: int = 0  # in a row
    forked: str | None = None  # why the witness is not asked again (it holds another history)
    problem: str = ""  # the last thing that went wrong, for /checkpoint's 503
    conn: http.client.HTTPConnection | None = None

    @property
    def name(self) -> str:
        return self.vkey.split("+", 1)[0]


class Witnessing:
    """Sends the service's new checkpoints to its witnesses and publishes the witnessed head."""

    def __init__(
        self,
        signer: SignedState,
        ledger: LedgerStore,
        witnesses: list[tuple[str, str]],
        shared: WitnessedFile,
        log: Callable[[str], None],
        damaged: Callable[[], bool] = lambda: False,
        fail: Callable[[str], None] = lambda reason: None,
        publish: Callable[..., None] = lambda **counts: None,
        poll: float = POLL,
        timeout: float = TIMEOUT,
    ):
        self.signer, self.ledger, self.shared, self.log = signer, ledger, shared, log
        self.links = [_Link(url, vkey) for url, vkey in witnesses]
        self.damaged, self.fail, self.publish = damaged, fail, publish
        self.poll, self.timeout = poll, timeout
        self.stats = WitnessStats()
        self._lock = threading.Lock()  # the target, the stats, the published head
        self._target: _Target | None = None
        self._published: WitnessedHead | None = None
        self._stop = threading.Event()
        self._grown = threading.Condition()  # notified by ``nudge`` (a commit in this process)
        self._generation = 0
        self._threads: list[threading.Thread] = []
        self._resume()

    def _resume(self) -> None:
        """What each witness cosigned, as the shared file says (a restart goes on from there)."""
        head, _ = self.shared.load()
        if head is None:
            return
        try:
            check_extends_witnessed(head, self.ledger, self.shared.path)
        except LedgerIntegrityError:
            return  # the readers refuse it loudly; the witnesses say where they are (409)
        self._published = head
        for link in self.links:
            if cosigned_by(head.note, [link.vkey]):
                link.known, link.known_root = head.size, head.root

    def start(self) -> None:
        for link in self.links:
            thread = threading.Thread(target=self._run, args=(link,), name=f"ocrr-witness-{link.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def nudge(self) -> None:
        """The ledger grew in this process: look now rather than at the next poll."""
        with self._grown:
            self._generation += 1
            self._grown.notify_all()

    def _wait_for_growth(self, seen: int) -> None:
        with self._grown:
            self._grown.wait_for(lambda: self._generation != seen or self._stop.is_set(), timeout=self.poll)

    def stop(self) -> None:
        self._stop.set()
        self.nudge()
        for thread in self._threads:
            thread.join(timeout=self.timeout + 1)
        for link in self.links:
            if link.conn is not None:
                link.conn.close()

    def problems(self) -> str:
        """What stands between the newest head and its quorum, witness by witness."""
        said = [
            f"{link.name} ({link.url}): {link.forked or link.problem}"
            for link in self.links
            if link.forked or link.problem
        ]
        return "; ".join(said)

    # -- one witness's thread -------------------------------------------------------------
    def _run(self, link: _Link) -> None:
        while not self._stop.is_set():
            seen = self._generation
            try:
                target = self._newest()
            except Exception as e:  # noqa: BLE001 - a ledger that cannot be read now: try again later
                link.problem = f"the ledger could not be read ({e})"
                target = None
            if target is None or link.forked or link.vkey in target.lines or link.vkey in target.resumed_by:
                self._wait_for_growth(seen)  # a commit here nudges; other workers' commits are polled
                continue
            try:
                sent = self._send(link, target)
            except Exception as e:  # noqa: BLE001 - a bug or a ledger read failing: this thread must go on
                sent = self._failed(link, f"{type(e).__name__}: {e}")
            if sent:
                link.failures = 0
            else:
                link.failures += 1
                self._stop.wait(min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (link.failures - 1)))

    def _newest(self) -> _Target | None:
        """The checkpoint of the ledger's head now, signed through SignedState (once per head)."""
        if self.damaged():
            return None
        led = self.ledger
        led.refresh()  # what every worker committed
        with led.lock.read():
            size = len(led)
            root = led.root(size)
        with self._lock:
            target = self._target
            if target is not None and target.size >= size:
                return target
        try:
            note = self.signer.checkpoint(size, root, led)  # refuses a head that does not extend what the key signed
        except LedgerIntegrityError as e:
            self.fail(str(e))
            return None
        with self._lock:
            if self._target is None or self._target.size < size:
                self._target = _Target(size, root, note)
                published = self._published
                if published is not None and published.size == size and published.note.startswith(note):
                    # Ed25519 is deterministic: the same head makes the same note; its lines are kept
                    by = frozenset(cosigned_by(published.note, [link.vkey for link in self.links]))
                    self._target.resumed, self._target.resumed_by = published.note[len(note) :], by
            return self._target

    def _send(self, link: _Link, target: _Target) -> bool:
        """Post ``target`` to ``link`` (retrying once from the size a 409 names); True once cosigned."""
        old = link.known
        for retry in (False, True):
            if old > target.size:
                return self._refused(
                    link,
                    f"it cosigned {old} entries, more than the {target.size} this ledger holds: the ledger was "
                    "rewound (restored from an older copy?)",
                    sticky=False,
                )
            proof = self._proof(old, target.size)
            body = f"old {old}\n" + "".join(b64(p) + "\n" for p in proof) + "\n" + target.note
            try:
                status, content_type, text = self._post(link, body.encode())
            except (OSError, http.client.HTTPException) as e:
                return self._failed(link, f"no answer ({type(e).__name__}: {e})")
            if status == 200:
                return self._cosigned(link, target, text)
            if status == 409:
                hint = _SIZE.fullmatch(text) if content_type.startswith("text/x.tlog.size") else None
                if hint is None:
                    return self._failed(link, f"409 without a size ({text[:200]!r})")
                size = int(hint[1])
                if size == old:
                    return self._refused(
                        link, f"it holds another checkpoint of {old} entries (409): the log was forked", sticky=True
                    )
                if not retry:
                    link.known, link.known_root, old = size, None, size
                    continue
                return self._failed(link, f"409 twice (it now holds {size} entries)")
            if status == 422:
                return self._refused(
                    link,
                    f"the consistency proof from the {old} entries it cosigned does not verify (422): the log "
                    f"was forked ({text.strip()[:200]})",
                    sticky=True,
                )
            if status in (403, 404):
                return self._refused(
                    link,
                    f"{status} {text.strip()[:300]}: start the witness with --log {self.signer.origin}="
                    f"{self.signer.vkey}",
                    sticky=False,
                )
            return self._failed(link, f"{status} {text.strip()[:300]}")
        return False  # not reached: the second pass returns

    def _proof(self, old: int, size: int) -> list[bytes]:
        if old == 0 or old == size:
            return []
        with self.ledger.lock.read():
            return self.ledger.tree.consistency_proof(old, size)

    def _post(self, link: _Link, body: bytes) -> tuple[int, str, str]:
        """One POST /add-checkpoint on the witness's kept-alive connection."""
        url = urllib.parse.urlsplit(link.url)
        if link.conn is None:
            kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
            link.conn = kind(url.netloc, timeout=self.timeout)
        with self._lock:
            self.stats.requests += 1
            self.publish(witness_requests=self.stats.requests)
        try:
            link.conn.request("POST", url.path + "/add-checkpoint", body=body, headers={"Content-Type": "text/plain"})
            answer = link.conn.getresponse()
            text = answer.read(_MAX_ANSWER).decode("utf-8", "replace")
        except BaseException:
            link.conn.close()
            link.conn = None
            raise
        return answer.status, answer.getheader("content-type", ""), text

    def _cosigned(self, link: _Link, target: _Target, text: str) -> bool:
        try:
            cosigned = attach_cosignatures(target.note, text)
            verify_cosignature(cosigned, link.vkey)
        except OcrrError as e:
            return self._failed(link, f"its answer is not its cosignature of the checkpoint ({e})")
        link.known, link.known_root, link.problem = target.size, target.root, ""
        with self._lock:
            target.lines[link.vkey] = text
            note = attach_cosignatures(target.note, target.resumed + "".join(target.lines.values()))
            found = cosigned_by(note, self.shared.witnesses)
            published = self._published
            if len(found) < self.shared.quorum or (
                published is not None and (published.size > target.size or published.note == note)
            ):
                return True
            try:
                self.shared.publish(note)
            except OSError as e:
                link.problem = f"the witnessed head could not be written to {self.shared.path} ({e})"
                return True
            self._published = WitnessedHead(note, target.size, target.root, tuple(v.split("+", 1)[0] for v in found))
        return True

    def _failed(self, link: _Link, problem: str) -> bool:
        if link.problem != problem:
            self.log(f"witness {link.name} ({link.url}): {problem}; retrying with backoff")
        link.problem = problem
        with self._lock:
            self.stats.failures += 1
            self.publish(witness_failures=self.stats.failures)
        return False

    def _refused(self, link: _Link, problem: str, sticky: bool) -> bool:
        """A witness that will not cosign this log's checkpoint: said loudly, counted; ``sticky``:
        it holds another history, so it is not asked again (an operator must look)."""
        if link.problem != problem:
            then = (
                "it is not asked again until the service restarts; compare the ledger with the witness's "
                "evidence (`ocrr witness show`)"
                if sticky
                else "retrying with backoff"
            )
            self.log(
                f"WITNESS REFUSED: witness {link.name} ({link.url}) refused {self.signer.origin}: {problem}; {then}"
            )
        link.problem = problem
        if sticky:
            link.forked = problem
        with self._lock:
            self.stats.refusals += 1
            self.publish(witness_refusals=self.stats.refusals)
        return False
