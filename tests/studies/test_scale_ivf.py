"""The scale study's IVF backends, subspace family and real-embedding point, on tiny data."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.studies.scale.data import SubspaceStream, SyntheticStream, make_stream
from ocrr.studies.scale.study import ScaleConfig, run_scale

pytest.importorskip("faiss")


def test_subspace_stream_lives_in_its_subspace_and_regenerates():
    s = SubspaceStream(3000, 6, 32, 0.2, seed=1, intrinsic_dim=4, ambient=0.0)
    x = np.concatenate([c for _, c in s.chunks(rows=700)])
    assert x.shape == (3000, 32) and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    assert np.linalg.matrix_rank(x[:500], tol=1e-4) == 4  # no ambient noise: exactly the subspace
    assert np.array_equal(s.rows(np.array([0, 1234, 2999])), x[[0, 1234, 2999]])
    assert np.array_equal(s.labels_of(np.array([0, 2999])), [0, 5])
    again = make_stream("subspace", 3000, 6, 32, 0.2, 1, 4, 0.0)
    assert np.array_equal(np.concatenate([c for _, c in again.chunks(rows=700)]), x)
    q, lab = s.fresh_queries(12)
    assert np.array_equal(np.argmax(q @ s.centroids.T, axis=1), lab)  # separable at sigma 0.2
    assert type(make_stream("gaussian", 3000, 6, 32, 0.2, 1)) is SyntheticStream
    with pytest.raises(ValueError, match="family must be one of"):
        make_stream("cubes", 3000, 6, 32, 0.2, 1)


@pytest.mark.parametrize("exact", ["yes", "no"])  # "no": the re-rank reads a memory-mapped scratch file
def test_run_scale_with_ivf_backends(tmp_path, exact):
    cfg = ScaleConfig(
        scales=(6000,),
        n_classes=6,
        dim=16,
        sigma=0.2,
        n_queries=30,
        threads=1,
        backends=("ivf", "ivf_sq8", "ivf_pq"),
        exact=exact,
        family="subspace",
        intrinsic_dim=4,
        nlist=16,
        vectors_dir=str(tmp_path),
    )
    rows = run_scale(6000, cfg)
    ivf = [r for r in rows if r["backend"].startswith("ivf")]
    assert len(ivf) == 6 and {r["queries"] for r in ivf} == {"fresh", "stored"}
    for r in ivf:
        assert r["nlist"] == 16 and 1 <= r["nprobe"] <= 16 and r["rerank"] >= 6
        assert r["target_met"] and r["tuned_recall"] >= 0.95 and r["recall@5"] >= 0.9
        # fast-scan PQ assigns inside its own adds: the shared assignment is not part of its build
        shared = 0.0 if r["backend"] == "ivf_pq" else r["assign_s"]
        assert r["agreement"] >= 0.9 and r["build_s"] >= r["kmeans_s"] + shared and r["build_s"] > 0
        assert r["family"] == "subspace" and r["index_bytes_per_entry"] > 0
    assert list(tmp_path.iterdir()) == []  # the scratch file is gone
    assert ("exact" in {r["backend"] for r in rows}) == (exact == "yes")


def test_run_real_pipeline_on_a_stand_in_ledger(monkeypatch):
    import ocrr.studies.scale.real as real

    s = SubspaceStream(2000, 8, 16, 0.15, seed=0, intrinsic_dim=4)
    x = np.concatenate([c for _, c in s.chunks()])
    labels = np.array([f"c{c}" for c in s.labels_of(np.arange(2000))])
    test_rows = np.arange(0, 2000, 10)
    monkeypatch.setattr(real, "real_ledger", lambda data_dir=None, encoder=None: (x, labels, test_rows))
    rows = real.run_real(("exact", "ivf_sq8"), nlist=16, threads=1)
    exact, ivf = rows
    assert exact["recall@5"] == 1.0 and exact["agreement"] == 1.0 and exact["acc"] == exact["exact_acc"]
    assert ivf["recall@5"] >= 0.9 and ivf["agreement"] >= 0.9 and ivf["nprobe"] >= 1
    assert "| ivf_sq8 |" in real.real_markdown(rows)
    tuned = real.run_real(
        ("exact", "ivf_pq"), nlist=16, threads=1, target_recall=0.0, target_agreement=0.99, tune_queries=400
    )[1]
    assert tuned["target_agreement"] == 0.99 and tuned["tuned_agreement"] >= 0.99 and tuned["agreement"] >= 0.95


def test_cli_scale_ivf_and_bad_options(tmp_path, capsys):
    out = tmp_path / "scale"
    code = main(
        [
            "scale",
            "--scales",
            "3000",
            "--classes",
            "6",
            "--dim",
            "16",
            "--queries",
            "12",
            "--sigma",
            "0.2",
            "--family",
            "subspace",
            "--intrinsic-dim",
            "4",
            "--backends",
            "ivf_pq",
            "--nlist",
            "16",
            "--threads",
            "1",
            "--no-isolate",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = (out / "scale.md").read_text()
    assert "ivf_pq vs exact, fresh queries" in text and "4-dimensional subspace" in text and "tuned recall" in text
    for bad, what in (
        (["--target-recall", "2"], "--target-recall"),
        (["--intrinsic-dim", "0", "--family", "subspace"], "--intrinsic-dim"),
        (["--backends", "ivf_flat"], "ivf_flat"),
    ):
        assert main(["scale", "--scales", "3000", "--classes", "6", "--out", str(out), *bad]) == 2
        assert what in capsys.readouterr().err


def test_run_scale_tuned_for_vote_agreement_with_memory_split_and_cold_queries(tmp_path):
    cfg = ScaleConfig(
        scales=(6000,),
        n_classes=6,
        dim=16,
        sigma=0.2,
        n_queries=30,
        threads=1,
        backends=("ivf_pq",),
        exact="no",
        family="subspace",
        intrinsic_dim=4,
        nlist=16,
        vectors_dir=str(tmp_path),
        target_recall=0.0,
        target_agreement=0.99,
        tune_queries=400,
        cold_queries=True,
        also_time=((16, 200),),
    )
    rows = run_scale(6000, cfg)
    assert [r["backend"] for r in rows] == ["ivf_pq", "ivf_pq", "ivf_pq@16/200", "ivf_pq@16/200"]
    every_list = rows[2:]
    assert all(r["nprobe"] == 16 and r["rerank"] == 200 and r["recall@5"] == 1.0 for r in every_list)
    for r in rows[:2]:
        assert (r["nprobe"], r["rerank"]) != (16, 200)
        assert r["target_met"] and r["tuned_agreement_bound"] >= 0.99 and r["tune_queries"] == 400
        assert r["target_recall"] == 0.0 and r["target_agreement"] == 0.99
        assert r["agreement"] >= 0.9
        assert r["peak_anon_mb"] > 0 and r["peak_file_mb"] >= 0 and r["anon_mb_tuned"] > 0
        assert r["ms_per_query_cold_wall"] > 0 and not r["disk_mb_cold_queries"] < 0
        # the saved index opened in fresh processes: first query timed cold and warmed at open
        assert r["first_query_ms_open"] > 0 and r["first_query_ms_warm_open"] > 0
        assert r["p50_ms_after_warm_open"] > 0 and r["reopen_max_rss_mb_warm_open"] > 0
    assert list(tmp_path.iterdir()) == []  # the saved index and its queries are removed too


def test_cli_refuses_an_agreement_target_it_cannot_certify(tmp_path, capsys):
    base = ["scale", "--scales", "3000", "--classes", "6", "--out", str(tmp_path)]
    for bad, what in (
        (["--target-agreement", "0.99"], "--tune-queries 396"),
        (["--target-agreement", "1"], "--target-agreement must be in [0, 1)"),
        (["--tune-tolerance", "2"], "--tune-tolerance must be in"),
        (["--tune-queries", "-1"], "--tune-queries must be >= 0"),
        (["--also-time", "32:80"], "write nprobe/rerank pairs"),
    ):
        assert main([*base, *bad]) == 2
        assert what in capsys.readouterr().err
