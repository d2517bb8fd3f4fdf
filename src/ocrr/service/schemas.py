"""The request and response bodies of the service, and how a request's vectors are read.

The hot endpoints parse their body with pydantic's own JSON parser (``parse``) and answer
with JSON bytes made by pydantic-core; the response models below are what the OpenAPI
schema shows for them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, ClassVar, TypeVar

import numpy as np
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, TypeAdapter, ValidationError
from pydantic.config import JsonDict
from pydantic_core import to_json as _pydantic_json

from ocrr.errors import OcrrError
from ocrr.ledger.labels import check_new_label
from ocrr.service.limits import MAX_B64, MAX_BATCH, MAX_DIM, MAX_TEXT

_F32_MAX = float(np.finfo(np.float32).max)
_F4LE = np.dtype("<f4")
_Model = TypeVar("_Model", bound=BaseModel)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
Label = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TEXT,
        description="a class name: not blank, no leading or trailing whitespace, no control characters",
    ),
]
# Strict: JSON numbers only (true and "1.5" are refused, not converted); integers are numbers.
# The schema also bounds them to float32's range (beyond it: a 400 naming the range).
Component = Annotated[StrictFloat, Field(json_schema_extra={"minimum": -_F32_MAX, "maximum": _F32_MAX})]
Vector = Annotated[list[Component], Field(min_length=1, max_length=MAX_DIM)]
# Padded base64 of a whole number of float32s (12 bytes are 16 characters; 4 more, 6 and "=="; 8 more,
# 11 and "="): documented only, so that a string that is not base64 gets the 400 that explains the form.
_PACKED = "^(?:[A-Za-z0-9+/]{16})*(?:[A-Za-z0-9+/]{6}==|[A-Za-z0-9+/]{11}=)?$"
PackedVector = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_B64,
        description="base64 of the vector's little-endian float32 bytes",
        json_schema_extra={"pattern": _PACKED},
    ),
]


def _given(*fields: str) -> JsonDict:
    """JSON Schema: each of ``fields`` is present and not null."""
    return {"required": list(fields), "properties": {f: {"type": "array"} for f in fields}}


# What the schema can say beyond the fields' types (the service checks the rest, answering a 400
# that names it: a vector's dimension, one text per vector, one label per item, an encoder for
# texts, a label's form: ``ocrr.ledger.labels``). A prediction takes one form of its items.
_ONE_FORM: JsonDict = {"oneOf": [_given("texts"), _given("vectors"), _given("vectors_b64")]}
# A correction may send texts beside its vectors (stored with them), in one vector form.
_ITEMS_FORM: JsonDict = {
    "anyOf": [_given("texts"), _given("vectors"), _given("vectors_b64")],
    "not": _given("vectors", "vectors_b64"),
}


class PredictRequest(_Strict):
    """Exactly one of ``texts`` (needs an encoder), ``vectors`` (lists of numbers) or
    ``vectors_b64`` (each vector as base64 of its little-endian float32 bytes: a quarter of
    the JSON's size, and no number parsing on either side)."""

    texts: Annotated[list[Text], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    vectors: Annotated[list[Vector], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    vectors_b64: Annotated[list[PackedVector], Field(min_length=1, max_length=MAX_BATCH)] | None = None

    model_config = ConfigDict(json_schema_extra=_ONE_FORM)
    # Whether texts may come beside vectors: a prediction answers from one or the other, so
    # both would leave one silently unused.
    texts_with_vectors: ClassVar[bool] = False

    def sent_vectors(self) -> np.ndarray | None:
        """The vectors sent, as (n, d) float32, checked (one length, finite, within float32's
        range); None when only texts came."""
        if self.vectors is None and self.vectors_b64 is None and self.texts is None:
            raise OcrrError(
                "send 'texts' (a list of strings), 'vectors' (a list of float lists) or "
                "'vectors_b64' (a list of base64 float32 vectors)"
            )
        if self.vectors is not None and self.vectors_b64 is not None:
            raise OcrrError("send 'vectors' or 'vectors_b64', not both")
        sent_both = self.texts is not None and (self.vectors is not None or self.vectors_b64 is not None)
        if sent_both and not self.texts_with_vectors:
            raise OcrrError(
                "send 'texts' or vectors ('vectors' or 'vectors_b64'), not both: a prediction is made from "
                "one of them; drop the texts to predict from the vectors, or the vectors to have the texts encoded"
            )
        if self.vectors_b64 is not None:
            vecs = _unpack(self.vectors_b64)  # float32 as sent: finite ones are within its range
        elif self.vectors is None:
            return None
        elif len({len(v) for v in self.vectors}) != 1:
            raise OcrrError("vectors have different lengths; every vector needs the ledger's dimension")
        else:
            vecs = np.asarray(self.vectors, np.float64)  # float32 only once in range (np.errstate is slow)
        if self.texts is not None and len(self.texts) != len(vecs):
            raise OcrrError(f"got {len(self.texts)} texts but {len(vecs)} vectors; send one per item")
        if not (np.isfinite(vecs).all() and (vecs.dtype == np.float32 or np.abs(vecs).max() <= _F32_MAX)):
            raise OcrrError(
                "a vector contains NaN, infinity or a value beyond float32's range (3.4e38); "
                "send finite float32 numbers"
            )
        return vecs.astype(np.float32, copy=False)


class CorrectRequest(PredictRequest):
    """The items (``texts``, or vectors in either form, or both: vectors are then stored
    with their texts) and one label each."""

    labels: Annotated[list[Label], Field(min_length=1, max_length=MAX_BATCH)]

    model_config = ConfigDict(json_schema_extra=_ITEMS_FORM)
    texts_with_vectors: ClassVar[bool] = True

    def check_labels(self) -> None:
        """Refuse, naming the first and the fix, a label the ledger would keep for good as a class
        of its own that looks like another (``ocrr.ledger.labels``)."""
        for i, label in enumerate(self.labels):
            check_new_label(i, label)


class NeighbourOut(BaseModel):
    id: int
    label: str
    similarity: float
    votes: bool


class PredictionOut(BaseModel):
    label: str | None
    neighbours: list[NeighbourOut]
    margin: float | None


class PredictResponse(BaseModel):
    predictions: list[PredictionOut]


class ProofOut(BaseModel):
    index: int
    size: int
    root: str
    leaf_hash: str
    proof: list[str]


class CorrectResponse(BaseModel):
    ids: list[int]
    head: dict
    proofs: list[ProofOut]


class ConsistencyOut(BaseModel):
    size1: int = Field(alias="from")
    size2: int = Field(alias="to")
    root_from: str
    root_to: str
    proof: list[str]


class ErrorOut(BaseModel):
    """Every error the service answers (4xx, and 503 once it fails closed): one message
    saying what is wrong and what to do."""

    detail: str


class HealthOut(BaseModel):
    """``/health``: ``ok`` (200) or ``unhealthy`` (503, naming the first bad entry). With the
    token, also the answering worker's slot, the number of workers and its process id."""

    model_config = ConfigDict(extra="allow")

    status: str
    entries: int | None = None
    first_bad: int | None = None
    reason: str | None = None


#: What each error status means, as the OpenAPI schema documents it.
ERROR_MEANINGS = {
    400: "The request is well formed but cannot be served as it is (the message names the fix).",
    401: "The service token is missing or wrong: send 'Authorization: Bearer <token>'.",
    404: "No such entry or tree size in the ledger.",
    405: "This path does not answer this method.",
    413: "The request body is over the service's limit.",
    422: "The request does not match the schema (the message names the field).",
    503: "The ledger file was found damaged: the service is read-only until an operator acts.",
}


def error_responses(*statuses: int, by_ref: bool = False) -> dict[int | str, dict]:
    """The OpenAPI ``responses`` of the error statuses a route answers, all ``ErrorOut`` as
    JSON. ``by_ref``: name the model by reference, for a route whose own answers are not JSON
    (FastAPI would document a ``model`` under the route's media type); other routes register it."""
    out: dict[int | str, dict] = {}
    for status in statuses:
        if by_ref:
            content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
            out[status] = {"description": ERROR_MEANINGS[status], "content": content}
        else:
            out[status] = {"model": ErrorOut, "description": ERROR_MEANINGS[status]}
        if status == 401:
            out[status]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}
    return out


async def parse(request: Request, model: type[_Model]) -> _Model:
    """The request body parsed by pydantic's own JSON parser: several times cheaper than
    FastAPI's json.loads-then-validate (docs/service.md, "How a request runs"). Errors go to
    the same 422 handler as FastAPI's own."""
    body = await request.body()
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False), body=body) from None


def body_doc(model: type[BaseModel]) -> dict:
    """The OpenAPI request body of an endpoint that parses its body with ``parse``."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def to_json(value: object, floats: bool = True) -> bytes:
    """What the service writes: strict JSON (RFC 8259), made by pydantic-core. Its answers hold no
    non-finite float (query norms are bounded and stored rows are unit vectors, so similarities
    are finite; margins are finite by the system's options), and one that appears anyway is an
    error, not ``Infinity`` or ``NaN``, which strict parsers refuse. The check costs a second
    pass only for an answer holding ``null`` (where a non-finite float could hide), and a search
    of the whole answer for it. ``floats`` False: ``value`` holds no float at all (ids, hashes,
    a head), so nothing can hide and the search is skipped: a /correct answer is mostly
    base64, which that search crawls through."""
    if not floats:
        return _pydantic_json(value)
    out = _pydantic_json(value, inf_nan_mode="null")
    if b"null" in out and out != _pydantic_json(value, inf_nan_mode="strings"):
        raise ValueError("an answer holds a non-finite number, which JSON cannot carry")
    return out


def _base64_decoder() -> TypeAdapter | None:
    """pydantic-core's base64 decoder (several times faster than ``binascii``), or None where
    this pydantic has none (it would take the text as bytes instead: checked on a sample)."""
    try:
        adapter: TypeAdapter = TypeAdapter(bytes, config=ConfigDict(val_json_bytes="base64"))
        return adapter if adapter.validate_strings("AAEC") == b"\x00\x01\x02" else None
    except Exception:  # noqa: BLE001 - an older pydantic: binascii decodes
        return None


_BASE64 = _base64_decoder()


def _decode_unpadded(joined: str) -> bytes | None:
    """Standard base64 without padding (``len(joined) % 4 == 0``, no "=") as bytes, or None
    when it is not. pydantic-core decodes it when it holds no "-" or "_": it also takes the
    URL-safe alphabet, which ``binascii`` (strict) refuses, and nothing else that binascii
    refuses in a whole number of unpadded quads; binascii decodes the rest."""
    if _BASE64 is not None and "-" not in joined and "_" not in joined:
        try:
            return _BASE64.validate_strings(joined)
        except ValidationError:
            return None  # not base64: the per-vector decode names the error
    try:
        return binascii.a2b_base64(joined, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def _unpack(packed: list[str]) -> np.ndarray:
    """``vectors_b64`` -> (n, d) float32 (checked for finite values afterwards)."""
    joined = "".join(packed)
    width = len(packed[0]) if packed else 0
    if width and not width % 4 and len(joined) == width * len(packed) and "=" not in joined:
        # Strings of one length without padding decode, joined, to the rows one after another:
        # one decode for the request instead of one per vector (the slow part of a big /correct).
        raw = _decode_unpadded(joined)
        if raw is not None and not (width // 4 * 3) % 4:
            return np.frombuffer(raw, _F4LE).reshape(len(packed), -1).astype(np.float32)
    try:
        raws = [base64.b64decode(v, validate=True) for v in packed]
    except (binascii.Error, ValueError):
        raise OcrrError(
            "vectors_b64 holds a string that is not base64; send base64 (RFC 4648, with padding) "
            "of each vector's little-endian float32 bytes"
        ) from None
    if len({len(r) for r in raws}) != 1 or not raws[0] or len(raws[0]) % 4:
        raise OcrrError(
            "vectors_b64: every vector must decode to the same whole number of float32 values "
            "(4 bytes each), at least one"
        )
    return np.frombuffer(b"".join(raws), _F4LE).reshape(len(raws), -1).astype(np.float32)
