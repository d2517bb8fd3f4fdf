"""Durable corrections/s beside their limit, SQLite and PostgreSQL paired in one run.

Back to back, at the same rows per commit (``--per-commit``, default 256: one full
``/correct`` request), each for ``--seconds``:

  1. bare SQLite loop: ``executemany`` INSERT of ledger-sized rows (dim float32, a label,
     a text, two 32-byte hashes) per transaction, WAL with ``synchronous=FULL``: the limit;
  2. the ledger store on SQLite (``DurableLedger.extend``, one call per commit);
  3. the service on SQLite (``ocrr serve``, ``--clients`` clients POSTing /correct with
     ``--per-commit`` items each, vectors as base64; every answer is a durable append);
  4. bare psycopg loop: one ``INSERT … SELECT FROM unnest(…)`` per transaction, binary
     parameters, ``synchronous_commit=on``: the limit;
  5. the ledger store on PostgreSQL (``PostgresLedger.extend``);
  6. the service on PostgreSQL, with one more replica (a store in this process) following
     the log: its follow lag (acknowledged -> the replica holds it) p50/p99.

Each figure is printed beside its engine's bare loop measured in the same run at the same
rows per commit (the service's groups may merge requests: its bare loop is run again at
the rows per commit it reached), with the load average. The PostgreSQL server is a
throwaway cluster on this machine (as the tests make it), or ``$OCRR_TEST_PG_DSN``.

Run: PYTHONPATH=src python benchmarks/bench_durable.py [--per-commit 256] [--seconds 5]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import re
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.ledger.pg_cluster

TOKEN = secrets.token_urlsafe(32)  # a real random token: the service refuses weak ones
TARGET_SHARE = 0.5  # durable corrections/s as a share of the bare loop (issue 54)
TARGET_SERVICE = 10_000  # durable corrections/s through batched /correct (issue 54)


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


# -- the bare loops ---------------------------------------------------------------------


def _chained_rows(vecs: np.ndarray, start: int, prev: bytes, per_commit: int) -> tuple[list[tuple], bytes]:
    """``per_commit`` ledger-sized rows (id, label, text, vector, prev, hash), one SHA-256 each."""
    rows = []
    for j in range(per_commit):
        n = start + j
        raw = vecs[n % len(vecs)].tobytes()
        digest = hashlib.sha256(prev + raw).digest()
        rows.append((n, f"intent_{n % 77}", f"bench correction {n}", raw, prev, digest))
        prev = digest
    return rows, prev


def bare_sqlite(folder: Path, vecs: np.ndarray, per_commit: int, seconds: float) -> float:
    path = folder / f"bare-{per_commit}-{time.monotonic_ns()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            "CREATE TABLE entries (id INTEGER PRIMARY KEY, label TEXT, text TEXT, vector BLOB, prev BLOB, hash BLOB)"
        )
        n, prev = 0, b"\0" * 32
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            rows, prev = _chained_rows(vecs, n, prev, per_commit)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")  # fsynced: WAL with synchronous=FULL
            n += per_commit
        return n / (time.perf_counter() - t0)
    finally:
        conn.close()


def bare_postgres(url: str, vecs: np.ndarray, per_commit: int, seconds: float) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(
            "CREATE TABLE bare (seq bigint PRIMARY KEY, label text NOT NULL, text text, vector bytea NOT NULL, "
            "prev_hash bytea NOT NULL, hash bytea NOT NULL)"
        )
        insert = (  # binary parameters (%b): the fastest batched INSERT psycopg sends
            "INSERT INTO bare SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::bytea[], "
            "%b::bytea[], %b::bytea[])"
        )
        n, prev = 0, b"\0" * 32
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            rows, prev = _chained_rows(vecs, n, prev, per_commit)
            with conn.transaction():
                conn.execute(insert, [list(col) for col in zip(*rows)])
            n += per_commit
        rate = n / (time.perf_counter() - t0)
        conn.execute("DROP TABLE bare")
        return rate


# -- the ledger store --------------------------------------------------------------------


def store_rate(open_store, vecs: np.ndarray, per_commit: int, seconds: float) -> tuple[float, float]:
    """Entries/s of ``extend`` with ``per_commit`` entries per call, and entries per commit."""
    labels = [f"intent_{i % 77}" for i in range(len(vecs))]
    texts = [f"bench correction {i}" for i in range(len(vecs))]
    with open_store() as led:
        n, commits0 = 0, led.commits
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            lo = n % (len(vecs) - per_commit)
            led.extend(vecs[lo : lo + per_commit], labels[lo : lo + per_commit], texts[lo : lo + per_commit])
            n += per_commit
        rate = n / (time.perf_counter() - t0)
        return rate, n / max(led.commits - commits0, 1)


# -- the service -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seed(ledger: str, n: int, dim: int) -> None:
    from ocrr.systems.persistent import open_substrate

    with open_substrate(ledger) as sub:
        sub.correct(unit_rows(n, dim, 1), [f"intent_{i % 77}" for i in range(n)])


def _serve(ledger: str) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    argv = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", ledger, "--port", str(port), "--check-every", "0"]
    proc = subprocess.Popen(argv, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"ocrr serve --ledger {ledger} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"ocrr serve --ledger {ledger} did not start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def _commits(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    found = re.search(r"^ocrr_ledger_commits_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _bodies(vecs: np.ndarray, per_request: int, client: int, count: int = 8) -> list[bytes]:
    """A few /correct bodies of ``per_request`` items (vectors as base64 float32, a label and
    a text each), cycled by one client."""
    out = []
    for b in range(count):
        lo = ((client * count + b) * per_request) % (len(vecs) - per_request)
        rows = vecs[lo : lo + per_request]
        body = {
            "vectors_b64": [base64.b64encode(r.astype("<f4").tobytes()).decode() for r in rows],
            "labels": [f"intent_{(lo + i) % 77}" for i in range(per_request)],
            "texts": [f"bench correction {client}-{b}-{i}" for i in range(per_request)],
        }
        out.append(json.dumps(body).encode())
    return out


def service_rate(ledger: str, vecs: np.ndarray, per_request: int, clients: int, seconds: float, on_ack=None):
    """Durable corrections/s through /correct, the entries per commit reached, and the
    failures. ``on_ack(time, size)``: called after each answer with the ledger size it covers."""
    proc, port = _serve(ledger)
    try:
        acked = [0] * clients
        errors: list[str] = []
        start = threading.Barrier(clients + 1)
        stop = threading.Event()
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

        def client(k: int) -> None:
            bodies = _bodies(vecs, per_request, k)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            start.wait()
            i = 0
            while not stop.is_set():
                conn.request("POST", "/correct", bodies[i % len(bodies)], headers)
                resp = conn.getresponse()
                answer = resp.read()
                if resp.status != 200:
                    errors.append(f"{resp.status} {answer[:200]!r}")
                    return
                acked[k] += per_request
                if on_ack is not None:
                    on_ack(time.perf_counter(), json.loads(answer)["ids"][-1] + 1)
                i += 1
            conn.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        commits0 = _commits(port)
        start.wait()
        t0 = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        commits = _commits(port) - commits0
    finally:
        _stop(proc)
    if errors:
        raise SystemExit(f"/correct failed: {errors[0]}")
    return sum(acked) / wall, sum(acked) / max(commits, 1)


class FollowLag:
    """A replica (a store in this process) following the log: from each acknowledged answer to
    the first look of the replica's follower that holds it."""

    def __init__(self, url: str):
        from ocrr.ledger.postgres.store import PostgresLedger

        self.replica = PostgresLedger.open(url, verify="checkpoint")
        self.looks: list[tuple[float, int]] = []  # (time, size held) after each look
        self.acks: list[tuple[float, int]] = []
        self.replica.follower = self.replica.follow(1.0, on_tick=self._looked)

    def _looked(self) -> None:
        self.looks.append((time.perf_counter(), len(self.replica)))

    def ack(self, when: float, size: int) -> None:
        self.acks.append((when, size))

    def lags_ms(self) -> np.ndarray:
        times = np.array([t for t, _ in self.looks])
        sizes = np.maximum.accumulate(np.array([s for _, s in self.looks]))
        out = []
        for when, size in self.acks:
            k = int(np.searchsorted(sizes, size))  # the first look holding it
            if k < len(times):
                out.append(max(times[k] - when, 0.0))
        return 1000 * np.array(out)

    def close(self) -> None:
        self.replica.close()


# -- the run -----------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-commit", type=int, default=256, help="rows per commit = items per /correct (<= 256)")
    ap.add_argument("--seconds", type=float, default=5.0, help="per measurement (default 5)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clients", type=int, default=2, help="clients POSTing /correct (default 2)")
    ap.add_argument("--seed-entries", type=int, default=1000, help="entries in each served ledger before measuring")
    ap.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = ap.parse_args()
    if not 1 <= args.per_commit <= 256:
        ap.error("--per-commit must be in 1..256 (the items one /correct request takes)")

    from ocrr.ledger.postgres.store import PostgresLedger
    from ocrr.ledger.sqlite.store import DurableLedger

    vecs = unit_rows(max(4 * args.per_commit, 4096), args.dim, 0)
    r, s = args.per_commit, args.seconds
    print(f"durable appends, {args.dim}-d rows, {r} rows per commit, {s:g} s each; load {load()}")
    results: list[tuple[str, float, float, float]] = []  # (what, rate, limit, rows per commit)

    def show(what: str, rate: float, limit: float, per_commit: float, extra: str = "") -> None:
        results.append((what, rate, limit, per_commit))
        print(
            f"  {what:22s} {rate:>9,.0f}/s  limit {limit:>9,.0f}/s  {rate / limit:5.0%} of it  "
            f"({per_commit:.0f} rows/commit; load {load()}){extra}",
            flush=True,
        )

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        limit = bare_sqlite(folder, vecs, r, s)
        show("bare SQLite loop", limit, limit, r)
        rate, per = store_rate(lambda: DurableLedger.open(folder / "store.db", dim=args.dim), vecs, r, s)
        show("store on SQLite", rate, limit, per)
        path = str(folder / "served.db")
        _seed(path, args.seed_entries, args.dim)
        rate, per = service_rate(path, vecs, r, args.clients, s)
        reached = max(1, round(per))
        sqlite_at = limit if reached == r else bare_sqlite(folder, vecs, reached, s)
        show("service on SQLite", rate, sqlite_at, per)
        sqlite_service = rate

    if not args.no_postgres:
        from tests.ledger.pg_cluster import Cluster, drop_schema, new_schema

        cluster = Cluster(os.environ.get("OCRR_TEST_PG_DSN"))
        try:
            schema = new_schema(cluster)
            try:
                url = cluster.url(schema)
                limit = bare_postgres(url, vecs, r, s)
                show("bare psycopg loop", limit, limit, r)
                rate, per = store_rate(lambda: PostgresLedger.open(url, dim=args.dim), vecs, r, s)
                show("store on PostgreSQL", rate, limit, per)
            finally:
                drop_schema(cluster, schema)
            schema = new_schema(cluster)
            try:
                url = cluster.url(schema)
                _seed(url, args.seed_entries, args.dim)
                lag = FollowLag(url)
                try:
                    rate, per = service_rate(url, vecs, r, args.clients, s, on_ack=lag.ack)
                finally:
                    lag.close()
                reached = max(1, round(per))
                pg_at = limit if reached == r else bare_postgres(url, vecs, reached, s)
                lags = lag.lags_ms()
                p50, p99 = np.percentile(lags, [50, 99]) if len(lags) else (float("nan"),) * 2
                show(
                    "service on PostgreSQL",
                    rate,
                    pg_at,
                    per,
                    f"; 1 replica following: lag p50 {p50:.1f} ms, p99 {p99:.1f} ms",
                )
                print(f"  service PostgreSQL / SQLite: {rate / sqlite_service:.2f} (target >= 1 with one replica)")
            finally:
                drop_schema(cluster, schema)
        finally:
            cluster.stop()

    short = [w for w, rate, lim, _ in results if not w.startswith("bare") and rate < TARGET_SHARE * lim]
    slow = [w for w, rate, _, _ in results if w.startswith("service") and rate < TARGET_SERVICE]
    print(
        f"targets: every store and service >= {TARGET_SHARE:.0%} of its bare loop"
        + (f" (short: {', '.join(short)})" if short else " (met)")
        + f"; services >= {TARGET_SERVICE:,}/s"
        + (f" (short: {', '.join(slow)})" if slow else " (met)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
