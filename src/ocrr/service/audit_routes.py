"""The read endpoints an auditor needs to check the log with their own tools.

* ``GET /checkpoint``: the signed C2SP checkpoint (c2sp.org/tlog-checkpoint) of the log as it
  is now, ``text/plain``. With witnesses (``ocrr serve --witness``), the latest checkpoint a
  quorum of them cosigned instead, their cosignature lines attached (``service/witnessing.py``):
  it may be older than ``/head``, and is 503 until a first checkpoint reaches the quorum. With
  ``GET /tile/...`` below, the service is a C2SP tlog-tiles log
  (c2sp.org/tlog-tiles) that Go's ``golang.org/x/mod/sumdb/note`` and ``sumdb/tlog``, or any
  other tiles client, can audit.
* ``GET /tile/<L>/<N>[.p/<W>]``: hash tiles (``ocrr.ledger.tiles``). Full tiles never change
  (``Cache-Control: public, max-age=31536000, immutable``); partial ones are cached briefly.
  ``GET /tile/entries/<N>[.p/<W>]``: entry bundles, the bytes each leaf hash covers; they
  hold users' texts, so they need the service token.
* ``GET /verifier-key``: the note verifier key (``<name>+<key id>+<key>``) the service signs
  checkpoints with; 404 when it signs nothing.
* ``GET /proof/inclusion/<index>/entry``: an inclusion proof (as ``/proof/inclusion/<index>``)
  together with the entry the leaf covers, so that a client can recompute the leaf itself;
  it holds the entry's text, so it needs the token (the token that sent the correction).

Like the other routes, these answer 503 once the service has found its file damaged. Entries
leave only checked against what the service holds (``service/served.py``): a row edited or
removed in storage makes the service fail closed, and the request gets that 503.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel, Field

from ocrr.errors import LedgerIntegrityError, OcrrError
from ocrr.ledger.proofs import b64, entry_fields
from ocrr.ledger.store import LedgerStore
from ocrr.ledger.tiles import TILE_WIDTH, Tile, entry_bundle, parse_tile_path, tile_bytes, tile_width
from ocrr.service.schemas import error_responses
from ocrr.service.served import served_entries, served_inclusion_proof
from ocrr.service.state import ServiceState, failure_report

FULL_TILE_CACHE = "public, max-age=31536000, immutable"
PARTIAL_TILE_CACHE = "public, max-age=60"  # the same bytes forever too, but soon replaced by a wider tile
CHECKPOINT_CACHE = "no-cache"  # changes with every commit
_TEXT = "text/plain; charset=utf-8"
_OCTETS = "application/octet-stream"


class EntryOut(BaseModel):
    """One ledger entry: the fields, and ``bytes``, the exact bytes its Merkle leaf hash covers."""

    id: int
    label: str
    text: str | None
    vector: str = Field(description="base64 of the vector's little-endian float32 bytes")
    prev_hash: str = Field(
        description=(
            "base64 of the previous entry's chain hash (for entry 0: the genesis value, "
            "SHA-256 of b'ocrr-ledger-genesis-v1')"
        )
    )
    bytes: str = Field(
        description=(
            "base64 of the canonical entry bytes, ocrr.ledger.verify.entry_bytes(id, label, text, vector, "
            "prev_hash): b'ocrr-ledger-entry-v1\\0' | id u64 LE | len(label) u32 LE | label UTF-8 | "
            "(0x00 if text is null, else 0x01 | len u32 LE | text UTF-8) | dim u32 LE | vector float32 LE | "
            "prev_hash (32 bytes). The leaf hash is SHA-256(0x00 || bytes); its SHA-256 is the chain hash."
        )
    )


class EntryProofOut(BaseModel):
    index: int
    size: int
    root: str
    leaf_hash: str
    proof: list[str]
    entry: EntryOut


class AuditRoutes:
    """The endpoints above over ``state`` (add them with ``add_to(app)``)."""

    def __init__(self, state: ServiceState):
        self.state = state
        self._checkpoint: tuple[int, bytes, str] | None = None  # (size, root, note) last signed

    def add_to(self, app: FastAPI) -> None:
        text = {"content": {"text/plain": {"schema": {"type": "string"}}}}
        octets = {"content": {_OCTETS: {"schema": {"type": "string", "format": "binary"}}}}
        app.add_api_route(
            "/checkpoint",
            self.checkpoint,
            response_class=PlainTextResponse,
            responses={
                200: {
                    **text,
                    "description": "the signed checkpoint note; with witnesses (ocrr serve --witness), the latest "
                    "one a quorum of them cosigned, with their cosignature lines (it may be older than /head; "
                    "/correct answers at once with the log-signed head, not cosigned)",
                },
                **error_responses(404, 503, by_ref=True),
            },
        )
        app.add_api_route(
            "/verifier-key",
            self.verifier_key,
            response_class=PlainTextResponse,
            responses={200: {**text, "description": "the note verifier key"}, **error_responses(404, by_ref=True)},
        )
        app.add_api_route(
            "/tile/{level}/{index:path}",
            self.tile,
            response_class=Response,
            responses={
                200: {**octets, "description": "the tile's hashes (32 bytes each) or entry bundle"},
                **error_responses(401, 404, 503, by_ref=True),
            },
        )
        app.add_api_route(
            "/proof/inclusion/{index}/entry",
            self.inclusion_with_entry,
            response_model=EntryProofOut,
            responses=error_responses(401, 404, 422, 503),
        )

    # -- helpers ----------------------------------------------------------------------
    def _require_intact(self) -> None:
        if self.state.damage is not None:
            raise HTTPException(503, self.state.damage_reason())

    def _ledger(self) -> LedgerStore:
        """The ledger with what every worker committed taken in (fail closed if it does not chain on)."""
        self._require_intact()
        led = self.state.substrate.ledger
        try:
            led.refresh()
        except OcrrError as e:
            self.state.fail(failure_report(e, len(led)))
            self._require_intact()
        return led

    def _require_token(self, request: Request, what: str) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.state.token.encode())
        if not ok:
            raise HTTPException(
                401,
                f"{what} holds users' texts and needs the service token: send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    # -- the endpoints ----------------------------------------------------------------
    def checkpoint(self) -> Response:
        """The signed C2SP checkpoint of the log now: ``<origin>\\n<size>\\n<root b64>\\n\\n— <origin>
        <signature>\\n``, checked with the key from ``/verifier-key``."""
        signer = self.state.signer
        if signer is None:
            raise HTTPException(
                404, "this service signs no checkpoints: restart it with --key (create one with `ocrr ledger keygen`)"
            )
        led = self._ledger()
        if self.state.witnessed is not None:
            return self._witnessed_checkpoint(led)
        with led.lock.read():
            size = len(led)
            root = led.root(size)
        got = self._checkpoint
        if got is None or got[0] != size or got[1] != root:
            self._require_intact()  # nothing is signed over a damaged file
            try:  # nor a root that does not extend what the key signed before
                got = self._checkpoint = (size, root, signer.checkpoint(size, root, led))
            except LedgerIntegrityError as e:
                self.state.fail({"ok": False, "size": size, "first_bad": None, "reason": str(e)})
                self._require_intact()
                raise
        return Response(got[2], media_type=_TEXT, headers={"Cache-Control": CHECKPOINT_CACHE})

    def _witnessed_checkpoint(self, led: LedgerStore) -> Response:
        """The witnessed head (verified on read: the log's signature, the quorum, and that the
        ledger held extends it), or 503 saying what is missing."""
        witnessed = self.state.witnessed
        assert witnessed is not None
        try:
            head, why = witnessed.current(led)
        except LedgerIntegrityError as e:
            self.state.fail({"ok": False, "size": len(led), "first_bad": None, "reason": str(e)})
            self._require_intact()
            raise
        if head is None:
            sending = self.state.witnessing
            problems = sending.problems() if sending is not None else ""
            urls = ", ".join(url for url, _ in self.state.witnesses)
            raise HTTPException(
                503,
                f"{why} ({urls}){': ' + problems if problems else ''}. /checkpoint serves only a checkpoint cosigned "
                "by the quorum; /head and /correct's answers are signed by the log alone meanwhile",
            )
        return Response(head.note, media_type=_TEXT, headers={"Cache-Control": CHECKPOINT_CACHE})

    def verifier_key(self) -> Response:
        """The note verifier key of the service's signing key (``<origin>+<key id hex>+<base64
        of 0x01 || Ed25519 public key>``), what ``note.NewVerifier`` and ``ocrr ledger`` take."""
        signer = self.state.signer
        if signer is None:
            raise HTTPException(
                404, "this service has no signing key: restart it with --key (create one with `ocrr ledger keygen`)"
            )
        return Response(signer.vkey + "\n", media_type=_TEXT, headers={"Cache-Control": "no-cache"})

    def tile(
        self,
        request: Request,
        level: Annotated[str, Path(description="0..63, or 'entries' for entry bundles")],
        index: Annotated[str, Path(description="N as x001/x234/067, then .p/<W> for a partial tile")],
    ) -> Response:
        """A C2SP tlog-tiles tile (tile height 8): ``tile/<L>/<N>[.p/<W>]`` holds the hashes
        of the tree's nodes at height 8 L numbered N·256 .. N·256+W-1; ``tile/entries/<N>[.p/<W>]``
        the entries' bytes (as /proof/inclusion/<index>/entry's ``entry.bytes``), each after its
        length as a big-endian uint16 (needs the token). A partial tile of any width up to what
        the log holds is served, so that clients holding an older checkpoint can read theirs."""
        try:
            tile = parse_tile_path(f"{level}/{index}")
        except OcrrError as e:
            raise HTTPException(404, str(e)) from None
        if tile.level is None:
            self._require_token(request, "an entry bundle")
        led = self._ledger()
        with led.lock.read():
            size = len(led)
            if tile.level is None:
                have = tile_width(size, 0, tile.index)
                if have < tile.width:
                    raise HTTPException(404, _no_tile(size, tile, have))
            else:
                try:
                    body = tile_bytes(led.tree, size, tile)
                except LookupError as e:
                    raise HTTPException(404, str(e)) from None
        if tile.level is None:
            lo = tile.index * TILE_WIDTH
            entries = served_entries(self.state, led, lo, lo + tile.width)  # a 503 unless every one matches
            try:
                body = entry_bundle(e.bytes for e in entries)
            except OcrrError as e:
                raise HTTPException(404, str(e)) from None
        cache = PARTIAL_TILE_CACHE if tile.partial else FULL_TILE_CACHE
        return Response(body, media_type=_OCTETS, headers={"Cache-Control": cache})

    def inclusion_with_entry(
        self,
        request: Request,
        index: Annotated[int, Path(ge=0)],
        size: Annotated[int | None, Query(ge=1)] = None,
    ) -> dict:
        """The inclusion proof of entry ``index`` in the log of ``size`` entries (default: all),
        as /proof/inclusion/<index> answers it, with the entry itself: its fields and
        ``entry.bytes``, the bytes the leaf hash covers (leaf = SHA-256(0x00 || bytes)), so a
        client can rebuild its own leaf from what it sent and check the proof against a
        checkpoint. Needs the service token (the entry holds the user's text)."""
        self._require_token(request, "an entry")
        led = self._ledger()
        with led.lock.read():
            proof = served_inclusion_proof(led, index, size)
        ((i, label, text, vector, prev, raw),) = served_entries(self.state, led, index, index + 1)
        entry = {**entry_fields(i, label, text, vector, prev), "bytes": b64(raw)}
        return {**proof.to_dict(), "entry": entry}


def _no_tile(size: int, tile: Tile, have: int) -> str:
    if have == 0:
        return f"{tile.path} does not exist yet: the log holds {size} entries"
    return (
        f"{tile.path} does not exist yet: at {size} entries it holds {have} of {TILE_WIDTH} entries; "
        f"ask for the partial tile .p/{have}"
    )
