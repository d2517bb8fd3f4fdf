"""The scale study's real-embedding point: Banking77 + CLINC150 as one ledger.

The train and test vectors of both datasets (all-MiniLM-L6-v2 by default, from ocrr's
embedding cache) form one ledger of ~33k entries, labels prefixed by their dataset so
the two label sets stay apart. The queries are the test items, each of which is in the
ledger: every backend is asked for k+1 neighbours and the query's own entry is dropped
(leave-one-out), so the vote sees what it would for a new item with that text's
neighbours. Per backend: recall@k against exact search, agreement of the substrate vote
with the exact vote, vote accuracy, ms per single query, build time and bytes per entry;
IVF kinds are tuned for ``target_recall`` (and/or ``target_agreement``, the vote over the
IVF top-k agreeing with the exact vote, with the ledger's labels) on held-out stored
entries first.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from ocrr.data import load_dataset
from ocrr.encoders import DEFAULT_ENCODER, embed_dataset
from ocrr.index import AutoIndex, CertifiedSQ8Index, ExactIndex, exact_search, make_index, recall_at_k
from ocrr.index.faiss_index import FaissIndex
from ocrr.index.ivf import IVFIndex
from ocrr.index.vote import VoteRule, vote
from ocrr.studies.scale.report import write_csv
from ocrr.studies.scale.timing import time_queries

DATASETS = ("banking77", "clinc150")


def real_ledger(data_dir=None, encoder: str | None = None):
    """(vectors (n, d) float32, labels (n,) str, test rows (m,) int64) of the joint ledger."""
    parts: list[np.ndarray] = []
    labels: list[str] = []
    test_rows: list[np.ndarray] = []
    n = 0
    for name in DATASETS:
        ds = load_dataset(name, data_dir=data_dir)
        emb = embed_dataset(ds, encoder or DEFAULT_ENCODER)
        for split, vecs, is_test in ((ds.train, emb.train, False), (ds.test, emb.test, True)):
            parts.append(np.asarray(vecs, np.float32))
            labels.extend(f"{name}/{label}" for label in split.labels)
            if is_test:
                test_rows.append(np.arange(n, n + len(vecs)))
            n += len(vecs)
    return np.concatenate(parts), np.array(labels), np.concatenate(test_rows).astype(np.int64)


def _without_self(sims: np.ndarray, ids: np.ndarray, self_ids: np.ndarray, k: int):
    """The first k columns other than each row's own id (leave-one-out)."""
    keep = np.argsort(ids == self_ids[:, None], axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, keep, axis=1), np.take_along_axis(ids, keep, axis=1)


def run_real(
    backends: tuple[str, ...],
    data_dir=None,
    encoder: str | None = None,
    k: int = 5,
    target_recall: float = 0.95,
    nlist: int = 0,
    threads: int = 2,
    seed: int = 0,
    params: dict | None = None,
    target_agreement: float = 0.0,
    tune_queries: int = 200,
    tune_tolerance: float = 0.0,
) -> list[dict]:
    import faiss

    x, labels, test_rows = real_ledger(data_dir, encoder)
    ids = np.arange(len(x), dtype=np.int64)
    _, names = np.unique(labels, return_inverse=True)
    queries = x[test_rows]
    rule = VoteRule(k=k)
    exact_s, truth = _without_self(*exact_search(x, queries, k + 1), test_rows, k)
    exact_vote = vote(exact_s, truth, names[truth], rule)
    rows = []
    faiss.omp_set_num_threads(threads)
    with threadpool_limits(threads):
        for kind in backends:
            t0 = time.perf_counter()
            index: ExactIndex | CertifiedSQ8Index | FaissIndex | IVFIndex | AutoIndex
            if kind == "exact":
                index = ExactIndex(x.shape[1], source=lambda: x, shortlist=False)  # the float32 scan, as study.py
                index.add(x, ids)
            elif kind.startswith("ivf") and target_agreement > 0:
                index = IVFIndex(
                    x.shape[1],
                    kind,
                    source=lambda: x,
                    nlist=nlist,
                    target_recall=target_recall,
                    tune_k=k,
                    seed=seed,
                    target_agreement=target_agreement,
                    label_of=lambda i: names[i],
                    tune_queries=tune_queries,
                    tune_tolerance=tune_tolerance,
                    **(params or {}),
                )
                index.build(x, ids)
            elif kind.startswith("ivf"):
                index = make_index(
                    kind,
                    x.shape[1],
                    source=lambda: x,
                    nlist=nlist,
                    target_recall=target_recall,
                    tune_k=k,
                    seed=seed,
                    **(params or {}),
                )
                assert isinstance(index, IVFIndex)  # make_index builds an IVFIndex for the ivf kinds
                index.build(x, ids)
            else:
                index = make_index(kind, x.shape[1], **(params or {}))
                if isinstance(index, FaissIndex) and index.compressed:  # the sq8 kinds
                    index.train(x[:: max(1, len(x) // 65_536)])
                index.add(x, ids)
            build_s = time.perf_counter() - t0
            sims, got = _without_self(*index.search(queries, k + 1), test_rows, k)
            pred = vote(sims, got, np.where(got >= 0, names[np.maximum(got, 0)], -1), rule)
            timing = time_queries(index, queries[:200], k + 1, threads)
            tuning = getattr(index, "tuning", None) or {}
            rows.append(
                {
                    "backend": kind,
                    "entries": len(x),
                    "queries": len(queries),
                    "k": k,
                    f"recall@{k}": recall_at_k(got, truth),
                    "agreement": float(np.mean(pred == exact_vote)),
                    "acc": float(np.mean(pred == names[test_rows])),
                    "exact_acc": float(np.mean(exact_vote == names[test_rows])),
                    "ms_per_query": timing["ms_per_query"],
                    "build_s": build_s,
                    "index_bytes_per_entry": index.nbytes / len(x),
                    "nlist": getattr(index, "nlist", ""),
                    "nprobe": getattr(index, "nprobe", ""),
                    "rerank": getattr(index, "rerank", ""),
                    "tuned_recall": tuning.get("recall", ""),
                    "target_agreement": target_agreement if kind.startswith("ivf") else "",
                    "tuned_agreement": tuning.get("agreement", ""),
                }
            )
    return rows


def real_markdown(rows: list[dict], k: int = 5) -> str:
    r0 = rows[0]
    out = [
        "# Real embeddings: Banking77 + CLINC150 as one ledger\n",
        f"{r0['entries']:,} entries (train + test of both datasets, all-MiniLM-L6-v2), queried with the "
        f"{r0['queries']:,} test items, each left out of its own answer; substrate vote k={k}, margin 0.05. "
        f"ms/q: CPU ms of one query per call on one thread (200 queries).\n",
        f"| backend | recall@{k} | vote agreement | vote acc | exact acc | ms/q | build s | B/entry | nlist "
        f"| nprobe | rerank | tuned recall | tuned agreement |",
        "| --- " * 13 + "|",
    ]
    for r in rows:
        tuned, agreed = r["tuned_recall"], r.get("tuned_agreement", "")
        out.append(
            f"| {r['backend']} | {r[f'recall@{k}']:.3f} | {r['agreement']:.3f} | {r['acc']:.3f} "
            f"| {r['exact_acc']:.3f} | {r['ms_per_query']:.2f} | {r['build_s']:.1f} "
            f"| {r['index_bytes_per_entry']:.0f} | {r['nlist']} | {r['nprobe']} | {r['rerank']} "
            f"| {tuned if tuned == '' else f'{tuned:.3f}'} | {agreed if agreed == '' else f'{agreed:.3f}'} |"
        )
    return "\n".join(out) + "\n"


def write_real_outputs(rows: list[dict], out: Path) -> list[Path]:
    """real.csv and real.md in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "real.csv", out / "real.md"
    write_csv(rows, csv_path)
    md_path.write_text(real_markdown(rows))
    return [csv_path, md_path]
