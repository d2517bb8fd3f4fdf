"""Tree heads, Ed25519 signatures and C2SP checkpoints.

A tree head says "at this time the log had ``size`` entries, Merkle root ``root`` and
chain head ``chain_head``". With a key configured, ``Signer`` signs it twice:

* the head itself, over the text ``ocrr-tree-head-v1\\n<origin>\\n<size>\\n<root b64>\\n
  <chain head b64>\\n<time ms>\\n`` (what ``/head`` and ``/correct`` return);
* a C2SP checkpoint (c2sp.org/tlog-checkpoint): the signed note ``<origin>\\n<size>\\n
  <root b64>\\n\\n— <origin> <b64(key id || signature)>\\n`` that transparency-log
  witnesses and their tools read. Its key id is SHA-256(name || 0x0A || 0x01 ||
  public key)[:4] (c2sp.org/signed-note, Ed25519), and ``vkey`` is the verifier key
  string those tools are configured with: ``<name>+<key id hex>+<b64(0x01 || public key)>``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from ocrr.errors import OcrrError

__all__ = [
    "TreeHead",
    "NoteKey",
    "Signer",
    "checkpoint_text",
    "check_vkey",
    "is_private_key",
    "shown",
    "parse_signed_note",
    "verify_checkpoint",
    "verify_head",
    "default_origin",
]

_ORIGIN = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no space; '+' excluded below
_ED25519 = b"\x01"
_HASH_SIZE = 32
SIG_SIZE = 64  # an Ed25519 signature
# Unicode white space (the White_Space property, what Go's unicode.IsSpace tests): a key
# name may contain none of these (c2sp.org/signed-note).
_SPACES = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)
_MAX_SIGNATURES = 100  # the spec asks verifiers for a limit of at least 16; Go's note.Open uses 100
_TREE_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")  # ASCII decimal, no sign, no leading zero, no '_'
_MAX_TREE_SIZE = 2**63 - 1  # what Go's sumdb/tlog (int64) can hold
_NOTE_FIX = "pass the note exactly as `ocrr ledger head` or the service's /head printed it"


# heads keeps its own base64 pair: the standalone verifier (verify.py, where ocrr.ledger.proofs takes
# the pair the rest of ocrr uses) checks checkpoint signatures with this module, so this one cannot
# import it back.
def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def strict_b64(s: str) -> bytes:
    """Standard base64 (RFC 4648 section 4) in its one canonical spelling: padded, no
    other characters, unused bits zero. Raises ValueError otherwise."""
    if not isinstance(s, str) or not s.isascii():
        raise ValueError("not ASCII base64")
    raw = base64.b64decode(s, validate=True)
    if _b64(raw) != s:
        raise ValueError("not canonical base64 (padding or unused bits)")
    return raw


def valid_key_name(name: str) -> bool:
    """A signed-note key name: non-empty, no Unicode space, no '+'."""
    return bool(name) and "+" not in name and not any(c in _SPACES for c in name)


def _bad_note(reason: str) -> OcrrError:
    return OcrrError(f"malformed signed note: {reason} (c2sp.org/signed-note); {_NOTE_FIX}")


def bad_checkpoint(reason: str) -> OcrrError:
    return OcrrError(f"malformed checkpoint: {reason} (c2sp.org/tlog-checkpoint); {_NOTE_FIX}")


def default_origin(path: str | os.PathLike[str]) -> str:
    """A stable log name from the ledger's file name (override with --origin)."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", Path(path).stem) or "ledger"
    return f"ocrr.invalid/{stem}"


def check_origin(origin: str) -> str:
    if not isinstance(origin, str) or not _ORIGIN.match(origin) or "+" in origin:
        raise OcrrError(
            f"origin {origin!r} must be printable ASCII without spaces or '+' "
            "(a schema-less URL such as example.com/my-ledger)"
        )
    return origin


@dataclass(frozen=True)
class TreeHead:
    size: int
    root: bytes
    chain_head: bytes
    timestamp_ms: int

    @classmethod
    def now(cls, size: int, root: bytes, chain_head: bytes) -> TreeHead:
        return cls(size, root, chain_head, int(time.time() * 1000))

    def text(self, origin: str) -> str:
        return (
            f"ocrr-tree-head-v1\n{origin}\n{self.size}\n{_b64(self.root)}\n"
            f"{_b64(self.chain_head)}\n{self.timestamp_ms}\n"
        )

    def to_dict(self) -> dict:
        return {
            "size": self.size,
            "root": _b64(self.root),
            "chain_head": _b64(self.chain_head),
            "timestamp_ms": self.timestamp_ms,
        }


def checkpoint_text(origin: str, size: int, root: bytes) -> str:
    """The note text of a C2SP checkpoint (no extension lines)."""
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= _MAX_TREE_SIZE:
        raise OcrrError(f"checkpoint tree size must be an integer in [0, 2^63), got {size!r}")
    if not isinstance(root, bytes) or len(root) != _HASH_SIZE:
        raise OcrrError(f"checkpoint root must be a {_HASH_SIZE}-byte hash, got {root!r}")
    return f"{check_origin(origin)}\n{size}\n{_b64(root)}\n"


def parse_signed_note(note: str | bytes) -> tuple[str, list[tuple[str, bytes, bytes]]]:
    """Split a C2SP signed note into its text and its signature lines, checking the format
    exactly as c2sp.org/signed-note (and Go's golang.org/x/mod/sumdb/note) does.

    Returns ``(text, [(key name, key id, signature), ...])``; the text ends with its newline.
    Checks no signature: that needs a key (see ``verify_checkpoint``)."""
    if isinstance(note, (bytes, bytearray)):
        try:
            note = bytes(note).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad_note(f"not valid UTF-8 at byte {e.start}") from None
    if not isinstance(note, str):
        raise _bad_note(f"expected text, got {type(note).__name__}")
    try:
        note.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _bad_note(f"not valid UTF-8 (a lone surrogate at character {e.start})") from None
    for i, c in enumerate(note):
        if c < " " and c != "\n":
            raise _bad_note(f"control character {c!r} at character {i} (only newline is allowed)")
    split = note.rfind("\n\n")
    if split < 0:
        raise _bad_note("no blank line before the signature lines")
    text, sigs = note[: split + 1], note[split + 2 :]
    if not sigs:
        raise _bad_note("no signature lines after the blank line")
    if not sigs.endswith("\n"):
        raise _bad_note("the last signature line does not end with a newline")
    lines = sigs[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise _bad_note(f"{len(lines)} signature lines, more than the {_MAX_SIGNATURES} accepted")
    out: list[tuple[str, bytes, bytes]] = []
    for n, line in enumerate(lines, 1):
        if not line.startswith("\u2014 "):
            raise _bad_note(f"signature line {n} {line[:40]!r} does not start with an em dash (U+2014) and a space")
        name, _, blob = line[2:].partition(" ")
        if not valid_key_name(name):
            raise _bad_note(f"signature line {n} has an invalid key name {name!r} (empty, a space or a '+')")
        try:
            raw = strict_b64(blob)
        except ValueError:
            raise _bad_note(f"signature line {n} does not end in one canonical standard base64 string") from None
        if len(raw) < 5:
            raise _bad_note(f"signature line {n} holds {len(raw)} bytes, fewer than a 4-byte key id and a signature")
        out.append((name, raw[:4], raw[4:]))
    return text, out


def save_private_key(key, path: str | os.PathLike[str]) -> None:
    """Write an Ed25519 private key as PKCS#8 PEM, readable by its owner only, never over a file."""
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)


def load_private_key(path: Path, what: str, fix: str):
    """The Ed25519 private key in the PEM file ``path``, or an OcrrError naming ``what`` and ``fix``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise OcrrError(f"cannot read the {what} {path} ({e}); {fix}") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise OcrrError(f"{path} is not an Ed25519 private key; {fix}")
    return key


class NoteKey:
    """An Ed25519 private key signing C2SP notes under a name: its raw public key, key id
    (SHA-256 of name, newline, key type byte, public key; the first 4 bytes) and verifier key;
    ``generate``, ``save`` and ``load`` as PKCS#8 PEM readable by its owner only. A subclass
    gives its key type byte, what its key file is called and the command that makes one."""

    KEY_TYPE = _ED25519  # a signed-note Ed25519 key
    KEY_FILE = "signing key"
    KEYGEN = "ocrr ledger keygen {path}"

    def __init__(self, private_key, name: str):
        from cryptography.hazmat.primitives import serialization

        self._key = private_key
        self._key_name = name
        self.public_bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = hashlib.sha256(name.encode() + b"\n" + self.KEY_TYPE + self.public_bytes).digest()[:4]

    @property
    def vkey(self) -> str:
        """The verifier key (name+key id+base64 of type byte and public key) that the key's
        readers (witnesses, clients, note tools) are configured with."""
        return f"{self._key_name}+{self.key_id.hex()}+{_b64(self.KEY_TYPE + self.public_bytes)}"

    @classmethod
    def generate(cls, name: str) -> Self:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate(), name)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the private key as PKCS#8 PEM, readable by its owner only."""
        save_private_key(self._key, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], name: str) -> Self:
        path = Path(path).expanduser()
        fix = f"create one with `{cls.KEYGEN.format(path=path)}`"
        return cls(load_private_key(path, cls.KEY_FILE, fix), name)


class Signer(NoteKey):
    """An Ed25519 key that signs tree heads and checkpoints under ``origin``."""

    def __init__(self, private_key, origin: str):
        self.origin = check_origin(origin)
        super().__init__(private_key, self.origin)

    def sign_head(self, head: TreeHead) -> dict:
        sig = self._key.sign(head.text(self.origin).encode())
        return {
            **head.to_dict(),
            "origin": self.origin,
            "key_id": self.key_id.hex(),
            "signature": _b64(sig),
            "checkpoint": self.checkpoint(head.size, head.root),
        }

    def checkpoint(self, size: int, root: bytes) -> str:
        return self.sign_note(checkpoint_text(self.origin, size, root))

    def sign_note(self, text: str) -> str:
        """Sign ``text`` (ending in a newline) as a C2SP signed note under this key's name."""
        if not isinstance(text, str) or not text.endswith("\n"):
            raise OcrrError("a signed note's text must end with a newline")
        sig = self._key.sign(text.encode("utf-8"))
        return f"{text}\n\u2014 {self.origin} {_b64(self.key_id + sig)}\n"


def public_key(vkey: str):
    """Parse a verifier key ``<name>+<8 hex digits key id>+<b64(0x01 || Ed25519 key)>``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        if not isinstance(vkey, str):
            raise ValueError("not a string")
        name, key_id, key_b64 = vkey.strip().split("+", 2)
        if not valid_key_name(name):
            raise ValueError("invalid key name")
        if not re.fullmatch(r"[0-9a-fA-F]{8}", key_id):
            raise ValueError("the key id is not 8 hex digits")
        raw = strict_b64(key_b64)
        if raw[:1] != _ED25519 or len(raw) != 33:
            raise ValueError("not an Ed25519 key")
        if hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4] != bytes.fromhex(key_id):
            raise ValueError("key id does not match the key")
        return name, bytes.fromhex(key_id), Ed25519PublicKey.from_public_bytes(raw[1:])
    except ValueError as e:
        if is_private_key(vkey):
            raise OcrrError(
                "a private signing key was given where its verifier key belongs (the key is not shown here); "
                "pass the vkey `ocrr ledger keygen` printed, which `ocrr ledger head --key` also prints, and "
                "keep the private key to its signer"
            ) from None
        raise OcrrError(
            f"bad verifier key {shown(vkey)} ({e}); pass the vkey printed by `ocrr ledger keygen`"
        ) from None


def is_private_key(value: object) -> bool:
    """Whether ``value`` holds a private key's text (a PEM block), which no message repeats."""
    return isinstance(value, str) and "PRIVATE KEY" in value


def shown(value: object, width: int = 80) -> str:
    """``value`` as an error message shows something the user gave for a key: its repr, cut
    to ``width`` characters (a wrong file's whole text helps no one)."""
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 4]}...{text[-1]}"


def check_vkey(vkey: str) -> str:
    """A verifier key as given, stripped, or an OcrrError naming what is wrong with it."""
    public_key(vkey)
    return vkey.strip()


def parse_size(line: str) -> int:
    if not _TREE_SIZE.fullmatch(line) or int(line) > _MAX_TREE_SIZE:
        raise bad_checkpoint(
            f"tree size {line[:40]!r} is not a decimal number in ASCII digits without sign, "
            "leading zero or separator, below 2^63"
        )
    return int(line)


def parse_hash(line: str, what: str) -> bytes:
    try:
        raw = strict_b64(line)
    except ValueError:
        raise bad_checkpoint(f"{what} {line[:60]!r} is not canonical standard base64") from None
    if len(raw) != _HASH_SIZE:
        raise bad_checkpoint(f"{what} is {len(raw)} bytes, not {_HASH_SIZE}")
    return raw


def verify_note(note: str | bytes, vkey: str) -> str:
    """Check that a C2SP signed note carries a valid signature by ``vkey``; return its text.

    The note is parsed strictly, every signature line is well formed, the key's signature
    verifies (another signature by the same key name and id is rejected if it does not);
    other parties' signatures (witnesses, a rotated key) are left alone."""
    from cryptography.exceptions import InvalidSignature

    name, key_id, public = public_key(vkey)
    text, sigs = parse_signed_note(note)
    verified = False
    for signer, kid, sig in sigs:
        if signer != name or kid != key_id:
            continue  # another party's signature (a witness, a rotated key): not ours to check
        if verified:
            continue  # a repeated signature by our key: Go's note.Open drops it too
        try:
            if len(sig) != SIG_SIZE:
                raise InvalidSignature
            public.verify(sig, text.encode("utf-8"))
        except InvalidSignature:
            raise OcrrError(
                "checkpoint signature does not verify: the note was altered or signed by another key"
            ) from None
        verified = True
    if not verified:
        raise OcrrError(f"no signature by {name} (key id {key_id.hex()}) on the checkpoint")
    return text


def verify_checkpoint(note: str | bytes, vkey: str) -> tuple[str, int, bytes]:
    """Check a signed C2SP checkpoint against a verifier key; return (origin, size, root).

    Accepts exactly what c2sp.org/signed-note and c2sp.org/tlog-checkpoint allow: the
    note verifies (``verify_note``), and the body is origin, size and root hash, then
    optional non-empty extension lines."""
    name = public_key(vkey)[0]
    text = verify_note(note, vkey)
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise bad_checkpoint(f"{len(lines)} lines of text, not origin, tree size and root hash")
    if "" in lines:
        raise bad_checkpoint(f"line {lines.index('') + 1} of the text is empty")
    if lines[0] != name:
        raise OcrrError(f"checkpoint origin {lines[0]!r} is not the key's name {name!r}")
    return name, parse_size(lines[1]), parse_hash(lines[2], "root hash")


def verify_head(signed: dict, vkey: str) -> TreeHead:
    """Check a signed tree head (as /head returns it) against a verifier key."""
    from cryptography.exceptions import InvalidSignature

    name, key_id, public = public_key(vkey)
    try:
        if not isinstance(signed, dict):
            raise TypeError(f"expected a JSON object, got {type(signed).__name__}")
        size, ts = signed["size"], signed["timestamp_ms"]
        for what, v in (("size", size), ("timestamp_ms", ts)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_TREE_SIZE:
                raise ValueError(f"{what} must be a non-negative JSON integer, got {v!r}")
        if signed.get("origin", name) != name:
            raise ValueError(f"origin {signed['origin']!r} is not the key's name {name!r}")
        hashes = []
        for what in ("root", "chain_head"):
            raw = strict_b64(signed[what])
            if len(raw) != _HASH_SIZE:
                raise ValueError(f"{what} is {len(raw)} bytes, not {_HASH_SIZE}")
            hashes.append(raw)
        sig = strict_b64(signed["signature"])
        head = TreeHead(size, hashes[0], hashes[1], ts)
        if len(sig) != SIG_SIZE:
            raise InvalidSignature
        public.verify(sig, head.text(name).encode())
    except (KeyError, ValueError, TypeError) as e:
        raise OcrrError(f"malformed signed head ({e}); {_NOTE_FIX}") from None
    except InvalidSignature:
        raise OcrrError("tree head signature does not verify") from None
    return head
