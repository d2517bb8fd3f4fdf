"""An IVF index saved after its build and opened again answers exactly as before, in
borrowed mode (rows from the caller's source) and owned mode; opening warms it."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.index import make_index
from ocrr.index.ivf_file import open_ivf, save_ivf

faiss = pytest.importorskip("faiss")


def _data(n=3000, dim=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


@pytest.mark.parametrize("kind", ["ivf_pq", "ivf_sq8", "ivf"])
@pytest.mark.parametrize("borrow", [True, False])
def test_saved_and_opened_answers_the_same(tmp_path, kind, borrow):
    faiss.omp_set_num_threads(1)
    x = _data()
    source = (lambda: x) if borrow else None
    index = make_index(kind, x.shape[1], source=source, nlist=16, nprobe=3, rerank=30, ivf_min_train=1000, seed=0)
    index.add(x, np.arange(len(x), dtype=np.int64) if borrow else np.arange(len(x), dtype=np.int64) * 7)
    index.remove(np.array([3, 21, 700]))
    q = x[:40] + 0.05
    want = index.search(q, 5)
    save_ivf(index, tmp_path / "ivf.faiss")
    for warm in (False, True):
        opened = open_ivf(tmp_path / "ivf.faiss", source=source, warm=warm)
        got = opened.search(q, 5)
        assert got[0].tobytes() == want[0].tobytes() and np.array_equal(got[1], want[1])
        assert len(opened) == len(index) and np.array_equal(opened.ids, index.ids)
        assert (opened.nprobe, opened.rerank, opened.nlist) == (index.nprobe, index.rerank, index.nlist)


def test_restored_from_bytes_into_an_index_of_the_same_settings_only(tmp_path):
    """``restore_ivf`` fills a new index from the files' bytes: the same answers as the saved
    index, its own search knobs kept; an index made with another structure is refused."""
    from ocrr.index.ivf_file import restore_ivf, side_path

    faiss.omp_set_num_threads(1)
    x = _data()
    index = make_index("ivf_sq8", x.shape[1], source=lambda: x, nlist=16, nprobe=3, rerank=30, ivf_min_train=1000)
    index.add(x, np.arange(len(x), dtype=np.int64))
    save_ivf(index, tmp_path / "ivf.faiss")
    blobs = (tmp_path / "ivf.faiss").read_bytes(), side_path(tmp_path / "ivf.faiss").read_bytes()
    fresh = make_index("ivf_sq8", x.shape[1], source=lambda: x, nlist=16, nprobe=5, rerank=30, ivf_min_train=1000)
    restore_ivf(fresh, *blobs)
    assert fresh.nprobe == 5
    fresh.nprobe = 3
    want, got = index.search(x[:40] + 0.05, 5), fresh.search(x[:40] + 0.05, 5)
    assert got[0].tobytes() == want[0].tobytes() and np.array_equal(got[1], want[1])
    other = make_index("ivf_pq", x.shape[1], source=lambda: x, nlist=16, ivf_min_train=1000)
    with pytest.raises(ValueError, match="built with other settings: kind 'ivf_sq8' \\(wanted 'ivf_pq'\\)"):
        restore_ivf(other, *blobs)


def test_opening_needs_the_rows_of_a_borrowing_index_and_the_files(tmp_path):
    x = _data()
    index = make_index("ivf_pq", x.shape[1], source=lambda: x, nlist=16, ivf_min_train=1000)
    with pytest.raises(ValueError, match="trained"):
        save_ivf(index, tmp_path / "early.faiss")
    index.add(x, np.arange(len(x), dtype=np.int64))
    save_ivf(index, tmp_path / "ivf.faiss")
    with pytest.raises(ValueError, match="source="):
        open_ivf(tmp_path / "ivf.faiss")
    with pytest.raises(FileNotFoundError, match="no saved IVF index"):
        open_ivf(tmp_path / "missing.faiss", source=lambda: x)


def test_an_index_saved_under_the_option_s_earlier_name_opens(tmp_path):
    """Indexes saved before ``hnsw_quantizer_from`` became ``grouped_quantizer_from`` keep opening."""
    import json

    x = _data()
    index = make_index("ivf_pq", x.shape[1], source=lambda: x, nlist=16, ivf_min_train=1000, grouped_quantizer_from=8)
    index.add(x, np.arange(len(x), dtype=np.int64))
    save_ivf(index, tmp_path / "ivf.faiss")
    side = tmp_path / "ivf.faiss.npz"
    with np.load(side) as saved:
        arrays = {key: saved[key] for key in saved.files}
    meta = json.loads(str(arrays["meta"]))
    meta["hnsw_quantizer_from"] = meta.pop("grouped_quantizer_from")
    arrays["meta"] = np.array(json.dumps(meta))
    with open(side, "wb") as fh:
        np.savez(fh, **arrays)
    opened = open_ivf(tmp_path / "ivf.faiss", source=lambda: x)
    assert opened.grouped_quantizer_from == 8
    assert np.array_equal(opened.search(x[:10], 5)[1], index.search(x[:10], 5)[1])


def test_the_option_s_earlier_name_is_refused_with_the_new_one():
    with pytest.raises(ValueError, match="now called grouped_quantizer_from"):
        make_index("ivf_pq", 24, hnsw_quantizer_from=8)
    with pytest.raises(ValueError, match="grouped_quantizer_from must be >= 1"):
        make_index("ivf_pq", 24, grouped_quantizer_from=0)


def _list_contents(index):
    inv = index._index.invlists
    out = []
    for i in range(index.nlist):
        n = inv.list_size(i)
        ids = faiss.rev_swig_ptr(inv.get_ids(i), n).copy() if n else np.empty(0, np.int64)
        size = inv.get_codes(i) and index._index.code_size
        codes = faiss.rev_swig_ptr(inv.get_codes(i), -(-n // 32) * 32 * size).copy() if n else b""
        out.append((ids.tobytes(), bytes(codes)))
    return out


@pytest.mark.parametrize("nested", [False, True])
def test_chunked_adds_give_the_same_lists_as_one_add(nested):
    """Same trained index, the same entries added at once or in uneven chunks: the same ids
    and the same packed codes in every list (fast-scan PQ packs 32 codes per block)."""
    faiss.omp_set_num_threads(1)
    x = _data(5000)
    extra = {"grouped_quantizer_from": 8} if nested else {}
    indexes = []
    for chunk in (len(x), 700, 333):
        index = make_index("ivf_pq", x.shape[1], source=lambda: x, nlist=32, ivf_min_train=10**9, seed=0, **extra)
        index.train(x[::2])
        for lo in range(0, len(x), chunk):
            index.add(x[lo : lo + chunk], np.arange(lo, min(len(x), lo + chunk), dtype=np.int64))
        indexes.append(index)
    want = _list_contents(indexes[0])
    for other in indexes[1:]:
        assert _list_contents(other) == want


def test_the_nested_coarse_quantiser_finds_the_nearest_list():
    """From grouped_quantizer_from lists the centroids are searched through groups: an added
    vector still goes to its nearest centroid (as a flat scan finds it), and the answers are
    exact similarities."""
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(4)
    cent = rng.normal(size=(30, 32)).astype(np.float32)
    x = cent[np.arange(6000) % 30] + 0.3 * rng.normal(size=(6000, 32)).astype(np.float32)  # clustered, as embeddings
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = make_index(
        "ivf_pq", 32, source=lambda: x, nlist=64, nprobe=8, rerank=50, ivf_min_train=10**9, grouped_quantizer_from=64
    )
    index.train(x)
    assert isinstance(faiss.downcast_index(index._index.quantizer), faiss.IndexIVFFlat)
    flat = faiss.IndexFlatL2(32)
    flat.add(_centroids(index))
    _, nearest = flat.search(x, 1)
    assert np.mean(index.assign(x) == nearest[:, 0]) > 0.9  # 0.95 here; 1.000 at 8192 lists of 384-d clusters
    index.add(x, np.arange(len(x), dtype=np.int64))
    sims, ids = index.search(x[:20] + 0.02, 5)
    q = x[:20] + 0.02
    assert np.allclose(sims, np.einsum("nkd,nd->nk", x[ids], q), atol=1e-6)


def _centroids(index):
    q = faiss.downcast_index(index._index.quantizer)
    q.make_direct_map()
    return q.reconstruct_n(0, index.nlist)


@pytest.mark.parametrize("borrow", [True, False])
def test_an_opened_index_takes_its_first_additions_without_copying_its_bookkeeping(tmp_path, borrow):
    """Opened with free rows past the saved ones, the index takes the corrections that follow
    in place (a buffer of exactly the saved rows would be copied whole by the first of them,
    while that correction waits), and answers as an index that took the same rows."""
    faiss.omp_set_num_threads(1)
    x = _data(3100)
    source = (lambda: x) if borrow else None
    index = make_index("ivf_pq", x.shape[1], source=source, nlist=16, nprobe=3, rerank=30, ivf_min_train=1000, seed=0)
    index.add(x[:3000], np.arange(3000, dtype=np.int64))
    save_ivf(index, tmp_path / "ivf.faiss")
    opened = open_ivf(tmp_path / "ivf.faiss", source=source)
    alive = opened._alive.ctypes.data
    for i in range(3000, 3100):
        opened.add(x[i : i + 1], np.array([i], np.int64))
        index.add(x[i : i + 1], np.array([i], np.int64))
    assert opened._alive.ctypes.data == alive
    q = x[:40] + np.float32(0.05)
    want, got = index.search(q, 5), opened.search(q, 5)
    assert got[0].tobytes() == want[0].tobytes() and np.array_equal(got[1], want[1])
