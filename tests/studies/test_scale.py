"""The scale study (ocrr.studies.scale.study) on tiny data: data generation, metrics, outputs, CLI."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.index import exact_search
from ocrr.index.vote import VoteRule
from ocrr.studies.scale.study import (
    ScaleConfig,
    SyntheticStream,
    _predict,
    markdown,
    read_csv,
    run_scale,
    run_study,
    write_outputs,
)
from ocrr.systems import Batch, make_system

pytest.importorskip("faiss")


def tiny(**kw):
    base = dict(scales=(1500,), n_classes=10, dim=24, sigma=0.15, n_queries=20, threads=1)
    return ScaleConfig(**{**base, **kw})


def test_stream_is_deterministic_class_ordered_and_regenerable():
    s = SyntheticStream(10_000, 7, 16, 0.3, seed=4)
    chunks = list(s.chunks(rows=3000))
    assert [f for f, _ in chunks] == [0, 3000, 6000, 9000] and len(chunks[-1][1]) == 1000
    x = np.concatenate([c for _, c in chunks])
    again = np.concatenate([c for _, c in SyntheticStream(10_000, 7, 16, 0.3, seed=4).chunks(rows=777)])
    assert np.array_equal(x, again)  # the chunk size does not change the data
    assert np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    ids = np.array([0, 1428, 1429, 5000, 9999, 4096, 4095])
    assert np.array_equal(s.rows(ids), x[ids])
    labels = s.labels_of(np.arange(10_000))
    assert np.all(np.diff(labels) >= 0) and np.bincount(labels).tolist() == [1429] * 4 + [1428] * 3
    q, ql = s.fresh_queries(21)
    assert q.shape == (21, 16) and ql.tolist() == sorted(ql.tolist())


def test_study_vote_is_the_substrates_vote():
    cfg = tiny(sigma=0.3)
    s = SyntheticStream(1500, cfg.n_classes, cfg.dim, cfg.sigma, cfg.seed)
    x = np.concatenate([c for _, c in s.chunks()])
    labels = s.labels_of(np.arange(len(x)))
    q, ql = s.fresh_queries(40)
    sims, ids = exact_search(x, q, 5)
    ours = _predict(s, sims, ids, VoteRule())
    sub = make_system("substrate").fit(Batch(x, None, [f"c{c:03d}" for c in labels]))
    theirs = sub.predict(Batch(q))
    assert [f"c{c:03d}" for c in ours] == theirs
    row = next(r for r in run_scale(1500, cfg) if r["backend"] == "exact" and r["queries"] == "fresh")
    q20, l20 = s.fresh_queries(20)
    acc = np.mean([p == f"c{c:03d}" for p, c in zip(sub.predict(Batch(q20)), l20)])
    assert row["brute_acc"] == pytest.approx(acc)


def test_run_scale_rows_and_sanity():
    rows = run_scale(1500, tiny(backends=("hnsw", "hnsw_sq8")))
    assert {(r["backend"], r["queries"]) for r in rows} == {
        (b, m) for b in ("exact", "hnsw", "hnsw_sq8") for m in ("fresh", "stored")
    }
    for r in rows:
        assert 0 <= r["acc"] <= 1 and 0 <= r["recall@5"] <= 1 and r["ms_per_query"] > 0
        assert r["peak_rss_mb"] > 0 and r["exact_in_memory"]
        if r["backend"] == "exact":
            assert r["recall@5"] == 1.0 and r["agreement"] == 1.0 and r["index_bytes_per_entry"] == 0
        else:
            assert r["index_bytes_per_entry"] > 0 and r["build_s"] > 0
        if r["queries"] == "stored":  # a stored vector is its own nearest neighbour
            assert r["brute_acc"] == 1.0 and r["mean_top1_sim"] == pytest.approx(1.0, abs=1e-5)
    hnsw = {r["queries"]: r for r in rows if r["backend"] == "hnsw"}
    assert hnsw["fresh"]["recall@5"] > 0.8 and hnsw["stored"]["self_hit"] == 1.0
    sq8 = next(r for r in rows if r["backend"] == "hnsw_sq8")
    # 8-bit codes: 1 byte per dimension instead of 4 (the graph and id map are the same size)
    assert hnsw["fresh"]["index_bytes_per_entry"] - sq8["index_bytes_per_entry"] == pytest.approx(3 * 24, abs=1)


def test_no_exact_in_memory_still_scores_against_the_ground_truth():
    rows = run_scale(1500, tiny(exact="no", query_modes=("fresh",)))
    assert [r["backend"] for r in rows] == ["hnsw"] and not rows[0]["exact_in_memory"]
    assert rows[0]["brute_acc"] > 0.5


def test_outputs_and_markdown(tmp_path):
    cfg = tiny(scales=(1000, 2000), query_modes=("fresh",))
    rows = run_study(cfg, isolate=False)
    paths = write_outputs(rows, cfg, tmp_path, notes=["a note"])
    for key in ("csv", "md", "png", "svg"):
        assert paths[key].exists() and paths[key].stat().st_size > 0
    back = read_csv(paths["csv"])
    assert len(back) == len(rows) and back[0]["scale"] == 1000 and back[0]["acc"] == pytest.approx(rows[0]["acc"])
    md = markdown(rows, cfg)
    assert "| Scale | brute_acc | hnsw_acc | gap | recall@5 | agreement | hnsw ms/q |" in md
    assert "| 1k |" in md and "| 2k |" in md and "Paper 6.5" in md


def test_isolated_run_matches_in_process_metrics():
    cfg = tiny(scales=(1000,), query_modes=("fresh",))
    a = run_study(cfg, isolate=True)
    b = run_study(cfg, isolate=False)
    for x, y in zip(a, b):
        assert (x["backend"], x["acc"], x["brute_acc"]) == (y["backend"], y["acc"], y["brute_acc"])
        assert x["recall@5"] == y["recall@5"]  # one FAISS thread: the same graph


def test_cli_scale(tmp_path, capsys):
    out = tmp_path / "scale"
    code = main(
        [
            "scale",
            "--scales",
            "600,1200",
            "--classes",
            "6",
            "--dim",
            "16",
            "--queries",
            "12",
            "--sigma",
            "0.1",
            "--threads",
            "1",
            "--no-isolate",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert (out / "scale.csv").exists() and (out / "scale_recall_accuracy.svg").exists()
    text = (out / "scale.md").read_text()
    assert "hnsw vs exact, fresh queries" in text and "Ledger bytes per entry" in text
    assert main(["scale", "--scales", "5", "--classes", "6", "--out", str(out)]) == 2
    assert main(["scale", "--backends", "annoy", "--out", str(out)]) == 2
    assert "annoy" in capsys.readouterr().err


@pytest.mark.parametrize("exact", ["yes", "no"])
def test_shuffled_insertion_order_indexes_the_same_entries(exact):
    cfg = tiny(order="shuffled", exact=exact, query_modes=("stored",))
    rows = {r["backend"]: r for r in run_scale(1500, cfg)}
    assert rows["hnsw"]["order"] == "shuffled" and rows["hnsw"]["self_hit"] == 1.0
    assert rows["hnsw"]["recall@5"] > 0.9 and rows["hnsw"]["brute_acc"] == 1.0
