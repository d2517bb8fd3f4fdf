"""The compact ledger columns read, append, copy and pickle exactly as plain lists do."""

from __future__ import annotations

import hashlib
import pickle
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.ledger import Ledger
from ocrr.ledger.chain import GENESIS, Chain
from ocrr.ledger.columns import (
    HashColumn,
    LabelColumn,
    PrefixedBytes,
    TextColumn,
    hash_column,
    label_column,
    text_column,
)

hashes_st = st.lists(st.binary(min_size=32, max_size=32), max_size=20)
labels_st = st.lists(st.sampled_from(["a", "b", "ü", "x" * 40, "\ud800"]) | st.text(min_size=1), max_size=20)
texts_st = st.lists(st.none() | st.text(), max_size=20)  # st.text() draws lone surrogates too


def _with_prefix(kind: str, first: list) -> HashColumn | LabelColumn | TextColumn:
    """A column whose values ``first`` lie in a read-only prefix, as a worker's shared memory holds them."""
    if kind == "hash":
        return HashColumn(prefix=memoryview(b"".join(first)).toreadonly())
    if kind == "label":
        made = LabelColumn(first)
        return LabelColumn(names=made.names, prefix_codes=memoryview(made.codes().tobytes()).toreadonly())
    blob, ends, none = TextColumn(first).parts()
    return TextColumn(prefix=(memoryview(blob).toreadonly(), ends.tobytes(), none))


def _check_same(column, values: list) -> None:
    assert len(column) == len(values)
    assert list(column) == values
    assert [column[i] for i in range(-len(values), len(values))] == values + values if values else True
    for i in range(len(values)):
        assert column[i] == values[i] and type(column[i]) is type(values[i])
    assert column[1:-1] == values[1:-1] and column[::2] == values[::2] and column[5:2] == []
    for bad in (len(values), -len(values) - 1):
        with pytest.raises(IndexError):
            column[bad]
    assert column == values
    assert list(pickle.loads(pickle.dumps(column))) == values


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["hash", "label", "text"]), data=st.data())
def test_a_column_reads_and_appends_as_a_list(kind: str, data) -> None:
    values = {"hash": hashes_st, "label": labels_st, "text": texts_st}[kind]
    first, more, last = data.draw(values), data.draw(values), data.draw(values)
    column = (
        _with_prefix(kind, first)
        if data.draw(st.booleans())
        else {"hash": HashColumn, "label": LabelColumn, "text": TextColumn}[kind](first)
    )
    expected = list(first)
    _check_same(column, expected)
    for value in more:
        column.append(value)
        expected.append(value)
    twin = column.copy()
    column.extend(last)
    expected.extend(last)
    _check_same(column, expected)
    _check_same(twin, expected[: len(expected) - len(last)])  # a copy appends on its own


def test_hash_column_index_and_bytes() -> None:
    hs = [hashlib.sha256(bytes([i])).digest() for i in range(5)]
    column = _with_prefix("hash", hs[:3])
    column.extend(hs[3:])
    assert [column.index(h) for h in hs] == [0, 1, 2, 3, 4]
    assert column.to_bytes() == b"".join(hs)
    off_grid = hs[0][1:] + hs[1][:1]  # the bytes across two hashes: not a hash of the column
    with pytest.raises(ValueError):
        column.index(off_grid)
    with pytest.raises(ValueError):
        column.append(b"short")


def test_values_no_column_holds_stay_a_list() -> None:
    """A damaged ledger's stored values (not 32 bytes, not strings) are kept as they are."""
    assert hash_column([b"x" * 31]) == [b"x" * 31] and isinstance(hash_column([b"x" * 31]), list)
    assert isinstance(label_column(["a", 5]), list) and isinstance(text_column(["a", b"b"]), list)
    assert isinstance(label_column(["a"]), LabelColumn) and isinstance(text_column([None]), TextColumn)


def _entries(led: Chain) -> list[tuple]:
    return [(e.id, e.label, e.text, e.vector.tobytes(), e.prev_hash, e.hash) for e in led]


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.none() | st.text(max_size=5)), min_size=1, max_size=12)
)
def test_a_ledger_reads_back_as_its_entries_with_implied_ids_and_links(rows) -> None:
    rng = np.random.default_rng(len(rows))
    led = Ledger(dim=3)
    vecs = rng.standard_normal((len(rows), 3)).astype(np.float32)
    half = len(rows) // 2
    for v, (label, text) in zip(vecs[:half], rows[:half]):
        led.append(v, label, text)
    led.extend(vecs[half:], [r[0] for r in rows[half:]], [r[1] for r in rows[half:]])
    got = _entries(led)
    assert [g[0] for g in got] == list(range(len(rows)))
    assert [g[4] for g in got] == [GENESIS, *[g[5] for g in got[:-1]]]
    assert [(g[1], g[2]) for g in got] == [tuple(r) for r in rows]
    assert led._ids is None and led._prev is None  # implied, not stored
    assert led.verify().ok
    back = pickle.loads(pickle.dumps(led))
    assert _entries(back) == got and back.verify(led.head).ok
    # The stored columns of an intact ledger, given explicitly, are taken as implied.
    rebuilt = Ledger._from_stored(
        3, [g[0] for g in got], [g[1] for g in got], [g[2] for g in got], vecs, [g[4] for g in got], [g[5] for g in got]
    )
    assert rebuilt._ids is None and rebuilt._prev is None and _entries(rebuilt) == got


@settings(max_examples=60, deadline=None)
@given(
    first=st.binary(max_size=200),
    more=st.lists(st.binary(max_size=40), max_size=5),
    cut=st.integers(0, 300),
    cuts=st.lists(st.tuples(st.integers(-300, 300), st.integers(-300, 300) | st.none())),
)
def test_prefixed_bytes_read_grow_and_cut_as_a_bytearray(first, more, cut, cuts) -> None:
    got, want = PrefixedBytes(memoryview(first).toreadonly()), bytearray(first)
    for chunk in more:
        got += chunk
        want += chunk
    for lo, hi in cuts:
        assert got[lo:hi] == bytes(want[lo:hi]) and type(got[lo:hi]) is bytes
    assert got == want and want == got and bytes(got) == bytes(want) and len(got) == len(want)
    twin = pickle.loads(pickle.dumps(got))
    assert twin == want and isinstance(twin, bytearray)
    del got[cut:]
    del want[cut:]
    assert got == want
    got += b"tail"
    want += b"tail"
    assert got == want and got[-6:] == bytes(want[-6:])


@settings(max_examples=80, deadline=None)
@given(
    first=labels_st,
    more=labels_st,
    known=st.lists(st.sampled_from(["a", "b", "c", "ü"]), max_size=4),
    prefixed=st.booleans(),
    replace=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["a", "z", "ü"])), max_size=3),
    grow=st.booleans(),
)
def test_a_label_space_encodes_a_column_as_its_labels_one_by_one(first, more, known, prefixed, replace, grow) -> None:
    """The column path (one step per distinct label) numbers labels, grows the space and names
    an unknown label exactly as encoding the same labels as a list does."""
    from ocrr.errors import OcrrError
    from ocrr.systems.labels import LabelSpace

    column = _with_prefix("label", first) if prefixed else LabelColumn(first)
    column.extend(more)
    for at, label in replace:  # a replaced own label can leave a name no entry holds
        if len(first) <= at < len(column):
            column[at] = label
    values = list(column)
    by_list, by_column = LabelSpace(known), LabelSpace(known)
    try:
        expected = by_list.encode(values, grow=grow)
    except OcrrError as e:
        with pytest.raises(OcrrError, match=re.escape(str(e))):
            by_column.encode(column, grow=grow)
        return
    got = by_column.encode(column, grow=grow)
    assert got.dtype == expected.dtype == np.int64 and got.tolist() == expected.tolist()
    assert by_column.names == by_list.names and by_column.ranks.tolist() == by_list.ranks.tolist()


def test_first_seen_looks_past_the_first_block_for_labels_seen_late() -> None:
    from ocrr.ledger import columns

    labels = ["x"] * (columns._FIRST_SEEN_BLOCK + 5) + ["y", "x", "z"]
    column = LabelColumn(["z", "y"])  # names in another order than the entries' first occurrences
    column[0], column[1] = "x", "x"
    column.extend(labels[2:])
    seen, place = column.first_seen()
    assert seen == ["x", "y", "z"]
    assert place.tolist() == [{"x": 0, "y": 1, "z": 2}[v] for v in labels]


@pytest.mark.parametrize("split", [0, 3, 70_000, 200_005])
def test_first_seen_skips_the_blocks_with_no_new_label_and_finds_each_where_it_first_occurs(split) -> None:
    """Labels first seen in the first block, in a later one, and at the very end (a class the
    corrections brought), with blocks holding no new label between them; the column's first
    ``split`` entries its read-only prefix."""
    from ocrr.ledger import columns

    block = columns._FIRST_SEEN_BLOCK
    rng = np.random.default_rng(5)
    labels = [f"old{c}" for c in rng.integers(4, size=3 * block + 7)]
    labels[block + 11] = "later"
    labels[2 * block + 3 :: 5000] = ["later"] * len(labels[2 * block + 3 :: 5000])
    labels.append("last")
    whole = LabelColumn(labels)
    column = LabelColumn(names=whole.names, prefix_codes=memoryview(whole.codes()[:split]).cast("B"))
    column.extend(labels[split:])
    seen, place = column.first_seen()
    order = list(dict.fromkeys(labels))
    assert seen == order
    assert place.tolist() == [order.index(v) for v in labels]


@settings(max_examples=60, deadline=None)
@given(first=texts_st, block=texts_st.filter(lambda t: all(x is None or "\0" not in x for x in t)))
def test_texts_appended_as_a_blob_read_as_appended_one_by_one(first, block) -> None:
    """``extend_blob`` (what the quick open appends: the texts' bytes joined, their ends, the
    None mask) gives the column ``extend`` gives."""
    column, want = TextColumn(first), TextColumn(first)
    encoded = [b"" if t is None else t.encode("utf-8", "surrogatepass") for t in block]
    ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    column.extend_blob(b"".join(encoded), ends, bytes(t is None for t in block))
    want.extend(block)
    _check_same(column, list(want))
    assert column.parts() == want.parts()
