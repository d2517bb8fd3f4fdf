"""Standalone checks of ocrr ledger proofs: needs only Python's standard library.

An auditor can copy this one file and check what an ocrr service or ``ocrr ledger``
hands out, without installing ocrr, numpy or anything else:

* ``entry_leaf_hash``: the Merkle leaf of one ledger entry (from its exported fields);
* ``verify_inclusion``: entry i is in the log of size n with this root (RFC 9162 2.1.3.2);
* ``verify_consistency``: the log of size m is a prefix of the log of size n (2.1.4.2;
  from m = 0, the empty log, the proof is empty and every log is consistent).

The tree is RFC 6962 / 9162 shaped: leaf = SHA-256(0x00 || data), node =
SHA-256(0x01 || left || right), and the empty tree's root is SHA-256 of nothing. Every
``verify_*`` returns None when the proof holds and raises ``ProofError`` saying why not.

Command line: ``python verify.py inclusion PROOF.json --size N --root ROOT`` (or
``consistency PROOF.json ...``) with the JSON that ``ocrr ledger prove`` / ``consistency`` or
the service print, and the root you trust: ``--size/--root``, or ``--checkpoint NOTE --vkey KEY``
(its signature is checked with ocrr's note verifier, so that form needs ocrr installed). A proof
is only checked against a trusted root, never against the root it carries alone.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import struct
import sys

__all__ = [
    "ProofError",
    "leaf_hash",
    "node_hash",
    "EMPTY_ROOT",
    "ENTRY_TAG",
    "entry_head",
    "encoded_entry_head",
    "entry_bytes",
    "entry_leaf_hash",
    "root_from_inclusion_proof",
    "verify_inclusion",
    "verify_consistency",
    "b64",
    "unb64",
    "read_inclusion",
    "read_consistency",
    "check_inclusion_document",
    "check_consistency_document",
    "CannotCheck",
    "add_trusted_root_options",
    "trusted_root_of",
    "check_files",
    "main",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
# The ledger's canonical entry encoding (ocrr.ledger.chain.entry_digest hashes exactly these bytes);
# bumping the tag changes every digest: do it only with a new file format.
ENTRY_TAG = b"ocrr-ledger-entry-v1\x00"
_ID_LABEL_LEN = struct.Struct("<QI")
_TEXT_PRESENT_LEN = struct.Struct("<BI")
_DIM = struct.Struct("<I")


class ProofError(ValueError):
    """A proof that does not hold, or is malformed."""


_LEAF = hashlib.sha256(b"\x00")  # a leaf hashes 0x00 || data: start from this state, not a copy of data


def leaf_hash(data: bytes) -> bytes:
    leaf = _LEAF.copy()
    leaf.update(data)
    return leaf.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def entry_head(id: int, label: str, text: str | None, dim: int) -> bytes:
    """The bytes of an entry before its vector (``entry_bytes`` is these, the vector, prev_hash):
    the chain hashes them first and streams the vector after, without copying it."""
    return encoded_entry_head(id, label.encode("utf-8"), None if text is None else text.encode("utf-8"), dim)


def encoded_entry_head(id: int, label: bytes, text: bytes | None, dim: int) -> bytes:
    """``entry_head`` of a label and text given as their UTF-8 bytes."""
    txt = b"\x00" if text is None else _TEXT_PRESENT_LEN.pack(1, len(text)) + text
    return b"".join((ENTRY_TAG, _ID_LABEL_LEN.pack(id, len(label)), label, txt, _DIM.pack(dim)))


def entry_bytes(id: int, label: str, text: str | None, vector_le_f32: bytes, prev_hash: bytes) -> bytes:
    """Canonical bytes of one ledger entry: tag | id u64 | len u32, label | text (0x00 if
    absent, else 0x01, len u32, utf-8) | dim u32 | little-endian float32 vector | prev_hash.
    Its SHA-256 is the entry's chain hash; SHA-256(0x00 || it) is its Merkle leaf."""
    if len(vector_le_f32) % 4:
        raise ProofError(f"vector bytes must be a whole number of float32 values, got {len(vector_le_f32)} bytes")
    return b"".join((entry_head(id, label, text, len(vector_le_f32) // 4), vector_le_f32, prev_hash))


def entry_leaf_hash(id: int, label: str, text: str | None, vector_le_f32: bytes, prev_hash: bytes) -> bytes:
    return leaf_hash(entry_bytes(id, label, text, vector_le_f32, prev_hash))


def _check_hash(value: object, what: str) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != HASH_SIZE:
        size = len(value) if isinstance(value, (bytes, bytearray)) else type(value).__name__
        raise ProofError(f"{what} must be {HASH_SIZE} bytes, got {size}")
    return bytes(value)


def _check_size(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProofError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """The root that ``proof`` yields for ``leaf`` at ``index`` in a tree of ``size``."""
    index, size = _check_size(index, "leaf index"), _check_size(size, "tree size")
    if index >= size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    r = _check_hash(leaf, "leaf hash")
    fn, sn = index, size - 1
    for j, p in enumerate(proof):
        p = _check_hash(p, f"proof[{j}]")
        if sn == 0:
            raise ProofError(f"proof has {len(proof)} hashes, more than a tree of size {size} needs")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:  # right edge: skip levels where the node has no sibling
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"proof has {len(proof)} hashes, fewer than a tree of size {size} needs")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes] | None, root: bytes) -> None:
    """Raise ProofError unless ``leaf`` is entry ``index`` of the tree of ``size`` with ``root``.

    Examples:
        A log of three entries, its tree built with this module's hashes: entry 2's proof is
        the root of the subtree beside it (``ocrr ledger prove`` and the service hand out such
        proofs; this module's names, whether imported from ocrr or from a copy of the file).

        >>> a, b, c = leaf_hash(b"entry 0"), leaf_hash(b"entry 1"), leaf_hash(b"entry 2")
        >>> root = node_hash(node_hash(a, b), c)
        >>> verify_inclusion(2, 3, c, [node_hash(a, b)], root)  # None: entry 2 is in the log
        >>> verify_inclusion(0, 3, a, [b, c], root)

        A proof that does not lead to the root you trust is refused, saying why:

        >>> try:
        ...     verify_inclusion(2, 3, leaf_hash(b"forged"), [node_hash(a, b)], root)
        ... except ProofError as err:
        ...     print(err)
        inclusion proof for entry 2 of 3 gives root ..., not ...
    """
    root = _check_hash(root, "root")
    got = root_from_inclusion_proof(index, size, leaf, list(proof or []))
    if got != root:
        raise ProofError(
            f"inclusion proof for entry {index} of {size} gives root {got.hex()[:16]}…, not {root.hex()[:16]}…"
        )


def verify_consistency(size1: int, size2: int, proof: list[bytes] | None, root1: bytes, root2: bytes) -> None:
    """Raise ProofError unless the tree of ``size1`` with ``root1`` is a prefix of the tree
    of ``size2`` with ``root2``."""
    size1, size2 = _check_size(size1, "size1"), _check_size(size2, "size2")
    proof = list(proof or [])
    if size1 > size2:
        raise ProofError(f"size1 {size1} is larger than size2 {size2}: a log never shrinks")
    if size1 == 0:
        root1, root2 = _check_hash(root1, "root1"), _check_hash(root2, "root2")
        # Every log extends the empty log (RFC 9162 2.1.4): the proof is empty, and the
        # only root a log of size 0 can have is the hash of nothing.
        if proof:
            raise ProofError(f"a consistency proof from the empty log must be empty, got {len(proof)} hashes")
        if root1 != EMPTY_ROOT:
            raise ProofError(f"root1 {root1.hex()[:16]}… is not the empty log's root (SHA-256 of nothing)")
        if size2 == 0 and root2 != EMPTY_ROOT:
            raise ProofError(f"root2 {root2.hex()[:16]}… is not the empty log's root (SHA-256 of nothing)")
        return
    if size1 == size2:
        if proof:
            raise ProofError(f"equal sizes need an empty proof, got {len(proof)} hashes")
        if root1 != root2:
            raise ProofError(f"two different roots for the same size {size1}")
        return
    root1, root2 = _check_hash(root1, "root1"), _check_hash(root2, "root2")
    if not proof:
        raise ProofError(f"a consistency proof from {size1} to {size2} cannot be empty")
    path = [_check_hash(p, f"proof[{j}]") for j, p in enumerate(proof)]
    if size1 & (size1 - 1) == 0:  # size1 is a power of two: its root is a node of the new tree
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"proof has {len(proof)} hashes, more than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"proof has {len(proof)} hashes, fewer than needed")
    if fr != root1:
        raise ProofError(f"proof does not lead to root1 (the log of size {size1})")
    if sr != root2:
        raise ProofError(f"proof does not lead to root2 (the log of size {size2})")


# -- base64: the one pair ocrr writes and reads hashes, keys and vectors with --------------------
# (here, not in ocrr.ledger.proofs, which re-exports them: this file must stand alone)


def b64(raw: bytes) -> str:
    """Standard base64 (RFC 4648 section 4), padded: the spelling of every hash ocrr hands out."""
    return binascii.b2a_base64(raw, newline=False).decode("ascii")  # base64.b64encode's bytes, one call less


def unb64(s: object) -> bytes:
    """The bytes of standard base64 in its one canonical spelling (padded, no other characters,
    unused bits zero), so that one value has one spelling; ProofError otherwise."""
    if not isinstance(s, str):
        raise ProofError(f"expected a base64 string, got {type(s).__name__}")
    try:
        raw = base64.b64decode(s, validate=True)
    except ValueError:  # binascii.Error, or a str with non-ASCII characters
        raw = None
    if raw is None or b64(raw) != s:
        raise ProofError(f"{s[:60]!r} is not canonical standard base64")
    return raw


# -- proof documents: the JSON ``ocrr ledger prove`` / ``consistency`` and the service hand out -------


def read_inclusion(doc: dict) -> tuple[int, int, bytes, bytes | None, list[bytes]]:
    """(index, size, root, leaf_hash or None when absent, proof hashes) of an inclusion proof
    document ``{"index", "size", "root", "leaf_hash", "proof"}``, its fields checked for type
    and base64; ProofError naming the first that is not. Nothing is verified yet."""
    index = _check_size(_field(doc, "index", int), "index")
    size = _check_size(_field(doc, "size", int), "size")
    root = unb64(_field(doc, "root", str))
    leaf = unb64(doc["leaf_hash"]) if "leaf_hash" in doc else None
    return index, size, root, leaf, [unb64(p) for p in _field(doc, "proof", list)]


def read_consistency(doc: dict) -> tuple[int, int, bytes | None, bytes | None, list[bytes]]:
    """(from, to, root_from, root_to, proof hashes) of a consistency proof document
    ``{"from", "to", "root_from", "root_to", "proof"}`` (a root absent: None), its fields checked
    for type and base64; ProofError naming the first that is not. Nothing is verified yet."""
    size1 = _check_size(_field(doc, "from", int), "from")
    size2 = _check_size(_field(doc, "to", int), "to")
    root1, root2 = (unb64(doc[name]) if name in doc else None for name in ("root_from", "root_to"))
    return size1, size2, root1, root2, [unb64(p) for p in _field(doc, "proof", list)]


# -- proof documents, checked against a root the caller trusts -------------------------------
# A proof checked against the root it carries proves nothing: anyone can build a tree of their
# own and a proof for it. What ties a proof to the log is a root the caller already trusts (from
# a checkpoint whose signature they checked, or a head they hold), so every check below takes one.


def check_inclusion_document(
    doc: dict, trusted_size: int, trusted_root: bytes, consistency: dict | None = None
) -> None:
    """Raise ProofError unless ``doc`` (as ``ocrr ledger prove`` or the service's
    ``/proof/inclusion/<i>/entry`` print it) proves that its entry is in the log of
    ``trusted_size`` entries with ``trusted_root``. Its leaf is rebuilt from the entry's fields;
    a redundant field that contradicts them (``leaf_hash``, ``entry.bytes``, ``entry.hash``,
    ``entry.id``) is rejected. A proof for a smaller log needs ``consistency``, a consistency
    proof document from its size to ``trusted_size``."""
    entry = _field(doc, "entry", dict)
    index, size, root, stated_leaf, proof = read_inclusion(doc)
    if _field(entry, "id", int) != index:
        raise ProofError(f"entry.id {entry['id']} contradicts the proof's index {index}")
    text = entry.get("text")
    if text is not None and not isinstance(text, str):
        raise ProofError(f"entry.text must be a string or null, got {type(text).__name__}")
    vector, prev_hash = unb64(_field(entry, "vector", str)), unb64(_field(entry, "prev_hash", str))
    raw = entry_bytes(index, _field(entry, "label", str), text, vector, prev_hash)
    if "bytes" in entry and unb64(entry["bytes"]) != raw:
        raise ProofError("entry.bytes contradicts the entry's fields (they encode other bytes)")
    if "hash" in entry and unb64(entry["hash"]) != hashlib.sha256(raw).digest():
        raise ProofError("entry.hash contradicts the entry's fields (it is not their chain hash)")
    leaf = leaf_hash(raw)
    if stated_leaf is not None and stated_leaf != leaf:
        raise ProofError("leaf_hash contradicts the entry (the entry's fields hash to another leaf)")
    verify_inclusion(index, size, leaf, proof, root)
    _extends_to_trusted(size, root, trusted_size, trusted_root, consistency)


def check_consistency_document(doc: dict, trusted_size: int, trusted_root: bytes) -> None:
    """Raise ProofError unless ``doc`` (as ``ocrr ledger consistency`` or ``/proof/consistency``
    print it) proves that the log of size ``from`` is a prefix of the log of size ``to``, one
    of the two being the trusted log."""
    size1, size2, root1, root2, proof = read_consistency(doc)
    if root1 is None or root2 is None:
        raise ProofError(f"the document has no {'root_from' if root1 is None else 'root_to'!r} field")
    verify_consistency(size1, size2, proof, root1, root2)
    ends = {size1: root1, size2: root2}
    if trusted_size not in ends:
        raise ProofError(f"the trusted size {trusted_size} is neither end of this proof ({size1} to {size2})")
    if (size1 == trusted_size and root1 != trusted_root) or (size2 == trusted_size and root2 != trusted_root):
        raise ProofError(f"the proof's root for size {trusted_size} is not the trusted root: {_NOT_THE_LOG}")


_NOT_THE_LOG = "this is not the log you trust (a forked or forged log)"


def _extends_to_trusted(
    size: int, root: bytes, trusted_size: int, trusted_root: bytes, consistency: dict | None
) -> None:
    """Raise ProofError unless the log of ``size`` with ``root`` is the trusted log or a prefix
    of it (proven by the ``consistency`` document)."""
    trusted_root = _check_hash(trusted_root, "trusted root")
    if size == trusted_size:
        if root != trusted_root:
            raise ProofError(f"the proof's root for size {size} is not the trusted root: {_NOT_THE_LOG}")
        return
    if size > trusted_size:
        raise ProofError(
            f"the proof is for a log of {size} entries, more than the {trusted_size} you trust: ask for the "
            f"proof at size {trusted_size} (/proof/inclusion/<index>/entry?size={trusted_size}, or "
            f"`ocrr ledger prove --size {trusted_size}`)"
        )
    if consistency is None:
        raise ProofError(
            f"the proof is for a log of {size} entries, the trusted root for {trusted_size}: pass a consistency "
            f"proof from {size} to {trusted_size} (/proof/consistency?from={size}&to={trusted_size}, or "
            f"`ocrr ledger consistency --from {size} --to {trusted_size}`), or ask for the proof at size {trusted_size}"
        )
    size1, size2, root1, root2, proof = read_consistency(consistency)
    if (size1, size2) != (size, trusted_size):
        raise ProofError(f"the consistency proof goes from {size1} to {size2}, not from {size} to {trusted_size}")
    for name, stated, held in (("root_from", root1, root), ("root_to", root2, trusted_root)):
        if stated is not None and stated != held:
            raise ProofError(f"the consistency proof's {name} contradicts the roots being tied together")
    verify_consistency(size, trusted_size, proof, root, trusted_root)


def _field(doc: dict, name: str, kind: type):
    if not isinstance(doc, dict) or name not in doc:
        raise ProofError(f"the document has no {name!r} field")
    value = doc[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProofError(f"{name!r} must be a JSON {_JSON_NAMES[kind]}, got {value!r:.60}")
    return value


_JSON_NAMES = {int: "integer", str: "string", list: "array", dict: "object"}


# -- the command line ----------------------------------------------------------------------------
_NEED_A_ROOT = (
    "refusing to check {proof} against the root it carries: anyone can make a proof for a tree of their "
    "own. Pass the root you trust: --size N --root ROOT (from a checkpoint whose signature you checked, "
    "or a head you hold), or --checkpoint FILE --vkey KEY (the log's signed checkpoint and its verifier key)"
)


class CannotCheck(Exception):
    """No trusted root given, or a file that cannot be read: nothing was checked (exit status 2)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="verify.py",
        description="Check an ocrr inclusion or consistency proof document against a root you trust.",
    )
    p.add_argument("kind", choices=("inclusion", "consistency"))
    p.add_argument("proof", help="the proof JSON (`ocrr ledger prove` / `consistency`, or the service's)")
    add_trusted_root_options(p)
    return p


def add_trusted_root_options(parser) -> None:
    """The options that name the trusted root (shared with ``ocrr ledger check``)."""
    parser.add_argument("--size", type=int, default=None, help="the trusted log's size")
    parser.add_argument("--root", default=None, help="the trusted log's root (base64, or 64 hex digits)")
    parser.add_argument(
        "--checkpoint", default=None, help="a signed checkpoint note (or /head's JSON): its size and root"
    )
    parser.add_argument(
        "--vkey", "--verifier-key", dest="vkey", default=None, help="the checkpoint's verifier key, or a file"
    )
    parser.add_argument(
        "--consistency",
        default=None,
        help="inclusion: a consistency proof from the proof's size to the trusted size (for a smaller proof)",
    )


def trusted_root_of(args) -> tuple[int, bytes]:
    """(size, root) the caller trusts, from ``--size/--root`` or ``--checkpoint/--vkey``
    (the note's signature checked with ocrr's strict note verifier); CannotCheck otherwise."""
    by_root, by_note = (args.size, args.root), (args.checkpoint, args.vkey)
    if any(v is not None for v in by_root) and any(v is not None for v in by_note):
        raise CannotCheck("pass either --size/--root or --checkpoint/--vkey, not both")
    if by_root != (None, None):
        if None in by_root:
            raise CannotCheck("--size and --root go together: the size and root of the log you trust")
        if args.size < 0:
            raise CannotCheck(f"--size must be a non-negative integer, got {args.size}")
        return args.size, _root_arg(args.root)
    if by_note != (None, None):
        if None in by_note:
            raise CannotCheck("--checkpoint and --vkey go together: the signed note and the key it is signed with")
        return _checkpoint(args.checkpoint, args.vkey)
    raise CannotCheck(_NEED_A_ROOT.format(proof=getattr(args, "proof", "the proof")))


def _root_arg(text: str) -> bytes:
    text = text.strip()
    try:
        raw = bytes.fromhex(text) if len(text) == 2 * HASH_SIZE else unb64(text)
    except (ValueError, ProofError):
        raw = b""
    if len(raw) != HASH_SIZE:
        raise CannotCheck(f"--root {text[:60]!r} is not a SHA-256 root: give 44 base64 characters or 64 hex digits")
    return raw


def _checkpoint(note_path: str, vkey: str) -> tuple[int, bytes]:
    note = _read_text(note_path, "the checkpoint")
    if note.lstrip().startswith("{"):  # the JSON of /head or `ocrr ledger head --key`: its checkpoint field
        field = _load_json(note_path, note).get("checkpoint")
        if not isinstance(field, str):
            raise CannotCheck(f'{note_path} is JSON without a "checkpoint" note; pass a signed head or its note')
        note = field
    key = vkey.strip() if "+" in vkey else _read_text(vkey, "the verifier key").strip()
    try:  # the signature is Ed25519, which Python's standard library lacks: ocrr's note verifier checks it
        from ocrr.errors import OcrrError
        from ocrr.ledger.heads import check_vkey, verify_checkpoint

        try:
            check_vkey(key)
        except OcrrError as e:
            raise CannotCheck(str(e)) from None  # not a key at all: the command was given the wrong file
        try:
            _, size, root = verify_checkpoint(note, key)
        except OcrrError as e:
            raise ProofError(f"the checkpoint does not verify: {e}") from None
    except ImportError:
        raise CannotCheck(
            "--checkpoint needs ocrr installed (pip install -e . in its clone) to check the note's Ed25519 signature; "
            "without it, check the checkpoint with your own tools and pass its size and root: --size N --root ROOT"
        ) from None
    return size, root


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CannotCheck(f"cannot read {what} {path!r} ({e})") from None


def _load_json(path: str, text: str | None = None) -> dict:
    """A JSON object, refusing duplicate keys (another parser would read the other value) and
    the non-JSON constants NaN and Infinity."""

    def pairs(items: list) -> dict:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
        return dict(items)

    def constant(name: str):
        raise ValueError(f"{name} is not JSON")

    text = _read_text(path, "the proof") if text is None else text
    try:
        doc = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except ValueError as e:
        raise CannotCheck(f"{path} is not a JSON proof document ({e})") from None
    if not isinstance(doc, dict):
        raise CannotCheck(f"{path} is not a JSON object")
    return doc


def check_files(kind: str, proof_path: str, trusted: tuple[int, bytes], consistency_path: str | None) -> None:
    """Check the proof document at ``proof_path`` against ``trusted`` (size, root); ProofError if
    it does not hold, CannotCheck if a file cannot be read."""
    doc = _load_json(proof_path)
    if kind == "inclusion":
        cons = None if consistency_path is None else _load_json(consistency_path)
        check_inclusion_document(doc, *trusted, consistency=cons)
    elif consistency_path is not None:
        raise CannotCheck("--consistency is for inclusion proofs")
    else:
        check_consistency_document(doc, *trusted)


def main(argv: list[str] | None = None) -> int:
    """``python verify.py inclusion|consistency PROOF.json`` and a trusted root; exit status 0
    when the proof holds against it, 1 when it does not (``FAILED: why``), 2 when it cannot be
    checked (no trusted root, a file that cannot be read)."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_files(args.kind, args.proof, trusted_root_of(args), args.consistency)
    except CannotCheck as e:
        print(f"verify.py: {e}", file=sys.stderr)
        return 2
    except (ProofError, KeyError, ValueError, TypeError) as e:
        print(f"FAILED: {e}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
