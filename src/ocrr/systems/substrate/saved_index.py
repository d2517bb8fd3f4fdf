"""An IVF index saved beside a ledger and signed with the ledger's key: opened, not trained.

A substrate served with an IVF index (``--system substrate:index=ivf_pq:…``) trains and fills
it at every open: minutes at a million entries, in every worker. ``ocrr ledger index`` builds
it once over the checked ledger, writes it with ``save_ivf`` (borrowed mode: the float32 rows
stay the ledger's) and writes a statement beside it, a C2SP signed note by the ledger's key::

    ocrr-ivf-index-v1
    origin <the log's origin>
    size <N: the entries the index holds, 0 .. N-1>
    root <base64 Merkle root of the ledger at size N>
    settings <the substrate's index options and dimension, as canonical JSON>
    faiss <SHA-256 hex> <bytes>        (the FAISS file)
    npz <SHA-256 hex> <bytes>          (its bookkeeping file)

Every line after the first is ``key value`` (a space in each), so the note can never be
read as a checkpoint (whose second line is a bare tree size) or a signed-state record.

Storage is untrusted: an opener (``open_substrate(..., index_file=…)``, ``ocrr serve
--index-file``) checks the signature with its own key, reads each file once into memory and
compares its length and SHA-256 with the statement before any byte is parsed, checks that
the settings are the ones it serves with (``nprobe`` and ``rerank`` are search knobs and may
differ), then that the ledger holds at least N entries and its Merkle root at N is the
statement's. Entries N.. are then added the substrate's usual way. Anything else is refused
with one message naming the fix (rebuild with ``ocrr ledger index``); there is no silent
fallback to training, which would hide the damage and cost every worker minutes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocrr.errors import OcrrError
from ocrr.index.factory import IVF_KINDS
from ocrr.index.ivf import IVFIndex
from ocrr.index.ivf_file import restore_ivf, save_ivf, side_path
from ocrr.ledger.heads import Signer, parse_size, verify_note
from ocrr.ledger.proofs import b64, unb64
from ocrr.systems.substrate.core import Substrate
from ocrr.utils.files import atomic_write_text

__all__ = [
    "IndexStatement",
    "SavedIndex",
    "index_settings",
    "statement_path",
    "write_saved_index",
]

STATEMENT_TAG = "ocrr-ivf-index-v1"
# A statement is a few hundred bytes; anything much larger is not one (and is not read whole).
_MAX_STATEMENT = 64 * 1024
# Search knobs: how much of the index a query reads, not what the index holds.
_SEARCH_KNOBS = ("nprobe", "rerank")
_FILES = ("faiss", "npz")


def statement_path(index_file: str | os.PathLike[str]) -> Path:
    """The signed statement written beside the index file ``index_file``."""
    return Path(f"{index_file}.statement")


def index_settings(system: Substrate, dim: int | None) -> dict:
    """What the statement records of the index: the dimension, and the substrate's index options
    that its backend uses (``IndexOptions.hyperparameters``)."""
    return {"dim": dim, **system.index_options.hyperparameters()}


def check_saveable(system: Substrate, what: str) -> None:
    """Refuse a substrate whose index cannot come from a saved IVF file: not an IVF kind, or a
    substrate that indexes its entries its own way (bounded ones evict) or keeps its rows on disk."""
    own_steps = type(system).fit is Substrate.fit and type(system)._index_new is Substrate._index_new
    if system.index_kind not in IVF_KINDS:
        raise OcrrError(
            f"{what} holds an IVF index, and {system.name} searches with index={system.index_kind}; "
            "give an IVF system, e.g. --system substrate:index=ivf_pq"
        )
    if not own_steps or system.vectors_on_disk is not None:
        raise OcrrError(
            f"{what} serves the unbounded substrate with its rows in memory; {system.name} is not that "
            "(give --system substrate:index=ivf_pq:… without vectors_on_disk)"
        )


def check_trained(index: Any, size: int) -> None:
    """Refuse an index that is not a trained IVF index over entries 0 .. ``size``-1, borrowing their rows."""
    if index is None:
        raise OcrrError("the ledger is empty: there is nothing to index yet")
    if not isinstance(index, IVFIndex) or not index.borrowed:
        raise OcrrError(
            "only an IVF index borrowing the ledger's rows can be saved (give --system substrate:index=ivf_…)"
        )
    if not index.trained:
        raise OcrrError(
            f"the ledger holds {len(index)} entries, fewer than the {index.min_train} an IVF index trains on; "
            "exact search serves so few fast: serve without an index file"
        )
    if not holds_first(index, size):
        raise OcrrError(
            f"the index holds {len(index)} entries, not the {size} the ledger held when it was built "
            "(entries came in meanwhile): run the command again"
        )


def holds_first(index: IVFIndex, size: int) -> bool:
    """Whether ``index`` holds exactly entries 0 .. ``size``-1 (its ids are sorted: rows of the ledger)."""
    return len(index) == size and (size == 0 or int(index.ids[-1]) == size - 1)


@dataclass(frozen=True)
class IndexStatement:
    """What the ledger's key signs about a saved index (see the module docstring)."""

    origin: str
    size: int
    root: bytes
    settings: dict
    files: dict[str, tuple[str, int]]  # "faiss" / "npz" -> (SHA-256 hex, bytes)

    def text(self) -> str:
        settings = json.dumps(self.settings, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        lines = [STATEMENT_TAG, f"origin {self.origin}", f"size {self.size}", f"root {b64(self.root)}"]
        lines += [f"settings {settings}", *(f"{name} {self.files[name][0]} {self.files[name][1]}" for name in _FILES)]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> IndexStatement:
        """The statement in a verified note's ``text``; ValueError naming what is malformed."""
        lines = text.split("\n")
        if len(lines) != 8 or lines[0] != STATEMENT_TAG or lines[-1] != "":
            raise ValueError(f"its text is not {STATEMENT_TAG} and six `key value` lines")
        fields: dict[str, str] = {}
        for line, key in zip(lines[1:7], ("origin", "size", "root", "settings", *_FILES)):
            name, _, value = line.partition(" ")
            if name != key or not value:
                raise ValueError(f"line {line[:40]!r} is not `{key} …`")
            fields[key] = value
        try:
            size = parse_size(fields["size"])
            root = unb64(fields["root"])
            settings = json.loads(fields["settings"])
        except (OcrrError, ValueError) as e:
            raise ValueError(f"a malformed size, root or settings line ({e})") from None
        if len(root) != 32 or not isinstance(settings, dict):
            raise ValueError("its root is not a SHA-256 hash, or its settings not a JSON object")
        files = {}
        for name in _FILES:
            digest, _, length = fields[name].partition(" ")
            if len(digest) != 64 or digest.strip("0123456789abcdef") or not length.isdigit():
                raise ValueError(f"its {name} line is not a SHA-256 hex digest and a length")
            files[name] = (digest, int(length))
        return cls(fields["origin"], size, root, settings, files)


def write_saved_index(
    index: Any, out: str | os.PathLike[str], settings: dict, size: int, root: bytes, signer: Signer
) -> IndexStatement:
    """Write ``index`` (trained, borrowing the ledger's rows 0 .. ``size``-1) to ``out`` and
    ``out.npz``, then the statement binding them to the ledger at ``size`` (Merkle ``root``),
    signed by ``signer``, to ``out.statement``. Each file is moved into place whole; the
    statement goes last, so files it does not describe are refused, never trusted."""
    check_trained(index, size)
    out = Path(out)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    files = {}
    try:
        save_ivf(index, tmp)
        for name, written in zip(_FILES, (tmp, side_path(tmp))):
            with open(written, "rb") as fh:
                files[name] = (hashlib.file_digest(fh, "sha256").hexdigest(), os.fstat(fh.fileno()).st_size)
        os.replace(tmp, out)
        os.replace(side_path(tmp), side_path(out))
    finally:
        for stale in (tmp, side_path(tmp)):
            stale.unlink(missing_ok=True)
    statement = IndexStatement(signer.origin, size, root, settings, files)
    atomic_write_text(statement_path(out), signer.sign_note(statement.text()))
    return statement


@dataclass
class SavedIndex:
    """A saved index read and checked against its signed statement: its files' bytes, read once."""

    path: Path
    statement: IndexStatement
    faiss_bytes: bytes
    npz_bytes: bytes
    restored: bool = False

    @classmethod
    def read(cls, index_file: str | os.PathLike[str], signer: Signer | None, keep: bool = True) -> SavedIndex:
        """Read ``index_file``, ``.npz`` and ``.statement``: refused unless the statement is
        signed by ``signer``'s key under its origin and each file has the length and SHA-256
        it states. ``keep`` False: the files are checked a chunk at a time and not held (for
        a process that only vouches for them; the result cannot ``restore``)."""
        saved = cls.signed(index_file, signer)
        saved.read_files(keep)
        return saved

    @classmethod
    def signed(cls, index_file: str | os.PathLike[str], signer: Signer | None) -> SavedIndex:
        """Only the statement beside ``index_file``, refused unless signed by ``signer``'s key
        under its origin: a few hundred bytes, checked before a long open of the ledger. Its
        files are not read yet (``read_files``)."""
        path = Path(index_file).expanduser()
        if signer is None:
            raise OcrrError(
                f"index file {path}: a saved index is trusted through the signature of the ledger's key; "
                "give --key (the key `ocrr ledger index` signed it with)"
            )
        note = _read_bounded(path, statement_path(path), _MAX_STATEMENT)
        try:
            text = verify_note(note.decode("utf-8", errors="replace"), signer.vkey)
        except OcrrError as e:
            raise refused(path, f"its statement is not signed by this key under {signer.origin} ({e})") from None
        try:
            statement = IndexStatement.parse(text)
        except ValueError as e:
            raise refused(path, f"its statement is malformed: {e}") from None
        if statement.origin != signer.origin:
            raise refused(path, f"its statement is for the log {statement.origin!r}, not {signer.origin!r}")
        return cls(path, statement, faiss_bytes=b"", npz_bytes=b"")

    def read_files(self, keep: bool = True) -> None:
        """Read the index's two files, refused unless each has the length and SHA-256 its
        statement states (``keep`` as ``read``'s)."""
        blobs = []
        for name, file in zip(_FILES, (self.path, side_path(self.path))):
            digest, length = self.statement.files[name]
            data = _read_bounded(self.path, file, length) if keep else b""
            seen = (len(data), hashlib.sha256(data).hexdigest()) if keep else _digest_bounded(self.path, file, length)
            if seen != (length, digest):
                raise refused(self.path, f"{file.name} is not the file its statement signs (changed or damaged)")
            blobs.append(data)
        self.faiss_bytes, self.npz_bytes = blobs

    def check_system(self, system: Substrate) -> None:
        """Refuse unless ``system`` serves with the index options the index was built with
        (``nprobe`` and ``rerank`` aside: they are chosen at serving time)."""
        check_saveable(system, f"index file {self.path}")
        saved = {k: v for k, v in self.statement.settings.items() if k not in _SEARCH_KNOBS and k != "dim"}
        wanted = {k: v for k, v in system.index_options.hyperparameters().items() if k not in _SEARCH_KNOBS}
        differ = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
        if differ:
            shown = ", ".join(f"{k}={saved.get(k)} (served: {wanted.get(k)})" for k in differ)
            raise refused(self.path, f"it was built with other index options: {shown}; serve with those")

    def restore(self, index: Any, entries: int) -> int:
        """Fill the substrate's new ``index`` from the file, for a ledger of ``entries``
        entries; return N, the entries it holds (the substrate adds N.. itself)."""
        size = self.statement.size
        if size > entries:
            raise refused(
                self.path,
                f"it holds {size} entries and the ledger {entries}: the ledger was rewound, or the index is another's",
            )
        if self.statement.settings.get("dim") != getattr(index, "dim", None):
            raise refused(self.path, f"it is of dimension {self.statement.settings.get('dim')}, the ledger's is not")
        try:
            restore_ivf(index, self.faiss_bytes, self.npz_bytes, str(self.path))
        except (ValueError, RuntimeError) as e:  # RuntimeError: what FAISS raises on a file it cannot read
            raise refused(self.path, str(e)) from None
        if not holds_first(index, size):
            raise refused(self.path, f"it holds {len(index)} entries, but its statement says {size}")
        self.faiss_bytes = self.npz_bytes = b""  # parsed: the index holds what it needs
        self.restored = True
        return size

    def check_ledger(self, ledger: Any) -> None:
        """After the substrate took the index at open: ``check_root``, and that it did take it."""
        self.check_root(ledger)
        if not self.restored:
            raise refused(self.path, "the substrate did not take it at open (its entries came another way)")

    def check_root(self, ledger: Any) -> None:
        """Refuse unless ``ledger`` (its held, checked tree) holds N entries or more and its
        Merkle root at N is the statement's: the index was built over this ledger's entries."""
        size = self.statement.size
        if len(ledger) < size:
            raise refused(
                self.path, f"it holds {size} entries and the ledger only {len(ledger)}: rewound, or another's"
            )
        if ledger.root(size) != self.statement.root:
            raise refused(
                self.path,
                f"the ledger's Merkle root at size {size} is not the one the index was built over: the "
                "ledger was rewritten, or the index belongs to another ledger",
            )


def refused(path: Path, why: str) -> OcrrError:
    return OcrrError(
        f"index file {path} is refused: {why}. Rebuild it for this ledger with `ocrr ledger index LEDGER "
        f"--system SPEC --key KEY --out {path}`, or start without --index-file (each worker then trains "
        "its index at open)"
    )


_DIGEST_CHUNK = 8 << 20


def _digest_bounded(index_file: Path, path: Path, limit: int) -> tuple[int, str]:
    """The length (at most ``limit`` + 1 read) and SHA-256 of ``path``, read a chunk at a time."""
    digest, length, chunk = hashlib.sha256(), 0, bytearray(_DIGEST_CHUNK)
    try:
        with open(path, "rb", buffering=0) as fh:
            if os.fstat(fh.fileno()).st_size > limit:
                raise refused(index_file, f"{path.name} is longer than the {limit} bytes it may have")
            view = memoryview(chunk)
            while length <= limit and (got := fh.readinto(view[: min(len(chunk), limit + 1 - length)])):
                digest.update(view[:got])
                length += got
    except OSError as e:
        raise refused(index_file, f"cannot read {path.name} ({e.strerror or e})") from None
    return length, digest.hexdigest()


def _read_bounded(index_file: Path, path: Path, limit: int) -> bytes:
    """The bytes of ``path``, refused if it is missing or longer than ``limit`` (never read whole then)."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > limit:
                raise refused(index_file, f"{path.name} is longer than the {limit} bytes it may have")
            return fh.read(limit + 1)
    except OSError as e:
        raise refused(index_file, f"cannot read {path.name} ({e.strerror or e})") from None
