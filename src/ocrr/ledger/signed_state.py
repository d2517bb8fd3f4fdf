"""What a signing key has signed: never two roots for one size, across restarts and processes.

A transparency log must never sign two different roots for one tree size: a client holding
both has proof the log forked. The ledger's storage cannot be trusted to prevent it (anyone
who can write the file or the database can put back an older copy, or a copy with other
entries), so ``SignedState`` keeps, outside that storage, the largest (size, root) its key
has signed under its origin, and every head or checkpoint is signed through it:

* before a head at (size, root) is signed, the ledger's held tree must prove that it
  extends the recorded (size0, root0) (a consistency proof, checked with
  ``ocrr.ledger.verify.verify_consistency``), or, for a smaller size, that it is a prefix
  of it; otherwise nothing is signed and ``LedgerIntegrityError`` names both roots;
* a larger size is recorded *before* its signature leaves, durably (written beside the
  current record, in the other of the file's two slots, and fdatasynced: one flush, see
  ``_turn``), so a crash loses neither;
* the record is a signed note by the key itself (``ocrr-signed-state-v1``, its origin, size
  and root), checked on every read: an edited record, or one of another key or origin, is
  refused rather than trusted;
* the processes that sign with one key (``ocrr serve --workers N``, ``ocrr ledger head``)
  take turns with an exclusive ``flock`` on the record file around read, check and write;
  one whose ledger is behind the record takes in what the others committed, then checks.

By default the record lives beside the key (``<key>.signed``): whoever can rewrite it can
read the key, and then no record helps. A record lost (deleted, or a new key folder) cannot
be told from a first start; the log then trusts the ledger as it finds it.

The record also says which log the key signs for: the key file (PKCS#8) holds no origin, so
``ocrr ledger keygen`` starts the record at size 0 under the origin it was given (``start``),
and ``recorded_origin`` reads it back for a signer not told its origin. A key's record
names one origin: a signer under another one is refused, naming both.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError
from ocrr.ledger.heads import Signer, TreeHead, parse_signed_note
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.proofs import b64, unb64
from ocrr.ledger.verify import ProofError, verify_consistency
from ocrr.utils.files import write_at

__all__ = ["SignedState", "HeldLog", "FixedLog", "default_state_path", "recorded_origin"]

_TAG = "ocrr-signed-state-v1"
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")
_SLOT = 1024  # bytes per slot of the record (a note of an origin of up to ~800 characters)


class HeldLog(Protocol):
    """What a ledger holds in memory: its Merkle tree, how many entries of it are committed
    (the tree may already hold a commit in flight), and a way to take in what other writers
    committed (``DurableLedger`` is one)."""

    tree: MerkleTree

    def __len__(self) -> int: ...

    def refresh(self) -> object: ...


@dataclass
class FixedLog:
    """A tree read once (``ocrr ledger head``): all of it committed, nothing more to take in."""

    tree: MerkleTree

    def __len__(self) -> int:
        return len(self.tree)

    def refresh(self) -> None:
        return None


def default_state_path(key: str | os.PathLike[str]) -> Path:
    """Where the record of what ``key`` signed is kept unless told otherwise: beside it."""
    key = Path(key).expanduser()
    return key.with_name(key.name + ".signed")


def recorded_origin(signer: Signer, path: str | os.PathLike[str]) -> str | None:
    """The log ``signer``'s key signs for, as its record at ``path`` names it (whatever origin
    ``signer`` was loaded under): the origin ``ocrr ledger keygen`` made the key for, or the one
    it first signed under. None: no record that this key signed (``SignedState.open`` says
    what is wrong with one that is not)."""
    try:
        fd = os.open(Path(path).expanduser(), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # (not while a signer writes it)
        data = os.pread(fd, 2 * _SLOT, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    slots = (data[i * _SLOT : (i + 1) * _SLOT].rstrip(b"\0") for i in range(2))
    return next((origin for slot in slots if slot and (origin := _key_origin(slot, signer)) is not None), None)


def _key_origin(note: bytes, signer: Signer) -> str | None:
    """The origin a record's note names, if ``signer``'s key signed it under that name (its
    signature verifies; the key id, which depends on the name, is not compared)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        text, sigs = parse_signed_note(note)
    except OcrrError:
        return None
    lines = text.split("\n")
    if len(lines) != 5 or lines[0] != _TAG:
        return None
    public = Ed25519PublicKey.from_public_bytes(signer.public_bytes)
    for name, _, sig in sigs:
        if name != lines[1]:
            continue
        try:
            public.verify(sig, text.encode("utf-8"))
        except InvalidSignature:
            continue
        return name
    return None


@dataclass(frozen=True)
class _Signed:
    size: int
    root: bytes


class SignedState:
    """A ``Signer`` that signs only heads that extend everything it signed before (see the
    module's docstring). Thread-safe, and safe across processes sharing ``path``."""

    def __init__(self, signer: Signer, path: str | os.PathLike[str]):
        self._signer = signer
        self.path = Path(path).expanduser()
        self.origin, self.vkey = signer.origin, signer.vkey
        self._threads = threading.Lock()
        self._fd: int | None = None  # the record file, open for this state's life
        # (the record's bytes when last read or written, the record they hold), and the slot
        # holding it: the note's signature is checked again only when the bytes change
        self._seen: tuple[bytes, _Signed] | None = None
        self._slot = 0

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        signer: Signer,
        path: str | os.PathLike[str],
        held: HeldLog,
        log: Callable[[str], None] = print,
    ) -> SignedState:
        """The signing state at ``path`` for ``signer``, checked against the ledger ``held``:
        refuses (``LedgerIntegrityError``) a ledger that does not extend what the key signed
        (rewound or forked), and an edited or foreign record. Without a record, starts one at
        the ledger's current head (said in ``log``), so that a record that cannot be written
        is refused now, not at the first signature."""
        state = cls(signer, path)
        try:
            for caught_up in (False, True):
                with state._turn() as last:
                    size = len(held)
                    root = held.tree.root(size)
                    if last is None:
                        state._write(_Signed(size, root))
                        log(
                            f"signed heads: no record of what this key signed under {signer.origin} yet; "
                            f"started one at {state.path} (size {size})"
                        )
                        break
                    if size >= last.size or caught_up:
                        state._check(last, size, root, held)
                        break
                held.refresh()  # another process may have committed and signed since ``held`` was read
        except BaseException:
            state.close()
            raise
        return state

    @classmethod
    def start(cls, signer: Signer, path: str | os.PathLike[str]) -> None:
        """Start the record of a new key at ``path``, at size 0 (every log extends the empty
        one): it names the key's origin before anything is signed (``recorded_origin``)."""
        cls.open(signer, path, FixedLog(MerkleTree()), log=lambda _: None).close()

    @classmethod
    def check_record(cls, signer: Signer, path: str | os.PathLike[str]) -> None:
        """Refuse now, as ``open`` would, a record at ``path`` that is not this key's under its
        origin (edited, foreign, malformed): before a long open of the ledger it guards. A
        record that is missing or cannot be read passes: ``open`` starts one, or says why not."""
        state = cls(signer, path)
        try:
            fd = os.open(state.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # (not while a signer writes it)
            state._read(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._threads:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # -- signing ----------------------------------------------------------------------
    def sign_head(self, head: TreeHead, held: HeldLog) -> dict:
        """``Signer.sign_head`` (the head and its checkpoint), once ``held`` proves the head
        extends what this key signed before, and the head's size is recorded."""
        self._guard(head.size, head.root, held)
        return self._signer.sign_head(head)

    def checkpoint(self, size: int, root: bytes, held: HeldLog) -> str:
        """``Signer.checkpoint``, guarded as ``sign_head``."""
        self._guard(size, root, held)
        return self._signer.checkpoint(size, root)

    def last_signed(self) -> tuple[int, bytes] | None:
        """(size, root) of the record now (None: no record yet); checked as on every read."""
        with self._turn() as last:
            return None if last is None else (last.size, last.root)

    def _guard(self, size: int, root: bytes, held: HeldLog) -> None:
        """Return once (size, root) may be signed: it extends the record (or is a prefix of
        it) as ``held`` proves, and the record covers its size. Raise otherwise."""
        caught_up = False
        while True:
            with self._turn() as last:
                if last is None:  # no record was ever started (a state made without ``open``)
                    self._write(_Signed(size, root))
                    return
                behind = size < last.size and len(held) < last.size
                if not behind or caught_up:
                    self._check(last, size, root, held)
                    if size > last.size:
                        self._write(self._ahead(size, root, held))
                    return
            # Another process signed further than this one's ledger reaches: take in what it
            # committed (outside the turn: the other signers need not wait), then check.
            held.refresh()
            caught_up = True

    @staticmethod
    def _ahead(size: int, root: bytes, held: HeldLog) -> _Signed:
        """What to record for a signature at ``size``: the ledger's committed head if it is
        further on already (commits that landed while the record was written then need no
        write of their own: one fsync covers several group commits)."""
        now = len(held)
        if now > size:
            return _Signed(now, held.tree.root(now))
        return _Signed(size, root)

    def _check(self, last: _Signed, size: int, root: bytes, held: HeldLog) -> None:
        """Raise unless (size, root) and the recorded head are one log, as ``held`` proves."""
        tree, have = held.tree, len(held)
        try:
            if size >= last.size:
                if size > have:
                    raise ProofError(f"the ledger holds {have} entries, fewer than {size}")
                verify_consistency(last.size, size, tree.consistency_proof(last.size, size), last.root, root)
            else:
                if last.size > have:
                    raise ProofError(f"the ledger holds {have} entries, fewer than the {last.size} signed")
                verify_consistency(size, last.size, tree.consistency_proof(size, last.size), root, last.root)
        except (ProofError, IndexError) as e:
            raise LedgerIntegrityError(self._refusal(last, size, root, have, e)) from None

    def _refusal(self, last: _Signed, size: int, root: bytes, have: int, why: Exception) -> str:
        if have < last.size:
            what = (
                f"the ledger holds {have} entries, but this key signed a head of size {last.size} "
                f"(root {b64(last.root)}): the ledger was rewound to an older copy"
            )
        elif size == last.size:
            what = (
                f"the ledger's root at size {size} is {b64(root)}, but this key signed root "
                f"{b64(last.root)} for that size: the ledger was forked (other entries)"
            )
        else:
            what = (
                f"the head of size {size} (root {b64(root)}) does not extend the head of size "
                f"{last.size} (root {b64(last.root)}) this key signed ({why}): the ledger was forked"
            )
        return (
            f"refusing to sign under {self.origin}: {what}. Restore the newer copy of the ledger (one "
            f"that extends size {last.size}, root {b64(last.root)}); only if going back is deliberate, "
            f"move {self.path} aside and restart, and know that clients holding the later head will "
            "see a fork (two roots for one size under this key)"
        )

    # -- the record -------------------------------------------------------------------
    # Two slots of _SLOT bytes, each a signed note padded with zero bytes (or all zero: never
    # written). A new record goes into the slot not holding the current one, and one
    # fdatasync makes it durable: a crash mid-write can tear only that slot, never the
    # current record, and no rename or folder fsync (three flushes instead of one) is paid
    # per signed size. The file is never replaced, so it is also what processes flock.

    @contextmanager
    def _turn(self) -> Iterator[_Signed | None]:
        """This thread's and process's turn with the record (threads: a lock, since flock does
        not exclude threads sharing a descriptor; processes: flock on the record file);
        yields what the record holds."""
        with self._threads:
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                self._still_there(fd)
                yield self._read(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _file(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as e:
                raise LedgerStorageError(
                    f"cannot open the record of signed heads {self.path} ({e.strerror}); make its folder "
                    "writable, or give another place with --signed-state"
                ) from e
        return self._fd

    def _still_there(self, fd: int) -> None:
        """Refuse a record removed or replaced by another file while this process holds it."""
        try:
            now, held = os.stat(self.path), os.fstat(fd)
            same = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
        except FileNotFoundError:
            same = False
        if not same:
            raise LedgerIntegrityError(
                f"the record of signed heads {self.path} was removed or replaced while this process signed "
                "with it: put the file back; nothing is signed without it"
            )

    def _read(self, fd: int) -> _Signed | None:
        try:
            data = os.pread(fd, 2 * _SLOT + 1, 0)
        except OSError as e:
            raise LedgerStorageError(f"cannot read the record of signed heads {self.path} ({e.strerror})") from e
        if self._seen is not None and self._seen[0] == data:
            return self._seen[1]
        if len(data) not in (0, 2 * _SLOT):
            raise self._foreign(f"it is {len(data)} bytes, not a record of two {_SLOT}-byte slots")
        slots = [data[i * _SLOT : (i + 1) * _SLOT].rstrip(b"\0") for i in range(2 if data else 0)]
        found = [(self._parse(slot), i) for i, slot in enumerate(slots) if slot]
        if not found:
            if self._seen is not None:
                raise LedgerIntegrityError(
                    f"the record of signed heads {self.path} was emptied while this process signed with it "
                    f"(it held size {self._seen[1].size}): put it back; nothing is signed without it"
                )
            return None
        got, slot = max(found, key=lambda found: found[0].size)
        self._seen, self._slot = (data, got), slot
        return got

    def _parse(self, note: bytes) -> _Signed:
        """The record, checked: a note signed by this key under this origin, in this format."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            text, sigs = parse_signed_note(note)
        except OcrrError as e:
            raise self._foreign(f"it is not a signed note ({e})") from None
        ours = [sig for name, kid, sig in sigs if name == self.origin and kid == self._signer.key_id]
        if not ours and (other := _key_origin(note, self._signer)) is not None:
            raise LedgerIntegrityError(
                f"the record of signed heads {self.path} is refused: it is signed by another key or for another "
                f"log (this key signs for the log {other}, not {self.origin}); pass --origin {other}, or make a "
                f"key for {self.origin} with `ocrr ledger keygen NEW.pem --origin {self.origin}`"
            )
        if not ours:
            names = ", ".join(sorted({name for name, _, _ in sigs}))
            raise self._foreign(f"it is signed by another key or for another log ({names})")
        try:
            Ed25519PublicKey.from_public_bytes(self._signer.public_bytes).verify(ours[0], text.encode("utf-8"))
        except InvalidSignature:
            raise self._foreign("its signature does not verify: it was edited") from None
        lines = text.split("\n")
        if len(lines) != 5 or lines[0] != _TAG or lines[4] != "":
            raise self._foreign(f"its text is not {_TAG}, origin, size and root")
        if lines[1] != self.origin:
            raise self._foreign(f"it records the log {lines[1]!r}, not {self.origin!r}")
        if not _SIZE.fullmatch(lines[2]):
            raise self._foreign(f"its size {lines[2][:30]!r} is not a decimal number")
        try:
            root = unb64(lines[3])
        except ProofError:
            root = b""
        if len(root) != 32:
            raise self._foreign("its root is not a canonical base64 SHA-256 hash")
        return _Signed(int(lines[2]), root)

    def _foreign(self, why: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(
            f"the record of signed heads {self.path} is refused: {why}. Restore it from a backup of the "
            f"key's folder, or point --signed-state at this key's own record (one per key and origin); "
            "moving it aside loses the proof of what this key signed, so a rewound ledger could then be "
            "signed and clients holding a later head would see a fork"
        )

    def _write(self, signed: _Signed) -> None:
        """Write ``signed`` into the slot not holding the current record, and fdatasync (the
        first write also fsyncs the folder, which then holds a new file)."""
        note = self._signer.sign_note(f"{_TAG}\n{self.origin}\n{signed.size}\n{b64(signed.root)}\n").encode()
        if len(note) > _SLOT:
            raise OcrrError(
                f"the origin {self.origin[:60]!r}… is too long for the record of signed heads; pick a shorter --origin"
            )
        fd = self._file()
        slot = 0 if self._seen is None else 1 - self._slot
        try:
            first = os.fstat(fd).st_size == 0
            if first:
                os.ftruncate(fd, 2 * _SLOT)
            write_at(fd, note.ljust(_SLOT, b"\0"), slot * _SLOT)
            os.fdatasync(fd)
            if first:
                folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
            data = os.pread(fd, 2 * _SLOT + 1, 0)
        except OSError as e:
            raise LedgerStorageError(
                f"cannot write the record of signed heads {self.path} ({e.strerror}); nothing was signed. "
                "Make its folder writable, or give another place with --signed-state"
            ) from e
        self._seen, self._slot = (data, signed), slot
