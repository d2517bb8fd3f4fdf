"""The exact re-rank's scoring: blocked over queries (bounded memory), from RAM or from a file,
always the same bits as scoring everything at once from the array."""

from __future__ import annotations

import os

import numpy as np

from ocrr.index.file_rows import FileRows
from ocrr.index.rerank import rerank, score_rows


def _data(n: int = 3000, dim: int = 32, n_q: int = 37, depth: int = 50):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = rng.normal(size=(n_q, dim)).astype(np.float32)
    rows = rng.integers(0, n, size=(n_q, depth))
    rows[::5, -3:] = -1  # missing candidates
    rows[1, :10] = rows[1, 10:20]  # repeated rows within a query
    return x, q, rows


def test_blocked_scoring_equals_one_block():
    x, q, rows = _data()
    whole = score_rows(q, rows, x, None, block_bytes=1 << 40)
    row_bytes = rows.shape[1] * x.shape[1] * 4
    for block in (1, row_bytes, 3 * row_bytes + 1, 10 * row_bytes):
        got = score_rows(q, rows, x, None, block_bytes=block)
        assert got[0].tobytes() == whole[0].tobytes() and np.array_equal(got[1], whole[1])
    # and they are the plain dot products
    ok = rows >= 0
    plain = np.einsum("ndk,nk->nd", x[np.where(ok, rows, 0)], q)
    assert np.array_equal(whole[0][ok], plain[ok]) and np.all(whole[0][~ok] == -np.inf)
    assert np.all(whole[1][~ok] == -1) and np.array_equal(whole[1][ok], rows[ok])


def test_one_query_scored_alone_equals_its_row_of_the_blocks(tmp_path):
    """A served predict's single query skips the blocks' sorting of its candidates: the same
    bits, with missing and repeated candidates, from an array and from a memory map."""
    x, q, rows = _data()
    path = tmp_path / "rows.f32"
    path.write_bytes(x.tobytes())
    mapped = np.memmap(path, np.float32, "r", shape=x.shape)
    row_ids = np.arange(len(x), dtype=np.int64)[::-1].copy()
    for ids in (None, row_ids):
        blocks = score_rows(q, rows, x, ids)
        together = rerank(q, rows, x, ids, 7)
        for i in range(len(q)):
            for matrix in (x, mapped):
                alone = score_rows(q[i : i + 1], rows[i : i + 1], matrix, ids)
                assert alone[0].tobytes() == blocks[0][i : i + 1].tobytes()
                assert np.array_equal(alone[1], blocks[1][i : i + 1])
                best = rerank(q[i : i + 1], rows[i : i + 1], matrix, ids, 7)
                assert best[0].tobytes() == together[0][i : i + 1].tobytes()
                assert np.array_equal(best[1], together[1][i : i + 1])


def test_rerank_from_the_file_equals_rerank_from_ram(tmp_path):
    x, q, rows = _data()
    path = tmp_path / "rows.f32"
    path.write_bytes(x.astype("<f4").tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        on_disk = FileRows(fd, len(x), x.shape[1])
        row_ids = np.arange(len(x), dtype=np.int64)[::-1].copy()  # owned mode: row -> id
        for ids in (None, row_ids):
            a = rerank(q, rows, x, ids, 5)
            b = rerank(q, rows, on_disk, ids, 5)
            c = score_rows(q, rows, on_disk, ids, block_bytes=1)
            assert a[0].tobytes() == b[0].tobytes() and np.array_equal(a[1], b[1])
            assert c[0].tobytes() == score_rows(q, rows, x, ids)[0].tobytes()
    finally:
        os.close(fd)
