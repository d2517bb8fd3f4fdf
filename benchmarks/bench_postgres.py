"""Durable corrections/s and predict p99 of `ocrr serve` with 1, 2 and 4 replicas on a
PostgreSQL ledger, beside the SQLite store (one file, `--workers N`).

Each configuration: a ledger seeded with --n entries of --dim, N `ocrr serve` processes (for
PostgreSQL: N replicas on one database, each following the log; for SQLite: one service
with N workers on one file), then
  1. corrections: --clients threads POST /correct (one vector each) round-robin over the
     replicas for --seconds; every answer is a durable, acknowledged append;
  2. predicts: --clients threads POST /predict (one vector) for --seconds while one more
     thread keeps correcting, so replicas follow a moving log; latency p50/p99.
The PostgreSQL server is a throwaway cluster on this machine (as the tests make it), or
$OCRR_TEST_PG_DSN. Run: .venv/bin/python benchmarks/bench_postgres.py [--replicas 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.ledger.pg_cluster

TOKEN = secrets.token_urlsafe(32)  # a real random token: the service refuses weak ones
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(ledger: str, workers: int = 1) -> tuple[subprocess.Popen, str]:
    port = _port()
    argv = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", ledger, "--port", str(port), "--check-every", "0"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    proc = subprocess.Popen(argv, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def _wait_up(procs, bases) -> None:
    import requests

    deadline = time.monotonic() + 120
    for proc, base in zip(procs, bases):
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"a service at {base} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{base} did not start")
            try:
                requests.get(f"{base}/health", timeout=2)
                break
            except requests.ConnectionError:
                time.sleep(0.1)


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def _seed(ledger: str, n: int, dim: int) -> None:
    from ocrr.systems.substrate.persistent import open_substrate

    rng = np.random.default_rng(0)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    with open_substrate(ledger) as sub:
        sub.correct(v, [f"intent_{i % 77}" for i in range(n)])


def _load(bases, path: str, seconds: float, clients: int, dim: int, seed: int, extra_writer: bool = False):
    """``clients`` threads POSTing one vector each to ``path``, round-robin over ``bases``;
    returns (answers, latencies in s)."""
    import requests

    stop = threading.Event()
    lat: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []

    def client(k: int, route: str, out: list[float]) -> None:
        rng = np.random.default_rng(seed * 1000 + k)
        base = bases[k % len(bases)]
        with requests.Session() as s:
            while not stop.is_set():
                v = rng.standard_normal(dim).astype(np.float32)
                v /= np.linalg.norm(v)
                body = {"vectors": [v.tolist()]}
                if route == "/correct":
                    body["labels"] = [f"intent_{k % 77}"]
                t0 = time.perf_counter()
                r = s.post(base + route, json=body, headers=AUTH, timeout=60)
                if r.status_code != 200:
                    errors.append(f"{route} {r.status_code} {r.text[:200]}")
                    return
                out.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(k, path, lat[k])) for k in range(clients)]
    if extra_writer:
        threads.append(threading.Thread(target=client, args=(clients, "/correct", [])))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"requests failed: {errors[0]}")
    flat = [x for xs in lat for x in xs]
    return len(flat), flat


def _run(label: str, ledger: str, replicas: int, args) -> dict:
    if ledger.startswith("postgresql://"):
        started = [_serve(ledger) for _ in range(replicas)]
    else:
        started = [_serve(ledger, workers=replicas)]
    procs, bases = [p for p, _ in started], [b for _, b in started]
    try:
        _wait_up(procs, bases)
        n, _ = _load(bases, "/correct", args.seconds, args.clients, args.dim, 1)
        m, lat = _load(bases, "/predict", args.seconds, args.clients, args.dim, 2, extra_writer=True)
    finally:
        _stop(procs)
    q = statistics.quantiles(lat, n=100)
    row = {
        "store": label,
        "replicas": replicas,
        "corrections/s": n / args.seconds,
        "predicts/s": m / args.seconds,
        "p50 ms": 1000 * q[49],
        "p99 ms": 1000 * q[98],
    }
    print(
        f"{label:10s} {replicas:>8d} {row['corrections/s']:>14.0f} {row['predicts/s']:>11.0f} "
        f"{row['p50 ms']:>8.2f} {row['p99 ms']:>8.2f}",
        flush=True,
    )
    return row


def _store_worker(url: str, gather: float, threads: int, seconds: float, dim: int) -> None:
    """One writer process: ``threads`` threads each appending one entry at a time; prints the count."""
    from ocrr.ledger.location import open_store
    from ocrr.ledger.postgres.store import PostgresLedger

    led = (
        PostgresLedger.open(url, verify="checkpoint", gather=gather)
        if url.startswith("postgresql")
        else open_store(url)
    )
    counts = [0] * threads
    end = time.monotonic() + seconds

    def run(k: int) -> None:
        rng = np.random.default_rng(k)
        while time.monotonic() < end:
            vec = rng.standard_normal(dim).astype(np.float32)
            led.append(vec / np.linalg.norm(vec), "x")  # a ledger takes unit rows only
            counts[k] += 1

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(sum(counts), led.commits)
    led.close()


def _store_rates(cluster, args) -> None:
    """Appends/s at the store (no HTTP): processes x threads appending one entry each."""
    from tests.ledger.pg_cluster import drop_schema, new_schema

    print("\nthe store alone (no HTTP): durable appends/s, one entry per append call")
    print(f"{'store':22s} {'processes x threads':>20s} {'appends/s':>10s} {'entries/commit':>15s}")
    for procs, threads in ((1, 1), (1, 16), (4, 4)):
        for label, gather in (("postgres gather 2 ms", 0.002), ("postgres gather 0", 0.0), ("sqlite", None)):
            with tempfile.TemporaryDirectory() as tmp:
                schema = None
                if gather is None:
                    target = str(Path(tmp) / "s.db")
                else:
                    schema = new_schema(cluster)
                    target = cluster.url(schema)
                _seed(target, 10, args.dim)
                argv = [sys.executable, __file__, "--store-worker", target, str(gather or 0), str(threads)]
                argv += [str(args.seconds), str(args.dim)]
                outs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
                got = [tuple(map(int, p.communicate()[0].split())) for p in outs]
                if schema is not None:
                    drop_schema(cluster, schema)
            n, commits = sum(g[0] for g in got), sum(g[1] for g in got)
            print(f"{label:22s} {f'{procs} x {threads}':>20s} {n / args.seconds:>10.0f} {n / max(commits, 1):>15.1f}")


def _follow_lag(cluster, args) -> None:
    """Time from an acknowledged append in one store to a following store holding it (NOTIFY,
    then reading the entries), both in this process; the timer (1 s) bounds it otherwise."""
    from tests.ledger.pg_cluster import drop_schema, new_schema

    from ocrr.ledger.postgres.follow import Follower
    from ocrr.ledger.postgres.store import PostgresLedger

    schema = new_schema(cluster)
    try:
        url = cluster.url(schema)
        rng = np.random.default_rng(0)
        lags = []
        with PostgresLedger.open(url, dim=args.dim) as writer, PostgresLedger.open(url) as replica:
            follower = Follower(replica, every=1.0).start()
            follower.listening.wait(10)
            for _ in range(200):
                vec = rng.standard_normal(args.dim).astype(np.float32)
                n = writer.append(vec / np.linalg.norm(vec), "x") + 1  # a ledger takes unit rows only
                t0 = time.perf_counter()
                while len(replica) < n:
                    time.sleep(0.0002)
                lags.append(time.perf_counter() - t0)
                time.sleep(0.02)
        q = statistics.quantiles(lags, n=100)
        print(
            f"\nfollow lag (append acknowledged -> another store holds it), 200 appends: "
            f"p50 {1000 * q[49]:.2f} ms, p99 {1000 * q[98]:.2f} ms, max {1000 * max(lags):.2f} ms "
            f"(bound without NOTIFY: the 1 s timer); wakeups {follower.wakeups}, timer polls {follower.polls}"
        )
    finally:
        drop_schema(cluster, schema)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--store-worker":
        _store_worker(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--n", type=int, default=5000, help="entries seeded before measuring")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clients", type=int, default=8, help="client threads per phase")
    ap.add_argument("--seconds", type=float, default=8.0, help="per phase")
    ap.add_argument("--store-only", action="store_true", help="only the store-level appends/s (no HTTP)")
    args = ap.parse_args()

    from tests.ledger.pg_cluster import Cluster, drop_schema, new_schema

    dsn = os.environ.get("OCRR_TEST_PG_DSN")
    cluster = Cluster(dsn)
    print(
        f"limit: one {os.cpu_count()}-core machine runs the clients (Python threads), every replica and "
        "the database; corrections/s is bounded by one WAL flush per group commit (synchronous_commit=on) "
        "and, here, by client and HTTP overhead on the shared cores; figures are acknowledged (durable) appends"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"seeded entries {args.n} x {args.dim}, {args.clients} clients, {args.seconds:.0f} s per phase; load {load}")
    print(f"{'store':10s} {'replicas':>8s} {'corrections/s':>14s} {'predicts/s':>11s} {'p50 ms':>8s} {'p99 ms':>8s}")
    try:
        for r in [] if args.store_only else args.replicas:
            with tempfile.TemporaryDirectory() as tmp:
                path = str(Path(tmp) / "bench.db")
                _seed(path, args.n, args.dim)
                _run("sqlite", path, r, args)
            schema = new_schema(cluster)
            try:
                url = cluster.url(schema)
                _seed(url, args.n, args.dim)
                _run("postgres", url, r, args)
            finally:
                drop_schema(cluster, schema)
        _follow_lag(cluster, args)
        _store_rates(cluster, args)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
