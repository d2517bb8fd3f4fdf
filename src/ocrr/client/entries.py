"""Are the corrections the client sent in the signed log, byte for byte?

The leaf of each entry is rebuilt from what the client sent (its label, text and float32
vector) and the previous entry's chain hash the service reports (``/proof/inclusion/<i>/entry``),
then checked against the signed roots with the service's inclusion proofs. A service that
stored anything else (another label, a rounded vector, a text with one character changed)
cannot produce a proof for the client's leaf: ``EntryMismatch``. The entry's ``prev_hash`` is
the one part taken from the service; a false one gives another leaf, which no proof reaches.

A correction sent as text alone was encoded by the service: its vector is the service's, and
only its label and text are checked against what was sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ocrr.client.checkpoints import Checkpoint
from ocrr.client.errors import BadProof, EntryMismatch
from ocrr.ledger.proofs import InclusionProof, b64, unb64
from ocrr.ledger.verify import ProofError, entry_bytes, leaf_hash, verify_inclusion

__all__ = ["Sent", "check_sent_entries"]

#: ``entry_proof(index, size)``: the service's /proof/inclusion/<index>/entry?size=<size> document.
EntryProofSource = Callable[[int, int], dict]


@dataclass(frozen=True)
class Sent:
    """One correction as the client sent it (``vector``: little-endian float32 bytes, or None
    when the service encoded ``text``)."""

    label: str
    text: str | None
    vector: bytes | None


def check_sent_entries(
    ids: Sequence[int],
    sent: Sequence[Sent],
    answered: Checkpoint,
    proofs: Sequence[dict],
    trusted: Checkpoint,
    entry_proof: EntryProofSource,
) -> None:
    """Raise EntryMismatch or BadProof unless every ``sent`` item is entry ``ids[k]`` of the log
    ``answered`` signs (the /correct answer's ``proofs``) and of the one ``trusted`` signs (a proof
    fetched at its size)."""
    if len(ids) != len(sent) or len(proofs) != len(sent):
        raise BadProof(f"the service answered {len(ids)} ids and {len(proofs)} proofs for {len(sent)} corrections")
    chain: bytes | None = None  # the chain hash of the entry before, as the client rebuilt it
    for i, item, answer_proof in zip(ids, sent, proofs):
        doc = entry_proof(i, trusted.size)
        stored = doc.get("entry") if isinstance(doc, dict) else None
        if not isinstance(stored, dict):
            raise BadProof(f"the service's proof of entry {i} carries no entry")
        _compare(i, item, stored)
        prev = _decode(stored.get("prev_hash"), f"entry {i}'s prev_hash")
        if chain is not None and prev != chain:
            raise EntryMismatch(
                f"entry {i} does not follow the entry before it that you sent (its prev_hash is another "
                "entry's chain hash): the service stored something other than what you sent",
                i,
            )
        vector = item.vector if item.vector is not None else _decode(stored.get("vector"), f"entry {i}'s vector")
        raw = entry_bytes(i, item.label, item.text, vector, prev)
        leaf = leaf_hash(raw)
        _included(i, leaf, answer_proof, answered, "the /correct answer")
        _included(i, leaf, doc, trusted, f"/proof/inclusion/{i}/entry")
        chain = hashlib.sha256(raw).digest()


def _compare(i: int, item: Sent, stored: dict) -> None:
    """EntryMismatch naming the first field the service holds otherwise than it was sent."""
    fields: list[tuple[str, object, object]] = [
        ("id", i, stored.get("id")),
        ("label", item.label, stored.get("label")),
        ("text", item.text, stored.get("text")),
    ]
    if item.vector is not None:
        fields.append(("vector", b64(item.vector), stored.get("vector")))
    for name, mine, theirs in fields:
        if mine != theirs:
            raise EntryMismatch(
                f"entry {i}: the log holds {name} {_short(theirs)} where you sent {_short(mine)}: the service "
                "stored something other than what you sent; report it to the service's operator with this evidence",
                i,
                {"field": name, "sent": mine, "stored": theirs},
            )


def _included(i: int, leaf: bytes, doc: object, checkpoint: Checkpoint, where: str) -> None:
    """``leaf`` is entry ``i`` of the log ``checkpoint`` signs, by the proof in ``doc``."""
    try:
        proof = InclusionProof.from_dict(doc)
    except ProofError as e:
        raise BadProof(f"{where}: the proof of entry {i} is malformed ({e})", {"checkpoint": checkpoint.note}) from None
    if (proof.index, proof.size) != (i, checkpoint.size):
        raise BadProof(
            f"{where} holds no proof of entry {i} in the log of {checkpoint.size} entries the checkpoint signs",
            {"checkpoint": checkpoint.note},
        )
    try:  # against the signed root, not the one the proof carries
        verify_inclusion(i, checkpoint.size, leaf, proof.path, checkpoint.root)
        return
    except ProofError as e:
        mine = e
    theirs = proof.leaf
    try:  # does the proof hold for the leaf the service says it stored? then it stored other bytes
        verify_inclusion(i, checkpoint.size, theirs, proof.path, checkpoint.root)
    except ProofError:
        raise BadProof(
            f"{where}: the inclusion proof of entry {i} does not lead to the signed root ({mine}); the service "
            "sent a broken or forged proof",
            {"checkpoint": checkpoint.note, "proof": doc},
        ) from None
    raise EntryMismatch(
        f"entry {i}: the signed log holds other bytes than the correction you sent (its leaf is "
        f"{b64(theirs)}, yours {b64(leaf)}): the service "
        "stored something other than what you sent; report it to its operator with this evidence",
        i,
        {"checkpoint": checkpoint.note, "stored_leaf": b64(theirs), "sent_leaf": b64(leaf)},
    )


def _decode(text: object, what: str) -> bytes:
    try:
        return unb64(text)
    except ProofError as e:
        raise BadProof(f"{what} is not base64 ({e})") from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
