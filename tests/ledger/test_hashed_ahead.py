"""Entries hashed ahead on a guess are taken only where the guess hashed exactly what the
commit writes: the rows equal those hashed at the commit, whatever the guess was."""

# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
from __future__ import annotations

import hashlib
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.ledger import hashed_ahead
from ocrr.ledger.group_commit import Pending
from ocrr.ledger.hashed_ahead import hash_items, take
from ocrr.ledger.verify import entry_bytes, leaf_hash

DIM = 4


def _items(sizes: list[int], seed: int) -> list[Pending]:
    rng = np.random.default_rng(seed)
    out = []
    for k, m in enumerate(sizes):
        vecs = rng.standard_normal((m, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # a durable ledger takes unit rows only
        texts = [None if (k + j) % 3 == 0 else f"t{k}-{j}" for j in range(m)]
        out.append(Pending(vecs, [f"l{(k + j) % 2}" for j in range(m)], texts))
    return out


def test_hash_items_gives_each_entry_its_chain_hash_and_leaf():
    items = _items([2, 1], seed=0)
    hashed = hash_items(items, 7, b"\x05" * 32)
    prev = b"\x05" * 32
    for n, (p, j) in enumerate([(items[0], 0), (items[0], 1), (items[1], 0)], 7):
        pre = entry_bytes(n, p.labels[j], p.texts[j], p.vecs[j].astype("<f4").tobytes(), prev)
        assert hashed.leaves[n - 7] == leaf_hash(pre) and hashed.digests[n - 7] == hashlib.sha256(pre).digest()
        assert hashed.labels[n - 7] == p.labels[j].encode()
        assert hashed.texts[n - 7] == (None if p.texts[j] is None else p.texts[j].encode())
        prev = hashed.digests[n - 7]
    assert hashed.vectors == [p.vecs.astype("<f4").tobytes() for p in items]
    assert hashed.chain() == b"\x05" * 32 + b"".join(hashed.digests) and hashed.prev == b"\x05" * 32


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=5),
    guessed=st.lists(st.integers(0, 4), max_size=5),  # which items the guess hashed, in its order
    start_off=st.sampled_from([0, 0, 1]),  # the guess made from the right id, or not
    prev_off=st.sampled_from([0, 0, 1]),  # from the right previous hash, or not
    seed=st.integers(0, 3),
)
def test_a_guess_taken_gives_the_rows_hashing_now_would(sizes, guessed, start_off, prev_off, seed):
    items = _items(sizes, seed)
    start, prev = 10, bytes([seed]) * 32
    guess_items = [items[k] for k in guessed if k < len(items)]
    guess = hash_items(guess_items, start + start_off, bytes([seed + prev_off]) * 32) if guess_items else None
    taken = take(guess, items, start, prev)
    now = hash_items(items, start, prev)
    assert (taken.start, taken.prev, taken.items) == (now.start, now.prev, now.items)
    assert taken == now  # every column: vectors, labels, texts, leaves, chain hashes


def test_a_guess_for_more_items_than_are_written_gives_only_theirs():
    items = _items([2, 2, 1], seed=1)
    guess = hash_items(items, 0, b"\0" * 32)
    taken = take(guess, items[:2], 0, b"\0" * 32)
    assert taken == hash_items(items[:2], 0, b"\0" * 32) and len(taken.digests) == 4


def test_a_guess_that_fails_fails_no_commit_on_postgresql(pg_url, monkeypatch):
    """The committer hashes ahead while the server works; a failure there (a bug) drops the
    guess, and the commit hashes its own items: every append lands, the chain verifies."""
    from ocrr.ledger.postgres.store import PostgresLedger

    real_take = hashed_ahead.take
    raised = []

    def take_failing_ahead(guess, items, start, prev):
        if sys._getframe(1).f_code.co_name == "_hash_ahead":
            raised.append(start)
            raise RuntimeError("a bug while guessing")
        return real_take(guess, items, start, prev)

    with PostgresLedger.open(pg_url, gather=0) as led:
        led.extend(np.eye(DIM, dtype=np.float32), list("abcd"))  # fixes the dimension: guesses start
        monkeypatch.setattr(hashed_ahead, "take", take_failing_ahead)
        for k in range(3):
            assert led.extend(_items([2], seed=k)[0].vecs, ["x", "y"]) == range(4 + 2 * k, 6 + 2 * k)
        assert len(led) == 10 and led.verify().ok
    assert raised  # the guesses did fail


def test_guesses_taken_on_postgresql_give_the_chain_hashing_at_the_commit_gives(pg_url):
    """Appends from several threads at once, so that groups are hashed ahead while others are
    written: the stored chain is the one appending the same entries one by one gives."""
    import threading

    from ocrr.ledger.chain import Chain
    from ocrr.ledger.postgres.store import PostgresLedger

    items = _items([3] * 24, seed=5)
    with PostgresLedger.open(pg_url, gather=0) as led:
        led.extend(np.eye(DIM, dtype=np.float32), list("abcd"))
        done = []

        def client(k: int) -> None:
            for p in items[k::4]:
                ev = threading.Event()
                led.submit(
                    p.vecs, p.labels, p.texts, lambda ids, err, p=p, ev=ev: (done.append((ids, err, p)), ev.set())
                )
                ev.wait()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(err is None for _, err, _ in done) and len(led) == 4 + 72
        report = led.verify()
        assert report.ok
        again = Chain(DIM)
        again.extend(np.eye(DIM, dtype=np.float32), list("abcd"))
        for _, _, p in sorted(done, key=lambda d: d[0].start):
            again.extend(p.vecs, p.labels, p.texts)
        assert again.head == led.chain_head
