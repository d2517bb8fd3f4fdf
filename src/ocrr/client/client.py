"""``Client``: talk to an ``ocrr serve`` and believe nothing it says without checking.

Every checkpoint the client receives is verified with the log's verifier key (and a quorum of
witness cosignatures when configured) and tied to the last one it holds by a consistency proof;
the last verified checkpoint is kept in the ``state`` file for the next client. Every
correction's inclusion proofs are checked against a verified checkpoint, with each leaf rebuilt
from what the client sent. ``audit`` checks the whole log from the tiles alone.

One operation at a time per state file: each takes the state's lock for its whole course
(fetch, check, persist), so clients sharing a state file take turns and never record an older
head over a newer one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ocrr.client.audit import AuditReport, audit_tiles
from ocrr.client.checkpoints import Checkpoint, CheckpointVerifier, QuorumCheck, check_extends
from ocrr.client.entries import Sent, check_sent_entries
from ocrr.client.errors import BadProof, QuorumNotMet, ServiceUnavailable
from ocrr.client.transport import DEFAULT_TIMEOUT, Transport
from ocrr.client.trusted_state import MemoryState, TrustedState
from ocrr.errors import OcrrError
from ocrr.ledger.proofs import b64, unb64

__all__ = ["Client", "Correction"]

WITNESS_WAIT = 10.0  # seconds a correction waits for its checkpoint to be cosigned (with witnesses)


@dataclass(frozen=True)
class Correction:
    """What a verified correction returns: its entry ids and the checkpoint proving them."""

    ids: list[int]
    checkpoint: Checkpoint

    def to_dict(self) -> dict:
        return {"ids": self.ids, "checkpoint": self.checkpoint.to_dict()}


class Client:
    """A verifying client of the ocrr service at ``url`` whose log signs with ``verifier_key``.

    ``witnesses`` (their cosignature verifier keys) and ``quorum`` (how many must cosign each
    checkpoint; 0: none required); ``state``: the file keeping the last verified checkpoint
    (None: memory only, forgotten at exit); ``token``: the service token, for corrections,
    entry proofs and the entry bundles an audit rehashes. ``quorum_check`` replaces the
    cosignature check (``ocrr.ledger.cosignature.check_quorum``) for witnesses of another kind.
    """

    def __init__(
        self,
        url: str,
        verifier_key: str,
        witnesses: Sequence[str] = (),
        quorum: int = 0,
        state: str | os.PathLike[str] | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        quorum_check: QuorumCheck | None = None,
        witness_wait: float = WITNESS_WAIT,
    ):
        self.verifier = CheckpointVerifier(verifier_key, witnesses, quorum, quorum_check)
        self.http = Transport(url, token, timeout)
        self.state: TrustedState | MemoryState = MemoryState() if state is None else TrustedState(state, self.verifier)
        self.witness_wait = witness_wait

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checkpoints ----------------------------------------------------------------------
    def held(self) -> Checkpoint | None:
        """The last checkpoint verified (from the state file), or None before the first."""
        with self.state.locked() as state:
            return state.load()

    def head(self) -> Checkpoint:
        """The service's latest checkpoint, verified and shown consistent with the one held
        (then held in its place)."""
        with self.state.locked() as state:
            checkpoint = self.verifier.verify(self.http.get_text("/checkpoint"))
            self._advance(state, checkpoint)
            return checkpoint

    def _advance(self, state: TrustedState | MemoryState, checkpoint: Checkpoint) -> None:
        """Hold ``checkpoint`` from now on, once it extends the checkpoint held (call under the lock)."""
        held = state.load()
        if held is not None:
            check_extends(held, checkpoint, self._consistency)
            if held.size == checkpoint.size:
                return  # the same tree: keep the note first seen (and its cosignatures)
        state.save(checkpoint)

    def _consistency(self, old: int, new: int) -> dict:
        return self.http.get_json("/proof/consistency", params={"from": old, "to": new})

    def _entry_proof(self, index: int, size: int) -> dict:
        return self.http.get_json(f"/proof/inclusion/{index}/entry", auth=True, params={"size": size})

    def _witnessed(self, size: int, answered_note: str) -> Checkpoint:
        """The service's cosigned checkpoint, once it covers ``size`` entries (witnesses cosign a
        new checkpoint a moment after the commit); QuorumNotMet after ``witness_wait`` seconds."""
        deadline = time.monotonic() + self.witness_wait
        while True:
            try:
                checkpoint = self.verifier.verify(self.http.get_text("/checkpoint"))
            except ServiceUnavailable as e:  # 503: no checkpoint has reached the witnesses' quorum yet
                if time.monotonic() >= deadline:
                    raise QuorumNotMet(
                        f"the correction was committed at size {size}, but after {self.witness_wait:g} s the "
                        f"service serves no witnessed checkpoint ({e})",
                        answered_note,
                    ) from None
                time.sleep(0.2)  # polling a remote service: no event to wait on
                continue
            if checkpoint.size >= size:
                return checkpoint
            if time.monotonic() >= deadline:
                raise QuorumNotMet(
                    f"the correction was committed at size {size}, but after {self.witness_wait:g} s the witnessed "
                    f"checkpoint is still at {checkpoint.size}",
                    checkpoint.note,
                )
            time.sleep(0.2)  # polling a remote service: no event to wait on

    # -- the service's operations -----------------------------------------------------------
    def predict(self, items) -> list[dict]:
        """The service's predictions for ``items`` (an (n, d) array of vectors, or a list of texts).
        Predictions carry no proof: nothing in them is checked."""
        return self.http.post_json("/predict", _items_body(items))["predictions"]

    def correct(self, items, labels: Sequence[str], texts: Sequence[str] | None = None) -> Correction:
        """Send corrections (``items``: vectors, or texts alone for the service to encode; ``texts``
        stored beside vectors) and check that the log now holds exactly them, under a checkpoint
        that extends the one held. Raises an ``IntegrityFailure`` subclass otherwise."""
        body = _items_body(items)
        labels = list(labels)
        if "texts" in body and texts is not None:
            raise OcrrError("texts were given twice: as the items and as texts=; pass vectors as the items")
        if texts is not None:
            body["texts"] = list(texts)
        body["labels"] = labels
        sent = _sent(body)
        with self.state.locked() as state:
            answer = self.http.post_json("/correct", body, auth=True)
            ids, note, proofs = _correct_answer(answer, len(sent))
            answered = self.verifier.verify(note, witnessed=False)
            held = state.load()
            if held is not None:  # a fork or a rollback shows in the log-signed head, before any witness
                check_extends(held, answered, self._consistency)
            trusted = answered
            if self.verifier.quorum:
                trusted = self._witnessed(answered.size, answered.note)
                check_extends(answered, trusted, self._consistency)
            self._advance(state, trusted)
            check_sent_entries(ids, sent, answered, proofs, trusted, self._entry_proof)
            return Correction(ids, trusted)

    def audit(self, checkpoint: Checkpoint | None = None, entries: bool | None = None) -> AuditReport:
        """Check the whole log from its tiles against ``checkpoint`` (default: the latest, as
        ``head()`` verifies it), rehashing every entry when ``entries`` (default: when a token
        was given). Never asks the proof endpoints."""
        checkpoint = self.head() if checkpoint is None else checkpoint
        use_entries = self.http.token is not None if entries is None else entries
        return audit_tiles(lambda path, auth: self.http.get_bytes(f"/{path}", auth=auth), checkpoint, use_entries)


def _items_body(items) -> dict:
    """``{"texts": [...]}`` for a list of strings, else ``{"vectors_b64": [...]}`` of float32
    vectors (exact bytes: what the client rebuilds its leaves from is what the service stores)."""
    if isinstance(items, str):
        raise OcrrError("pass a list of texts (or an array of vectors), not one string")
    if isinstance(items, (list, tuple)) and items and all(isinstance(t, str) for t in items):
        return {"texts": list(items)}
    vectors = np.asarray(items, dtype=np.float32)
    if vectors.ndim != 2 or not vectors.size:
        raise OcrrError(f"vectors must be an (n, d) array with n, d >= 1, got shape {vectors.shape}")
    return {"vectors_b64": [b64(v.astype("<f4").tobytes()) for v in vectors]}


def _sent(body: dict) -> list[Sent]:
    labels, texts = body["labels"], body.get("texts")
    vectors = [unb64(v) for v in body["vectors_b64"]] if "vectors_b64" in body else None
    n = len(vectors) if vectors is not None else len(texts or ())
    if len(labels) != n or (texts is not None and len(texts) != n):
        raise OcrrError(
            f"got {len(labels)} labels and {len(texts or ())} texts for {n} items; send one label (and text) per item"
        )
    return [
        Sent(labels[k], None if texts is None else texts[k], None if vectors is None else vectors[k]) for k in range(n)
    ]


def _correct_answer(answer: object, n: int) -> tuple[list[int], str, list[dict]]:
    """The ids, the checkpoint note and the proofs of a /correct answer, in shape."""
    if not isinstance(answer, dict):
        raise BadProof("the /correct answer is not a JSON object")
    ids, head, proofs = answer.get("ids"), answer.get("head"), answer.get("proofs")
    if not isinstance(ids, list) or len(ids) != n or any(type(i) is not int for i in ids):
        raise BadProof(f"the /correct answer does not name one entry id for each of the {n} corrections sent")
    if not isinstance(head, dict) or not isinstance(head.get("checkpoint"), str):
        raise OcrrError(
            "the service's answer carries no signed checkpoint: it signs nothing, so nothing can be verified; "
            "its operator must restart it with --key (see `ocrr ledger keygen`)"
        )
    if not isinstance(proofs, list):
        raise BadProof("the /correct answer carries no inclusion proofs")
    return ids, head["checkpoint"], proofs
