"""Durable corrections/s beside their limit, SQLite and PostgreSQL paired in one run.

In ``--rounds`` rounds, back to back, at the same rows per commit (``--per-commit``,
default 256: one full ``/correct`` request), each for ``--seconds``:

  1. bare SQLite loop: ``executemany`` INSERT of ledger-sized rows (dim float32, a label,
     a text, two 32-byte hashes) per transaction, WAL with ``synchronous=FULL``: the limit;
  2. the ledger store on SQLite (``DurableLedger.extend``, one call per commit);
  3. the service on SQLite (``ocrr serve``, ``--clients`` clients POSTing /correct with
     ``--per-commit`` items each, vectors as base64; every answer is a durable append). Four
     clients by default: the bare loop starts its next commit the moment one ends, and the
     service's committer can only do that when a request is already queued; with two clients
     it often waits for both to get their answers and send again (the clients' round trip,
     not the service, sets the pace). Groups then merge requests, so the service is compared
     with its bare loop at the rows per commit it reached (below);
  4. bare psycopg loop: one ``INSERT … SELECT FROM unnest(…)`` per transaction, binary
     parameters, ``synchronous_commit=on``: the limit;
  5. the ledger store on PostgreSQL (``PostgresLedger.extend``);
  6. the service on PostgreSQL; then one more round with a second replica (a store in a
     process of its own) following the log: its follow lag (acknowledged -> the replica
     holds it) p50/p99.

Each figure is the median over the rounds, beside its engine's bare loop measured in the
same round at the same rows per commit (the service's groups may merge requests: its bare
loop is run again at the rows per commit it reached); its share of the limit is the median
of the rounds' shares, so a burst of load from other processes moves one round, not the
figure. Beside each service figure, its process's CPU time per 1,000 corrections (what the
load of other processes moves least), split by thread (``/proc/<pid>/task``: the event loop,
the committer ``ocrr-commit``, the WAL checkpointer, the rest) and, on PostgreSQL, the
server's own processes. The load average is printed before and after. The PostgreSQL server is a
throwaway cluster on this machine (as the tests make it), or ``$OCRR_TEST_PG_DSN``.

Run: PYTHONPATH=src python benchmarks/bench_durable.py [--per-commit 256] [--seconds 3] [--rounds 3]
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
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.ledger.pg_cluster
from bare_sqlite import bare_sqlite_loop  # noqa: E402 - beside this script

TOKEN = secrets.token_urlsafe(32)  # a real random token: the service refuses weak ones
TARGET_SHARE = 0.5  # durable corrections/s as a share of the bare loop
TARGET_SERVICE = 10_000  # durable corrections/s through batched /correct


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
    def make_rows(n: int, prev: bytes, count: int) -> tuple[list[tuple], bytes]:
        return _chained_rows(vecs, n, prev, count)

    return bare_sqlite_loop(folder, make_rows, per_commit, seconds)[0]


def bare_postgres(url: str, vecs: np.ndarray, per_commit: int, seconds: float, table: str) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(
            f"CREATE TABLE {table} (seq bigint PRIMARY KEY, label text NOT NULL, text text, vector bytea NOT NULL, "
            "prev_hash bytea NOT NULL, hash bytea NOT NULL)"
        )
        insert = (  # binary parameters (%b): the fastest batched INSERT psycopg sends
            f"INSERT INTO {table} SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::bytea[], "
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
        conn.execute(f"DROP TABLE {table}")
        return rate


# -- the ledger store --------------------------------------------------------------------


def store_rate(led, vecs: np.ndarray, per_commit: int, seconds: float) -> tuple[float, float]:
    """Entries/s of ``led.extend`` with ``per_commit`` entries per call, and entries per commit."""
    labels = [f"intent_{i % 77}" for i in range(len(vecs))]
    texts = [f"bench correction {i}" for i in range(len(vecs))]
    n, commits0 = 0, led.commits
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        lo = n % (len(vecs) - per_commit)
        led.extend(vecs[lo : lo + per_commit], labels[lo : lo + per_commit], texts[lo : lo + per_commit])
        n += per_commit
    return n / (time.perf_counter() - t0), n / max(led.commits - commits0, 1)


# -- the service -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seed(ledger: str, n: int, dim: int) -> None:
    from ocrr.systems.substrate.persistent import open_substrate

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


def service_rate(port: int, vecs: np.ndarray, per_request: int, clients: int, seconds: float, on_ack=None):
    """Durable corrections/s through the service's /correct and the entries per commit it
    reached. ``on_ack(time, size)``: called after each answer with the ledger size it covers."""
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
                ids = answer[answer.index(b"[") : answer.index(b"]") + 1]  # "ids" comes first: skip the proofs
                on_ack(time.perf_counter(), json.loads(ids)[-1] + 1)
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
    if errors:
        raise SystemExit(f"/correct failed: {errors[0]}")
    return sum(acked) / wall, sum(acked) / max(commits, 1)


def follow_and_record(url: str) -> None:
    """The replica's process (``--replica URL``): follow the log until stdin closes, then print
    each look as ``time size`` (``time.perf_counter``: CLOCK_MONOTONIC, shared by processes)."""
    from ocrr.ledger.postgres.store import PostgresLedger

    looks: list[tuple[float, int]] = []
    with PostgresLedger.open(url, verify="checkpoint") as replica:
        replica.follower = replica.follow(1.0, on_tick=lambda: looks.append((time.perf_counter(), len(replica))))
        print("following", flush=True)
        sys.stdin.read()
    print("\n".join(f"{t!r} {n}" for t, n in looks), flush=True)


class FollowLag:
    """A replica following the log, in a process of its own (as it would run beside the
    service): from each acknowledged answer to the first look of its follower that holds it."""

    def __init__(self, url: str):
        argv = [sys.executable, __file__, "--replica", url]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "following":
            raise SystemExit("the replica did not start following")
        self.acks: list[tuple[float, int]] = []

    def ack(self, when: float, size: int) -> None:
        self.acks.append((when, size))

    def lags_ms(self) -> np.ndarray:
        out, _ = self.proc.communicate()  # closes its stdin: it stops and prints its looks
        looks = np.array([line.split() for line in out.splitlines() if line], dtype=float).reshape(-1, 2)
        times, sizes = looks[:, 0], np.maximum.accumulate(looks[:, 1])
        lags = []
        for when, size in self.acks:
            k = int(np.searchsorted(sizes, size))  # the first look holding it
            if k < len(times):
                lags.append(max(times[k] - when, 0.0))
        return 1000 * np.array(lags)


# -- the run -----------------------------------------------------------------------------


class Figures:
    """Each figure of every round beside the bare loop of the same round; printed as medians."""

    def __init__(self) -> None:
        self.rounds: dict[str, list[tuple[float, float, float]]] = {}  # what -> (rate, limit, rows/commit)
        self.notes: dict[str, str] = {}

    def add(self, what: str, rate: float, limit: float, per_commit: float) -> None:
        self.rounds.setdefault(what, []).append((rate, limit, per_commit))

    def share(self, what: str) -> float:
        return float(np.median([rate / limit for rate, limit, _ in self.rounds[what]]))

    def rate(self, what: str) -> float:
        return float(np.median([rate for rate, _, _ in self.rounds[what]]))

    def show(self) -> None:
        for what, rows in self.rounds.items():
            rates, limits, per = (np.median([r[i] for r in rows]) for i in range(3))
            share = "" if what.startswith("bare") else f"  {self.share(what):4.0%} of it (median of rounds)"
            print(f"  {what:22s} {rates:>9,.0f}/s  limit {limits:>9,.0f}/s{share}  ({per:.0f} rows/commit)")
            if what in self.notes:
                print(f"  {'':22s} {self.notes[what]}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--replica":
        follow_and_record(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-commit", type=int, default=256, help="rows per commit = items per /correct (<= 256)")
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of bare loop, store, service (default 3)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clients", type=int, default=4, help="clients POSTing /correct (default 4)")
    ap.add_argument("--seed-entries", type=int, default=1000, help="entries in each served ledger before measuring")
    ap.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = ap.parse_args()
    if not 1 <= args.per_commit <= 256:
        ap.error("--per-commit must be in 1..256 (the items one /correct request takes)")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")

    from ocrr.ledger.postgres.store import PostgresLedger
    from ocrr.ledger.sqlite.store import DurableLedger

    vecs = unit_rows(max(4 * args.per_commit, 4096), args.dim, 0)
    r, s = args.per_commit, args.seconds
    print(
        f"durable appends, {args.dim}-d rows, {r} rows per commit, {args.rounds} rounds of {s:g} s each "
        f"(bare loop, store, service back to back); the service's {args.clients} clients each POST "
        f"/correct with {r} items and wait for the answer; load before {load()}",
        flush=True,
    )
    fig = Figures()

    cpu_per_1000: dict[str, dict[str, list[float]]] = {}  # what -> thread -> ms per 1,000, by round
    server: list[int] = []  # the PostgreSQL postmaster's pid, once it runs

    def service_round(port: int, name: str, limit: float, bare_at, on_ack=None) -> None:
        """One round of the service, beside ``limit`` (the bare loop at ``r`` rows per commit) or,
        when its groups merged requests, ``bare_at(rows)`` at the rows per commit it reached."""
        cpu0, t0 = _cpu_by_thread(proc.pid, server), time.perf_counter()
        rate, per = service_rate(port, vecs, r, args.clients, s, on_ack)
        done = rate * (time.perf_counter() - t0)
        cpu1 = _cpu_by_thread(proc.pid, server)
        if cpu0 and done:
            used: dict[str, float] = {}  # by thread name; a thread that ended meanwhile is left out
            for task, (thread, seconds) in cpu1.items():
                used[thread] = used.get(thread, 0.0) + seconds - cpu0.get(task, (thread, 0.0))[1]
            rounds = cpu_per_1000.setdefault(name, {})
            for thread, seconds in used.items():
                rounds.setdefault(thread, []).append(1000 * seconds / done)
        reached = max(1, round(per))
        fig.add(name, rate, limit if reached == r else bare_at(reached), per)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        served = str(folder / "served.db")
        _seed(served, args.seed_entries, args.dim)
        proc, port = _serve(served)
        try:
            with DurableLedger.open(folder / "store.db", dim=args.dim) as led:
                for _ in range(args.rounds):
                    limit = bare_sqlite(folder, vecs, r, s)
                    fig.add("bare SQLite loop", limit, limit, r)
                    fig.add("store on SQLite", *_with_limit(store_rate(led, vecs, r, s), limit))
                    service_round(port, "service on SQLite", limit, lambda rows: bare_sqlite(folder, vecs, rows, s))
        finally:
            _stop(proc)

    if not args.no_postgres:
        from tests.ledger.pg_cluster import Cluster, drop_schema, new_schema

        cluster = Cluster(os.environ.get("OCRR_TEST_PG_DSN"))
        if cluster.local:  # a server of our own: its processes are this machine's
            server.append(int((cluster.data / "postmaster.pid").read_text().split()[0]))
        schemas = [new_schema(cluster) for _ in range(3)]
        try:
            bare_url, store_url, served_url = (cluster.url(x) for x in schemas)
            _seed(served_url, args.seed_entries, args.dim)
            proc, port = _serve(served_url)
            try:
                with PostgresLedger.open(store_url, dim=args.dim) as led:
                    for k in range(args.rounds):
                        limit = bare_postgres(bare_url, vecs, r, s, f"bare{k}")
                        fig.add("bare psycopg loop", limit, limit, r)
                        fig.add("store on PostgreSQL", *_with_limit(store_rate(led, vecs, r, s), limit))
                        service_round(
                            port,
                            "service on PostgreSQL",
                            limit,
                            lambda rows, k=k: bare_postgres(bare_url, vecs, rows, s, f"again{k}"),
                        )
                # Then once more with a second replica following the log, in a process of its own
                # (on this machine: it takes its CPU from the same two cores).
                lag = FollowLag(served_url)
                try:
                    service_round(
                        port,
                        "service + 1 replica",
                        limit,
                        lambda rows: bare_postgres(bare_url, vecs, rows, s, "again"),
                        lag.ack,
                    )
                finally:
                    lags = lag.lags_ms()
            finally:
                _stop(proc)
            p50, p99 = np.percentile(lags, [50, 99]) if len(lags) else (float("nan"),) * 2
            fig.notes["service + 1 replica"] = (
                f"the replica's follow lag (acknowledged -> it holds the entry): p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms over {len(lags)} answers"
            )
        finally:
            for x in schemas:
                drop_schema(cluster, x)
            cluster.stop()

    for name, threads in cpu_per_1000.items():  # what load on the machine moves least
        ms = {thread: float(np.median(costs)) * 1000 for thread, costs in threads.items()}
        service = sum(v for thread, v in ms.items() if thread != _PG_SERVER)
        split = ", ".join(f"{thread} {v:.1f}" for thread, v in sorted(ms.items(), key=lambda kv: -kv[1]))
        note = f"CPU per 1,000 corrections (medians of rounds): the service {service:.0f} ms ({split})"
        fig.notes[name] = f"{fig.notes[name]}; {note}" if name in fig.notes else note
    fig.show()
    if not args.no_postgres:
        ratio = fig.rate("service on PostgreSQL") / fig.rate("service on SQLite")
        print(f"  service on PostgreSQL / on SQLite: {ratio:.2f} (target >= 1 with one replica)")
    measured = [w for w in fig.rounds if not w.startswith("bare")]
    short = [w for w in measured if fig.share(w) < TARGET_SHARE]
    slow = [w for w in measured if w.startswith("service") and fig.rate(w) < TARGET_SERVICE]
    print(
        f"targets: every store and service >= {TARGET_SHARE:.0%} of its bare loop"
        + (f" (short: {', '.join(short)})" if short else " (met)")
        + f"; services >= {TARGET_SERVICE:,}/s"
        + (f" (short: {', '.join(slow)})" if slow else " (met)")
        + f"; load after {load()}"
    )
    return 0


_PG_SERVER = "PostgreSQL server"  # its processes' CPU, shown beside the service's threads


def _cpu_by_thread(pid: int, server: list[int]) -> dict[str, tuple[str, float]]:
    """Each thread of process ``pid`` (by its id) -> its name ("event loop" for the main
    thread; ocrr names its own: ``ocrr.utils.thread_names``) and the CPU seconds (user +
    system) it has used; and so for the PostgreSQL server's processes (``server``: its
    postmaster, whose children are the backends). Empty where /proc is missing."""
    out: dict[str, tuple[str, float]] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        found = _stat(f"/proc/{pid}/task/{tid}/stat")
        if found is not None:
            out[tid] = ("event loop" if tid == str(pid) else found[0], found[1])
    for postmaster in server:
        try:
            with open(f"/proc/{postmaster}/task/{postmaster}/children") as f:
                children = f.read().split()
        except OSError:
            continue
        for p in [str(postmaster), *children]:
            found = _stat(f"/proc/{p}/stat")
            if found is not None:
                out[f"server {p}"] = (_PG_SERVER, found[1])
    return out


def _stat(path: str) -> tuple[str, float] | None:
    """(name, CPU seconds) of a process or thread from its ``stat`` file, or None once it is gone."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _with_limit(measured: tuple[float, float], limit: float) -> tuple[float, float, float]:
    rate, per_commit = measured
    return rate, limit, per_commit


if __name__ == "__main__":
    sys.exit(main())
