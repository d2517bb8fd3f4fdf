"""FileRows: float32 rows of a file read with pread, as the IVF re-rank reads a 10M-entry
vector file: the same rows as the array they were written from, and nothing mapped."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ocrr.index import make_index
from ocrr.index.file_rows import FileRows


@pytest.fixture
def stored(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5000, 24)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    path = tmp_path / "rows.f32"
    path.write_bytes(x.astype("<f4").tobytes())
    fd = os.open(path, os.O_RDONLY)
    yield x, FileRows(fd, len(x), x.shape[1])
    os.close(fd)


def test_reads_are_the_written_rows(stored):
    x, rows = stored
    assert rows.shape == x.shape and len(rows) == len(x)
    ids = np.array([7, 3, 3, 4999, 0, 8, 9, 10, 2500])  # unsorted, repeated, runs, both ends
    assert np.array_equal(rows[ids], x[ids])
    assert np.array_equal(rows[ids.reshape(3, 3)], x[ids.reshape(3, 3)])
    assert np.array_equal(rows[42], x[42]) and np.array_equal(rows[-1], x[-1])
    view = rows[100:300]
    assert isinstance(view, FileRows) and len(view) == 200
    assert np.array_equal(np.asarray(view), x[100:300]) and np.array_equal(view[[0, 199]], x[[100, 299]])
    assert np.array_equal(rows[ids[:0]], x[ids[:0]])
    with pytest.raises(IndexError):
        rows[np.array([5000])]


def test_an_ivf_index_over_file_rows_answers_as_over_the_array(stored):
    x, rows = stored
    raw = np.asarray(rows)
    answers = []
    for source in (lambda: raw, lambda: rows):
        index = make_index(
            "ivf_pq", raw.shape[1], source=source, nlist=16, nprobe=4, rerank=40, ivf_min_train=1000, seed=0
        )
        index.add(raw, np.arange(len(raw), dtype=np.int64))
        answers.append(index.search(raw[:50] + 0.01, 5))
    assert np.array_equal(answers[0][0], answers[1][0]) and np.array_equal(answers[0][1], answers[1][1])


def test_reading_maps_nothing_into_the_process(stored):
    """The point of pread: the file's pages stay in the page cache, not in this process."""
    from ocrr.studies.scale.memory import proc_status_mb

    _, rows = stored
    rows[np.arange(3)]  # the first gather maps numpy's own code for it: that is not the file
    before = proc_status_mb().get("RssFile")
    if before is None:
        pytest.skip("no /proc/self/status RssFile here")
    for lo in range(0, 5000, 7):
        rows[np.arange(lo, min(5000, lo + 3))]
    assert proc_status_mb()["RssFile"] - before < 0.2  # MB


def test_a_gather_of_evicted_rows_reads_the_same_rows(stored):
    """Cold rows (not in the page cache) are announced together, then read: same rows."""
    x, rows = stored
    ids = np.array([4000, 12, 13, 14, 2999, 7, 4000, 1])
    os.fsync(rows.fd)
    os.posix_fadvise(rows.fd, 0, 0, os.POSIX_FADV_DONTNEED)
    assert np.array_equal(rows[ids], x[ids])
    assert np.array_equal(rows[ids], x[ids])  # now cached: read without waiting
    rows._nowait = False  # a file system without RWF_NOWAIT: plain reads
    assert np.array_equal(rows[ids], x[ids])
