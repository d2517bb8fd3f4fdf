"""Witness cosignatures on checkpoints (c2sp.org/tlog-cosignature, the Ed25519 cosignature/v1).

A witness that checked a checkpoint is consistent with every one it cosigned before adds a
signature line of its own to the checkpoint's signed note:

* its key id is SHA-256(name || 0x0A || 0x04 || Ed25519 public key)[:4] (type byte 0x04:
  cosignature/v1, not the 0x01 of a plain note signature), and its ``vkey`` is
  ``<name>+<key id hex>+<b64(0x04 || public key)>``;
* it signs ``cosignature/v1\\ntime <unix seconds>\\n`` followed by the checkpoint's body,
  and the line carries ``key id || 8-byte big-endian timestamp || 64-byte signature``.

A client trusts a checkpoint once a quorum of distinct witnesses it trusts cosigned it
(``check_quorum``): a log showing two histories must then convince witnesses that already
hold the other one, which they refuse (``ocrr witness``).
"""

from __future__ import annotations

import hashlib
import struct
import time

from ocrr.errors import OcrrError
from ocrr.ledger.heads import (
    SIG_SIZE,
    NoteKey,
    bad_checkpoint,
    check_origin,
    is_private_key,
    parse_hash,
    parse_signed_note,
    parse_size,
    public_key,
    shown,
    valid_key_name,
)
from ocrr.ledger.proofs import b64, unb64

__all__ = [
    "Cosigner",
    "attach_cosignatures",
    "check_cosigner_vkey",
    "check_quorum",
    "checkpoint_body",
    "cosigned_by",
    "signed_message",
    "verify_cosignature",
]

_COSIGNATURE_V1 = b"\x04"  # the key id's type byte (c2sp.org/tlog-cosignature)
_ED25519 = b"\x01"  # a plain signed-note Ed25519 key, accepted as a witness key as Go's verifier does
_MAX_TIMESTAMP = 2**63 - 1  # the spec's bound on the timestamp
_VKEY_FIX = "pass the witness's vkey as `ocrr witness keygen` or `ocrr witness show` printed it"


def _key_id(name: str, public_bytes: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + _COSIGNATURE_V1 + public_bytes).digest()[:4]


def signed_message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header line, the time line, then the checkpoint body."""
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def checkpoint_body(note: str | bytes) -> tuple[str, str, int, bytes]:
    """The body of a signed checkpoint note, strictly parsed: (body, origin, size, root).
    Checks no signature (``heads.verify_checkpoint`` checks the log's)."""
    body, _ = parse_signed_note(note)
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise bad_checkpoint(f"{len(lines)} lines of text, not origin, tree size and root hash")
    if "" in lines:
        raise bad_checkpoint(f"line {lines.index('') + 1} of the text is empty")
    try:
        origin = check_origin(lines[0])
    except OcrrError as e:
        raise bad_checkpoint(f"origin line: {e}") from None
    return body, origin, parse_size(lines[1]), parse_hash(lines[2], "root hash")


class Cosigner(NoteKey):
    """A witness's Ed25519 key, named ``name``, making cosignature/v1 signature lines."""

    KEY_TYPE = _COSIGNATURE_V1  # its vkey says cosignature/v1
    KEY_FILE = "witness key"
    KEYGEN = "ocrr witness keygen {path} --name NAME"

    def __init__(self, private_key, name: str):
        if not isinstance(name, str) or not valid_key_name(name):
            raise OcrrError(f"witness name {name!r} must be non-empty, without spaces or '+' (e.g. witness.example/w1)")
        self.name = name
        super().__init__(private_key, name)

    def cosign(self, note: str | bytes, timestamp: int | None = None) -> str:
        """The cosignature line (ending in a newline) over the checkpoint ``note``'s body,
        timestamped ``timestamp`` (default: now, in whole seconds)."""
        body = checkpoint_body(note)[0]
        t = int(time.time()) if timestamp is None else timestamp
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= _MAX_TIMESTAMP:
            raise OcrrError(f"a cosignature's timestamp must be an integer in [0, 2^63), got {t!r}")
        sig = self._key.sign(signed_message(body, t))
        return f"\u2014 {self.name} {b64(self.key_id + struct.pack('>Q', t) + sig)}\n"


def _cosigner_key(vkey: str):
    """(name, cosignature key id, public key) of a witness's vkey: type 0x04 (the spec's), or a
    plain Ed25519 note key (type 0x01, what Go's note.GenerateKey prints) used for cosignature/v1."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        if not isinstance(vkey, str):
            raise ValueError("not a string")
        name, key_id, key_b64 = vkey.strip().split("+", 2)
        raw = unb64(key_b64)
    except ValueError as e:
        if is_private_key(vkey):
            raise OcrrError(
                "a private key was given where a witness's verifier key belongs (the key is not shown here); "
                f"{_VKEY_FIX}, and keep the private key to the witness"
            ) from None
        raise OcrrError(f"bad witness verifier key {shown(vkey)} ({e}); {_VKEY_FIX}") from None
    if raw[:1] == _ED25519:
        name, _, public = public_key(vkey)  # checks it as a note key, its 0x01 key id included
        from cryptography.hazmat.primitives import serialization

        public_bytes = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return name, _key_id(name, public_bytes), public
    problem = None
    if not valid_key_name(name):
        problem = "invalid key name"
    elif raw[:1] != _COSIGNATURE_V1 or len(raw) != 33:
        problem = "not an Ed25519 cosignature/v1 key (type 0x04, 32 bytes)"
    elif len(key_id) != 8 or bytes.fromhex(key_id) != _key_id(name, raw[1:]):
        problem = "key id does not match the key"
    if problem:
        raise OcrrError(f"bad witness verifier key {shown(vkey)} ({problem}); {_VKEY_FIX}")
    return name, bytes.fromhex(key_id), Ed25519PublicKey.from_public_bytes(raw[1:])


def check_cosigner_vkey(vkey: str) -> str:
    """A witness's verifier key as given, stripped, or an OcrrError naming what is wrong."""
    _cosigner_key(vkey)
    return vkey.strip()


def _timestamps(note: str | bytes, key) -> list[int]:
    """The timestamps of every cosignature line on ``note`` by the witness ``key`` (from
    ``_cosigner_key``); OcrrError if one of them does not verify."""
    from cryptography.exceptions import InvalidSignature

    name, key_id, public = key
    body, sigs = checkpoint_body(note)[0], parse_signed_note(note)[1]
    times = []
    for signer, kid, sig in sigs:
        if signer != name or kid != key_id:
            continue
        t = struct.unpack(">Q", sig[:8])[0] if len(sig) == 8 + SIG_SIZE else None
        try:
            if t is None or t > _MAX_TIMESTAMP:
                raise InvalidSignature
            public.verify(sig[8:], signed_message(body, t))
        except InvalidSignature:
            raise OcrrError(
                f"the cosignature by witness {name} does not verify: the checkpoint was altered, "
                "or the line was not made by that witness's key"
            ) from None
        times.append(t)
    return times


def verify_cosignature(note: str | bytes, vkey: str) -> int:
    """Check the cosignature by the witness ``vkey`` on the checkpoint ``note``; return its
    timestamp (the latest, if the note holds several by that witness). Raises OcrrError when
    there is none, or when one does not verify."""
    key = _cosigner_key(vkey)
    times = _timestamps(note, key)
    if not times:
        raise OcrrError(f"no cosignature by witness {key[0]} (key id {key[1].hex()}) on the checkpoint")
    return max(times)


def cosigned_by(note: str | bytes, witness_vkeys: list[str]) -> dict[str, int]:
    """The witnesses of ``witness_vkeys`` whose cosignature on ``note`` verifies: {vkey: timestamp}.
    One witness counts once, whatever the number of its lines or of its vkeys given (one
    public key is one witness: the cosigned message does not name the witness). A line that
    claims to be by a trusted witness and does not verify raises OcrrError."""
    from cryptography.hazmat.primitives import serialization

    found: dict[str, int] = {}
    seen_keys: set[bytes] = set()
    for vkey in witness_vkeys:
        key = _cosigner_key(vkey)
        raw = key[2].public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        times = _timestamps(note, key)
        if times and raw not in seen_keys:
            seen_keys.add(raw)
            found[vkey.strip()] = max(times)
    return found


def check_quorum(note: str | bytes, witness_vkeys: list[str], quorum: int) -> dict[str, int]:
    """``cosigned_by``, raising OcrrError unless at least ``quorum`` distinct witnesses cosigned."""
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 0:
        raise OcrrError(f"a quorum is a non-negative number of witnesses, got {quorum!r}")
    found = cosigned_by(note, witness_vkeys)
    if len(found) < quorum:
        raise OcrrError(
            f"the checkpoint is cosigned by {len(found)} of the trusted witnesses, fewer than the quorum of "
            f"{quorum}: it was not shown to enough witnesses (or they refused it)"
        )
    return found


def attach_cosignatures(note: str | bytes, lines: str | list[str]) -> str:
    """The signed ``note`` with the signature ``lines`` (a witness's answer, or lines one by
    one) added after its own, an exact repeat of a line it holds dropped. Checks the format,
    not the signatures (``verify_cosignature`` does)."""
    body, _ = parse_signed_note(note)
    if isinstance(note, (bytes, bytearray)):
        note = bytes(note).decode("utf-8")  # valid: parse_signed_note checked it
    if isinstance(lines, str):
        lines = lines.splitlines(keepends=True)
    held = note[len(body) + 1 :].splitlines(keepends=True)
    added = []
    for line in lines:
        if not line.endswith("\n"):
            line += "\n"
        if line not in held and line not in added:
            added.append(line)
    combined = note + "".join(added)
    parse_signed_note(combined)  # every added line is a well-formed signature line
    return combined
