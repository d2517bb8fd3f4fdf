"""``first_mismatch``: entries held as flat columns rehashed against their stored chain hashes.
It finds nothing in an intact chain, over any range, and names the first entry whose label,
text, vector or stored hash differs from what was hashed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.ledger.chain import Chain
from ocrr.ledger.column_rehash import HeldColumns, first_mismatch

N, DIM = 40, 8


def _texts(i: int) -> str | None:
    return None if i % 5 == 0 else ("" if i % 7 == 0 else f"ütterance {i} ✓")


@pytest.fixture(scope="module")
def chain() -> Chain:
    rng = np.random.default_rng(7)
    c = Chain()
    for i in range(N):
        c.append(rng.normal(size=DIM).astype(np.float32), f"label {i % 3} é", _texts(i))
    return c


def _columns(chain: Chain, **edits) -> HeldColumns:
    """The chain's entries as flat columns, with ``edits`` replacing some of them."""
    labels, texts, hashes = chain.stored_columns()
    blob, ends, none = texts.parts()
    parts = {
        "size": len(chain),
        "rows": np.array(chain.vectors, dtype="<f4"),
        "label_names": labels.names,
        "label_codes": labels.codes().tobytes(),
        "text_blob": blob,
        "text_ends": ends.tobytes(),
        "text_none": none,
        "hashes": hashes.to_bytes(),
    }
    parts.update(edits)
    return HeldColumns(**parts)


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(0, N), span=st.integers(0, N + 3))
def test_an_intact_chain_has_no_mismatch_over_any_range(chain, lo, span):
    assert first_mismatch(_columns(chain), lo, lo + span) is None


def _edited(chain: Chain, field: str, at: int) -> HeldColumns:
    cols = _columns(chain)
    if field == "vector":
        rows = cols.rows.copy()
        rows[at, 3] = np.nextafter(rows[at, 3], np.float32(np.inf))  # the smallest change a float32 allows
        return _columns(chain, rows=rows)
    if field == "label":
        codes = np.frombuffer(cols.label_codes, np.int32).copy()
        codes[at] = (codes[at] + 1) % len(cols.label_names)
        return _columns(chain, label_codes=codes.tobytes())
    if field == "text":
        ends = np.frombuffer(cols.text_ends, np.int64)
        end = int(ends[at])
        blob = bytearray(cols.text_blob)
        blob[end - 1] ^= 1  # the last byte of entry ``at``'s text
        return _columns(chain, text_blob=bytes(blob))
    if field == "no text":
        none = bytearray(cols.text_none)
        none[at] = 1  # its text read as absent
        return _columns(chain, text_none=bytes(none))
    hashes = bytearray(cols.hashes)
    hashes[32 * at] ^= 0x80
    return _columns(chain, hashes=bytes(hashes))


@pytest.mark.parametrize("field", ["vector", "label", "text", "no text", "hash"])
@pytest.mark.parametrize("at", [1, 17, N - 1])
def test_the_first_edited_entry_is_named_and_ranges_before_it_stay_clean(chain, field, at):
    at = at if field not in ("text", "no text") else next(i for i in range(at, N) if _texts(i))  # one with text
    cols = _edited(chain, field, at)
    assert first_mismatch(cols, 0, N) == at
    assert first_mismatch(cols, at, at + 1) == at
    assert first_mismatch(cols, 0, at) is None  # what precedes it still hashes to what is stored
    if field != "hash":  # (a changed stored hash is also the next entry's link: found there)
        assert first_mismatch(cols, at + 1, N) is None


def test_a_range_starting_after_a_changed_hash_finds_the_entry_that_links_to_it(chain):
    cols = _edited(chain, "hash", 10)
    assert first_mismatch(cols, 11, N) == 11
