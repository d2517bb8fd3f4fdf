"""Commit latency of the durable ledger: one correction per commit, as a steady trickle of
corrections reaches a service, with its tail beside the machine's limit.

Prints the latency percentiles of ``DurableLedger.extend`` (one 384-d entry per commit:
append, hash, SQLite commit with an fsync), how many commits took over 10 ms, and beside
them, measured in the same run, a plain SQLite loop writing the same bytes with
``synchronous=FULL`` in WAL mode (its own default checkpoints included): the limit.

The slowest commits are SQLite's own WAL checkpoints: the commit that takes the log past
1,000 pages (about every 170 one-entry commits here) also copies it into the database file,
about 2 ms against a median of 0.2 ms. Checkpointing from a background thread instead was
measured and not adopted: under commits without pause its checkpoints never catch up with
the log, so the log never restarts (70 MB after 3,000 commits) and the median commit doubled.
Run: python benchmarks/bench_commits.py [--commits 3000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from ocrr.ledger.sqlite.store import DurableLedger

DIM = 384


def percentiles(ms: np.ndarray) -> str:
    p50, p99, p999 = np.percentile(ms, [50, 99, 99.9])
    return (
        f"p50 {p50:6.2f}  p99 {p99:6.2f}  p99.9 {p999:6.2f}  max {ms.max():6.2f} ms;  "
        f"over 10 ms: {int((ms > 10).sum())} of {len(ms)}"
    )


def ledger_commits(folder: Path, vecs: np.ndarray) -> np.ndarray:
    out = np.empty(len(vecs))
    with DurableLedger.open(folder / "ledger.db", dim=DIM) as led:
        for i in range(len(vecs)):
            t = time.perf_counter()
            led.extend(vecs[i : i + 1], [f"label{i % 77}"], [None])
            out[i] = time.perf_counter() - t
    return out * 1e3


def plain_sqlite(folder: Path, vecs: np.ndarray) -> np.ndarray:
    """The same bytes per commit (vector, a 32-byte hash, a label), nothing else."""
    conn = sqlite3.connect(folder / "plain.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, label TEXT, vec BLOB, hash BLOB)")
    out = np.empty(len(vecs))
    for i in range(len(vecs)):
        t = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (i, f"label{i % 77}", vecs[i].tobytes(), os.urandom(32)))
        conn.execute("COMMIT")
        out[i] = time.perf_counter() - t
    conn.close()
    return out * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=3000, help="commits of one entry each (default 3000)")
    ap.add_argument("--dir", type=Path, default=None, help="folder for the files (default: a temporary one)")
    args = ap.parse_args()
    if args.commits < 10:
        ap.error("--commits must be at least 10")
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((args.commits, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        ledger = ledger_commits(Path(tmp), vecs)
        plain = plain_sqlite(Path(tmp), vecs)
    print(f"durable ledger, {args.commits:,} commits of one {DIM}-d entry (load {os.getloadavg()[0]:.1f}):")
    print(f"  ledger.extend       {percentiles(ledger)}")
    print(f"  limit: plain SQLite {percentiles(plain)}")


if __name__ == "__main__":
    main()
