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

from ocrr.errors import OcrrError

__all__ = ["TreeHead", "Signer", "checkpoint_text", "verify_checkpoint", "verify_head", "default_origin"]

_ORIGIN = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no space; '+' excluded below
_ED25519 = b"\x01"


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


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
    return f"{check_origin(origin)}\n{size}\n{_b64(root)}\n"


class Signer:
    """An Ed25519 key that signs tree heads and checkpoints under ``origin``."""

    def __init__(self, private_key, origin: str):
        from cryptography.hazmat.primitives import serialization

        self._key = private_key
        self.origin = check_origin(origin)
        self.public_bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = hashlib.sha256(origin.encode() + b"\n" + _ED25519 + self.public_bytes).digest()[:4]

    @property
    def vkey(self) -> str:
        """The verifier key string witnesses and note tools are configured with."""
        return f"{self.origin}+{self.key_id.hex()}+{_b64(_ED25519 + self.public_bytes)}"

    @classmethod
    def generate(cls, origin: str) -> Signer:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate(), origin)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the private key as PKCS#8 PEM, readable by its owner only."""
        from cryptography.hazmat.primitives import serialization

        pem = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)

    @classmethod
    def load(cls, path: str | os.PathLike[str], origin: str) -> Signer:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        path = Path(path).expanduser()
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as e:
            raise OcrrError(
                f"cannot read the signing key {path} ({e}); create one with `ocrr ledger keygen {path}`"
            ) from e
        if not isinstance(key, Ed25519PrivateKey):
            raise OcrrError(f"{path} is not an Ed25519 private key; create one with `ocrr ledger keygen {path}`")
        return cls(key, origin)

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
        text = checkpoint_text(self.origin, size, root)
        sig = self._key.sign(text.encode())
        return f"{text}\n\u2014 {self.origin} {_b64(self.key_id + sig)}\n"


def _public_key(vkey: str):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        name, key_id, key_b64 = vkey.strip().split("+", 2)
        raw = base64.b64decode(key_b64, validate=True)
        if raw[:1] != _ED25519 or len(raw) != 33:
            raise ValueError("not an Ed25519 key")
        if hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex() != key_id:
            raise ValueError("key id does not match the key")
        return name, bytes.fromhex(key_id), Ed25519PublicKey.from_public_bytes(raw[1:])
    except ValueError as e:
        raise OcrrError(f"bad verifier key {vkey!r} ({e}); pass the vkey printed by `ocrr ledger keygen`") from None


def verify_checkpoint(note: str, vkey: str) -> tuple[str, int, bytes]:
    """Check a signed C2SP checkpoint against a verifier key; return (origin, size, root)."""
    from cryptography.exceptions import InvalidSignature

    name, key_id, public = _public_key(vkey)
    text, sep, sigs = note.partition("\n\n")
    if not sep:
        raise OcrrError("not a signed note: no blank line before the signature lines")
    text += "\n"
    lines = text.split("\n")
    if len(lines) < 4 or lines[0] != name:
        raise OcrrError(f"checkpoint origin {lines[0]!r} is not the key's name {name!r}")
    for line in sigs.splitlines():
        if not line.startswith("\u2014 "):
            raise OcrrError(f"malformed signature line {line!r}")
        signer, _, blob = line[2:].rpartition(" ")
        raw = base64.b64decode(blob)
        if signer != name or raw[:4] != key_id:
            continue  # another party's signature (a witness): not ours to check
        try:
            public.verify(raw[4:], text.encode())
        except InvalidSignature:
            raise OcrrError(
                "checkpoint signature does not verify: the note was altered or signed by another key"
            ) from None
        try:
            return name, int(lines[1]), base64.b64decode(lines[2], validate=True)
        except ValueError:
            raise OcrrError("checkpoint body is malformed (size or root)") from None
    raise OcrrError(f"no signature by {name} (key id {key_id.hex()}) on the checkpoint")


def verify_head(signed: dict, vkey: str) -> TreeHead:
    """Check a signed tree head (as /head returns it) against a verifier key."""
    from cryptography.exceptions import InvalidSignature

    name, key_id, public = _public_key(vkey)
    try:
        head = TreeHead(
            int(signed["size"]),
            base64.b64decode(signed["root"]),
            base64.b64decode(signed["chain_head"]),
            int(signed["timestamp_ms"]),
        )
        public.verify(base64.b64decode(signed["signature"]), head.text(name).encode())
    except (KeyError, ValueError, TypeError) as e:
        raise OcrrError(f"malformed signed head ({e})") from None
    except InvalidSignature:
        raise OcrrError("tree head signature does not verify") from None
    return head
