"""Load on `ocrr serve` from a second process over 127.0.0.1.

Builds a durable ledger of ``--entries`` entries (the bundled demo set's texts encoded
with MiniLM, repeated with a little noise), starts ``ocrr serve`` on it as a child
process, then runs ``--clients`` concurrent keep-alive clients for ``--seconds``,
mixing predicts by vector, predicts by text and single-item corrections; then, for
``--burst`` seconds, the same clients sending corrections only. Prints requests/s,
p50/p90/p99/max latency per kind, durable corrections/s (acknowledged ones, each fsynced
before its answer) and corrections per commit, the service's own timing of /predict (from
its /metrics: what share of the time is spent inside the app), how many connections each
worker holds (each stays with the worker that serves its first request), the CPU used by the
server and by the load generator, and the load average around each phase (on a shared box, latency follows it);
then stops the server with SIGTERM, reopens the ledger, checks it fully and checks that
every acknowledged correction is in it. With ``--rate R1,R2,...`` the mixed load runs
again at each rate, the clients paced to R requests/s in all (latency then counted from
when each request was due; how late this client itself sent them, its timer and its turn on
a core, is printed beside), each on a fresh server and ledger of ``--entries`` entries
(so every rate starts from the same ledger size): latency below saturation, and the
highest rate that still meets a latency target.

The load generator must not be what is measured: a Python client with one thread per
connection spends its own milliseconds under its own GIL (json.dumps of a 384-float
vector alone is ~0.25 ms) and counts them as the server's. So every client is a raw
HTTP/1.1 keep-alive connection in one asyncio loop (uvloop when installed), request
bodies are built before the clock starts (vectors serialised once, into a pool; a paced
run's requests all made before it begins, since the generator shares the cores), answers
are parsed only as far as their length until the run is over, and latency runs from the
send to the last byte of the answer. ``--b64`` sends vectors as base64 float32
(``vectors_b64``) instead of JSON lists.

Each run also prints, in the same conditions, the limits the service is measured against:
the bare cost of one predict in this process (the substrate's own search and vote over the
same ledger, without HTTP, alone and pooled as the service runs it, beside the bare float32
matrix-vector product, at the ledger's size before and after the load), one predict over
HTTP with nothing else running, back to back and after 20 ms idle (the latency floor: on a
virtual machine an idle core halts and its caches go cold), and a plain SQLite insert loop
with the service's durability (WAL, synchronous=FULL, rows of the same size, one commit per
group of as many rows as the service's group commit reached in that phase); after a paced
phase, the same paced load on ideal servers (``ideal_server.py``, one process per worker)
that spend the service's CPU per request and do nothing else: the p99 that much CPU allows
on this box when every request is alike.

With ``--witnesses N`` each run is a pair, back to back on fresh ledgers: the service signing
(``--key``) without witnesses, then with N local ``ocrr witness`` processes (``ocrr serve
--witness``, quorum all of them); the second run also times, one correction at a time, the
wait from a correction's answer to a /checkpoint cosigned by the quorum that covers it (the
witnesses' round trip, plus up to the service's 0.1 s look for new entries).

Run: PYTHONPATH=src python benchmarks/bench_service.py [--seconds 20] [--clients 8] [--rate 300,600] [--b64]
[--repeat 4]
Targets on a 2-core box: predict by vector p99 <= 5 ms at 1,000 requests/s offered
(--no-text --workers 2 --paced-only --rate 1000, and with --pin-workers); >= 2,000 durable corrections/s.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bare_sqlite import bare_sqlite_loop  # noqa: I001 - beside this script

TOKEN = secrets.token_urlsafe(32)  # the service refuses weak tokens
ORIGIN = "bench.invalid/ledger"  # the log's name when it signs (--sign, --witnesses)
KINDS = ("predict_vector", "predict_text", "correct")
MIXED = (0.45, 0.10, 0.45)
CORRECTIONS_ONLY = (0.0, 0.0, 1.0)
TARGET_P99_MS = 5.0  # the target for predicts by vector (at 1,000 requests/s offered, 2 workers)
TARGET_CORRECTIONS = 2000  # the target: durable corrections per second
LIMIT_SECONDS = 2.0  # how long the plain SQLite insert loop runs


def build_ledger(path: Path, entries: int, encoder: str) -> tuple[np.ndarray, list[str], list[str]]:
    from ocrr.data import load_dataset
    from ocrr.encoders import embed_dataset
    from ocrr.ledger.sqlite.store import DurableLedger

    data = load_dataset("demo")
    texts, labels = list(data.train.texts), list(data.train.labels)
    base = np.asarray(embed_dataset(data, encoder).train, np.float32)  # cached after the first run
    rng = np.random.default_rng(0)
    pick = np.arange(entries) % len(texts)
    vecs = base[pick] + rng.normal(0, 0.01, (entries, base.shape[1])).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    with DurableLedger.open(path) as led:
        led.extend(vecs, [labels[i] for i in pick], [texts[i] for i in pick])
    return base, texts, labels


def bare_predict(path: Path, base: np.ndarray, repeats: int = 200) -> str:
    """The limit of a predict by vector: the substrate's own search and vote of one query over
    the ledger at ``path``, in this process, no HTTP (best and median of ``repeats``): alone
    (``explain``) and pooled as the service runs it (``explain_each``), both exact through
    the index's shortlist with the service's code, and the bare float32 matrix-vector product
    over the same rows."""
    from threadpoolctl import threadpool_limits

    from ocrr.index.exact import ExactIndex
    from ocrr.service.pool import SHORTLIST_CODE
    from ocrr.service.threads import one_omp_thread
    from ocrr.systems.substrate.persistent import open_substrate

    rng = np.random.default_rng(1)
    queries = base[rng.integers(len(base), size=repeats)] + rng.normal(0, 0.02, (repeats, base.shape[1]))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    with threadpool_limits(1), open_substrate(path, verify="checkpoint") as sub:
        index = sub.system.index_
        assert isinstance(index, ExactIndex)
        shortlist = index.shortlist(SHORTLIST_CODE)  # imports FAISS, whose OpenMP pool one_omp_thread then limits
        one_omp_thread()  # as the service runs it: one BLAS / OpenMP thread
        with sub.ledger.lock.read():
            matrix = sub.system.ledger_.vectors[: len(sub)]
            shortlist.catch_up(matrix)
        timed = {}
        for name, one in (
            ("alone", lambda q: sub.explain(q)),
            ("pooled", lambda q: sub.explain_each([q], shortlist)),
            ("matvec", lambda q: matrix @ q[0]),
        ):
            one(queries[:1])  # warm
            times = []
            for j in range(repeats):
                t0 = time.perf_counter()
                one(queries[j : j + 1])
                times.append(time.perf_counter() - t0)
            timed[name] = (1000 * min(times), 1000 * float(np.median(times)))
        n = len(sub)
    return (
        f"bare predict in-process at {n} entries (ms, best / median of {repeats}): "
        + ", ".join(f"{name} {best:.3f} / {median:.3f}" for name, (best, median) in timed.items())
        + f"; the shortlist read: {SHORTLIST_CODE} codes, {shortlist.nbytes / 1e6:.1f} MB "
        f"(the float32 rows: {matrix.nbytes / 1e6:.1f} MB)"
    )


def sqlite_limit(folder: Path, dim: int, per_commit: int, seconds: float = LIMIT_SECONDS) -> str:
    """The limit of durable corrections: a plain SQLite insert loop with the service's
    durability (WAL, synchronous=FULL), rows as big as a ledger entry's (dim float32, a label,
    a text, two 32-byte hashes), ``per_commit`` rows per transaction, for ``seconds``."""
    raw = np.random.default_rng(2).normal(size=dim).astype("<f4").tobytes()

    def make_rows(n: int, prev: bytes, count: int) -> tuple[list[tuple], bytes]:
        rows = []
        for i in range(n, n + count):
            digest = hashlib.sha256(prev + raw).digest()
            rows.append((i, "label", f"bench correction {i}", raw, prev, digest))
            prev = digest
        return rows, prev

    rows_per_s, commits_per_s = bare_sqlite_loop(folder, make_rows, per_commit, seconds)
    return (
        f"limit: plain SQLite insert loop (WAL, synchronous=FULL, {per_commit} rows per commit, one "
        f"thread): {rows_per_s:.0f} rows/s, {commits_per_s:.0f} commits/s"
    )


def ideal_limit(args, tag: str, mix: tuple, interval: float, cpu_ms: float, base, texts, labels) -> tuple[str, float]:
    """The latency limit at this load: the same paced requests (``tag``'s, made alike) on
    ``ideal_server.py``, one process per worker (pinned as the workers are), each request spending the service's CPU per
    request (``cpu_ms``) on the event loop: first 2 s without spinning, for the ideal server's
    own HTTP cost, then ``args.seconds`` spinning the difference. Returns the line to print
    and the p99."""

    from ocrr.service.threads import core_for_slot

    def run(spin_ms: float, seconds: float) -> tuple[np.ndarray, float]:
        ports = [free_port() for _ in range(args.workers)]
        env = {**os.environ, "IDEAL_SPIN_MS": f"{spin_ms:.6f}"}
        here = str(Path(__file__).resolve().parent)
        servers = [
            subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "ideal_server:app", "--app-dir", here, "--port", str(p)]
                + ["--log-level", "warning", "--no-access-log"],
                env=env,
            )
            for p in ports
        ]
        try:
            for p in ports:
                for _ in range(200):
                    try:
                        socket.create_connection(("127.0.0.1", p)).close()
                        break
                    except OSError:
                        time.sleep(0.05)
                else:
                    raise RuntimeError(f"the ideal server on port {p} did not start in 10 s (is uvicorn installed?)")
            if args.pin_workers:  # as ocrr serve --pin-workers: the k-th on the k-th core (every thread)
                for k, server in enumerate(servers):
                    core = {core_for_slot(k)}
                    for tid in os.listdir(f"/proc/{server.pid}/task"):
                        os.sched_setaffinity(int(tid), core)
            loads = [Load(k, tag, base, texts, labels, mix, args.b64) for k in range(args.clients)]
            for load in loads:
                load.prepare(int(seconds / interval) + 2)
            cpu0 = sum(cpu_seconds(s.pid) for s in servers)
            run_load(ports, loads, seconds, interval)
            cpu = float(np.sum(sum(cpu_seconds(s.pid) for s in servers) - cpu0))
        finally:
            for s in servers:
                s.terminate()
                s.wait(timeout=30)
        lat = np.array([x for c in loads for v in c.lat.values() for x in v]) * 1000
        return lat, 1000 * cpu / max(len(lat), 1)

    _, http_ms = run(0.0, 2.0)
    spin = max(0.0, cpu_ms - http_ms)
    lat, ideal_ms = run(spin, args.seconds)
    p50, p99 = np.percentile(lat, [50, 99])
    return (
        f"limit: the same paced load on {args.workers} ideal server process{'es' if args.workers > 1 else ''} "
        f"(benchmarks/ideal_server.py: uvicorn, connections split evenly, every request the same {spin:.2f} ms "
        f"of CPU on its event loop, {ideal_ms:.2f} ms per request in all against the service's {cpu_ms:.2f}; no "
        f"threads, locks or disk): p50 {p50:.2f} ms, p99 {p99:.2f} ms over {len(lat)} requests",
        float(p99),
    )


def round_trips(port: int, base: np.ndarray, n: int = 100, idle_s: float = 0.02) -> str:
    """The floor of a predict's latency over HTTP: one connection, one request at a time, back
    to back and after ``idle_s`` of nothing (on a virtual machine an idle core halts, and the
    caches go cold: waking costs far more than the work)."""
    vec = base[0] + 0.01
    request = _post("/predict", json.dumps({"vectors": [(vec / np.linalg.norm(vec)).round(6).tolist()]}))
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as answers:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        medians = []
        for pause in (0.0, idle_s):
            took = []
            for _ in range(n):
                if pause:
                    time.sleep(pause)
                t0 = time.perf_counter()
                sock.sendall(request)
                length = 0
                while (line := answers.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answers.read(length)
                took.append(time.perf_counter() - t0)
            medians.append(1000 * float(np.median(took[n // 10 :])))
    return (
        f"one predict over HTTP, one request at a time (median of {n}): {medians[0]:.2f} ms back to back, "
        f"{medians[1]:.2f} ms after {1000 * idle_s:.0f} ms idle"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Load:
    """One client's request stream, its latencies and its acknowledged corrections.

    Bodies are made before the clock starts where they can be (vectors serialised once into
    a pool; a correction's body is that JSON plus its own text), so the load generator's
    own Python time stays out of the measured latency as far as possible."""

    def __init__(self, k: int, tag: str, base: np.ndarray, texts: list, labels: list, mix: tuple, b64: bool):
        self.k, self.tag, self.mix, self.texts, self.labels = k, tag, mix, texts, labels
        self.rng = np.random.default_rng([self.k, len(tag)])
        self.pool = []  # (entry index, JSON of a noisy copy of that entry's vector)
        for _ in range(64):
            i = int(self.rng.integers(len(texts)))
            vec = base[i] + self.rng.normal(0, 0.02, base.shape[1])
            vec = (vec / np.linalg.norm(vec)).astype(np.float32)
            if b64:
                field = '"vectors_b64": ' + json.dumps([base64.b64encode(vec.astype("<f4").tobytes()).decode()])
            else:
                field = '"vectors": ' + json.dumps([vec.round(6).tolist()])
            self.pool.append((i, field))
        self.lat: dict[str, list[float]] = {name: [] for name in KINDS}
        self.acked: list[tuple[int, str, str]] = []  # (entry id, label, text) of each acknowledged correction
        self.pending: list[tuple[bytes, str, str]] = []  # correction answers, read after the clock stops
        self.errors: list[str] = []
        self.late: dict[str, list[float]] = {name: [] for name in KINDS}  # paced: sent how long after it could go
        self.sent: dict[str, list[float]] = {name: [] for name in KINDS}  # when each answered request was due
        self.n = 0
        self.worker: int | None = None  # the worker process this client's connection reached
        self.ready: deque[tuple[str, bytes, tuple]] = deque()

    def prepare(self, count: int) -> None:
        """Make the next ``count`` requests now, before the clock starts (the same requests,
        in the same order, as making each just before its send): the load generator shares
        the box's two cores with the server, and its own work during the run delays it."""
        self.ready.extend(self._make() for _ in range(count))

    def next(self) -> tuple[str, bytes, tuple]:
        return self.ready.popleft() if self.ready else self._make()

    def _make(self) -> tuple[str, bytes, tuple]:
        kind = KINDS[self.rng.choice(len(KINDS), p=self.mix)]
        i, field = self.pool[int(self.rng.integers(len(self.pool)))]
        if kind == "predict_vector":
            return kind, _post("/predict", "{" + field + "}"), ()
        if kind == "predict_text":
            j = int(self.rng.integers(len(self.texts)))
            return kind, _post("/predict", json.dumps({"texts": [self.texts[j]]})), ()
        text = f"bench correction {self.tag} {self.k}-{self.n}"
        self.n += 1
        body = "{" + field + ', "texts": ' + json.dumps([text]) + ', "labels": ' + json.dumps([self.labels[i]]) + "}"
        return kind, _post("/correct", body, TOKEN), (self.labels[i], text)

    def settle(self) -> None:
        """Read the ids out of the correction answers (after the measurement)."""
        for data, label, text in self.pending:
            self.acked.append((json.loads(data)["ids"][0], label, text))
        self.pending.clear()


def _post(path: str, body: str, token: str | None = None) -> bytes:
    data = body.encode()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = next(int(v) for k, _, v in (x.partition(b":") for x in lines[1:]) if k.lower() == b"content-length")
    return status, await reader.readexactly(length)


async def _drive(load: Load, port: int, until: float, interval: float) -> None:
    """One keep-alive connection sending ``load``'s requests: as soon as the last is answered,
    or every ``interval`` seconds (latency then counted from when each request was due)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # Which worker serves this connection (before the clock: the kernel hands each connection
    # to one worker, which keeps it or hands it on to a less loaded one before reading it).
    writer.write(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
    load.worker = json.loads((await _read_response(reader))[1]).get("worker")
    clock = time.perf_counter
    due = clock() + load.rng.uniform(0, interval)  # paced clients start spread out
    answered = clock()  # when the previous answer arrived
    try:
        while clock() < until:
            kind, request, meta = load.next()
            if interval:
                await asyncio.sleep(max(0.0, due - clock()))
            t0 = clock()
            late = 0.0
            if interval:  # a late send counts as waiting
                late = max(0.0, t0 - max(due, answered))
                t0, due = min(t0, due), max(due, t0 - interval) + interval
            writer.write(request)
            status, data = await _read_response(reader)
            answered = clock()
            dt = answered - t0
            if status != 200:
                load.errors.append(f"{kind} {status} {data[:120]!r}")
                continue
            load.lat[kind].append(dt)
            load.late[kind].append(late)
            load.sent[kind].append(t0)
            if kind == "correct":
                load.pending.append((data, *meta))
    finally:
        writer.close()


def run_load(port: int | list[int], loads: list, seconds: float, interval: float) -> float:
    """All clients in this process's one asyncio loop (uvloop when installed); returns the wall
    time. A list of ports: client k connects to the (k mod n)-th."""
    ports = port if isinstance(port, list) else [port]

    async def main() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(_drive(load, ports[k % len(ports)], t0 + seconds, interval) for k, load in enumerate(loads))
        )
        return time.perf_counter() - t0

    try:
        import uvloop

        wall = uvloop.run(main())
    except ImportError:
        wall = asyncio.run(main())
    for load in loads:
        load.settle()
    return wall


def get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})  # /health's worker needs it
    data = conn.getresponse().read().decode()
    conn.close()
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="mixed load (default 20 s; 0: skip)")
    ap.add_argument("--burst", type=float, default=5.0, help="corrections only, afterwards (default 5 s; 0: skip)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--no-text", action="store_true", help="serve without an encoder; no predicts by text")
    ap.add_argument("--encoder-nice", default=None, help="pass --encoder-nice N|idle to ocrr serve")
    ap.add_argument(
        "--rate",
        default="",
        help="also run the mixed load paced at these many requests/s in all (comma-separated, e.g. "
        "300,600), each for --seconds on a fresh server and ledger of --entries entries",
    )
    ap.add_argument(
        "--predict-share",
        type=float,
        default=None,
        help="share of the mixed load's requests that are predicts (default 0.5 with --no-text, else "
        "0.45 by vector + 0.10 by text); 1: predicts only",
    )
    ap.add_argument("--workers", type=int, default=1, help="pass --workers N to ocrr serve (default 1)")
    ap.add_argument(
        "--pin-workers",
        action="store_true",
        help="pass --pin-workers to ocrr serve (each worker on its own core); the ideal servers are pinned alike",
    )
    ap.add_argument(
        "--paced-only",
        action="store_true",
        help="run only the --rate phases (no load as fast as answered, no corrections-only burst)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run everything this many times, each on a fresh server and ledger, and end with each "
        "phase's by-vector p99 run by run and over all the runs' predicts together (on a shared box "
        "one run decides little)",
    )
    ap.add_argument(
        "--sign", action="store_true", help="serve with --key (a new key in the run's folder): heads are signed"
    )
    ap.add_argument(
        "--witnesses",
        type=int,
        default=0,
        metavar="N",
        help="paired runs: signing without witnesses, then with N local `ocrr witness` processes; the "
        "second also times a correction's wait for a cosigned checkpoint (implies --sign)",
    )
    ap.add_argument(
        "--b64",
        action="store_true",
        help="send vectors as base64 little-endian float32 (vectors_b64) instead of JSON lists",
    )
    args = ap.parse_args()
    try:
        rates = [float(r) for r in args.rate.split(",") if r.strip()]
    except ValueError:
        ap.error(f"--rate takes requests/s, comma-separated (e.g. 300,600), not {args.rate!r}")
    if (
        any(r <= 0 for r in rates)
        or min(args.clients, args.entries, args.workers, args.repeat) < 1
        or args.witnesses < 0
        or min(args.seconds, args.burst) < 0
    ):
        ap.error(
            "--rate values, --clients, --entries, --workers and --repeat must be positive; --seconds and --burst "
            "not negative"
        )
    if args.pin_workers and args.workers < 2:
        ap.error("--pin-workers spreads several workers over the cores: add --workers 2 or more")
    if args.predict_share is not None and not 0.0 <= args.predict_share <= 1.0:
        ap.error("--predict-share must be between 0 and 1")
    print(f"load average at start: {Path('/proc/loadavg').read_text().strip()} ({os.cpu_count()} cores)")
    mixed = (0.5, 0.0, 0.5) if args.no_text else MIXED
    if args.predict_share is not None:
        text = 0.0 if args.no_text else min(0.1, args.predict_share)
        mixed = (args.predict_share - text, text, 1.0 - args.predict_share)
    runs = (
        []
        if args.paced_only
        else [[("mixed", args.seconds, mixed, 0.0), ("corrections only", args.burst, CORRECTIONS_ONLY, 0.0)]]
    )
    runs += [
        [(f"mixed, paced at {r:.0f} requests/s (fresh ledger)", args.seconds, mixed, args.clients / r)] for r in rates
    ]
    ok = True
    p99s: dict[str, list[float]] = {}  # phase -> by-vector p99 of each run
    latencies: dict[str, list[np.ndarray]] = {}  # phase -> each run's by-vector latencies (ms)
    for _ in range(args.repeat):
        for phases in runs:
            phases = [p for p in phases if p[1] > 0]
            if phases:
                for witnesses in (0, args.witnesses) if args.witnesses else (0,):  # paired: without, then with
                    ok &= serve_and_load(args, phases, p99s, latencies, witnesses)
    if args.repeat > 1:
        print(f"\np99 over {args.repeat} runs (target for predicts by vector: <= {TARGET_P99_MS:g} ms):")
        for tag, values in p99s.items():
            met = sum(v <= TARGET_P99_MS for v in values)
            print(
                f"  {tag}: median {np.median(values):.2f} ms, runs {' '.join(f'{v:.2f}' for v in values)}; "
                f"{met} of {len(values)} at or under the target"
            )
        # Every run serves the same load from the same start: their predicts together give the
        # p99 of that load over all the runs' time, which one noisy window moves less.
        for tag, runs_ms in latencies.items():
            together = np.concatenate(runs_ms)
            print(
                f"  {tag}, the {len(runs_ms)} runs' {len(together)} predicts together: "
                f"p99 {np.percentile(together, 99):.2f} ms"
            )
        # The host moves both figures (the same requests cost 10-20 % more CPU in a busy hour);
        # the service's p99 above its ideal server's, run by run, is the service's own share.
        for tag, values in p99s.items():
            ideal = p99s.get(tag.replace(", predicts by vector", ", the ideal server, every request"))
            if tag.endswith(", predicts by vector") and ideal and len(ideal) == len(values):
                gaps = [v - i for v, i in zip(values, ideal)]
                print(
                    f"  {tag}, above the ideal server of the same run: median {np.median(gaps):.2f} ms, "
                    f"runs {' '.join(f'{g:.2f}' for g in gaps)}"
                )
    return 0 if ok else 1


def _signing(args, folder: Path, witnesses: list[tuple[str, str]] = ()) -> list[str]:
    """``--key`` for ``ocrr serve`` with ``--sign`` (or witnesses): a new key in ``folder``, and
    ``--witness URL=VKEY`` per witness."""
    if not args.sign and not args.witnesses:
        return []
    out = ["--key", str(folder / "key.pem"), "--origin", ORIGIN]
    for url, vkey in witnesses:
        out += ["--witness", f"{url}={vkey}"]
    return out


def start_witnesses(n: int, folder: Path, log) -> tuple[list[subprocess.Popen], list[tuple[str, str]]]:
    """``n`` ``ocrr witness serve`` processes witnessing the key made in ``folder``; their (url, vkey)."""
    from ocrr.ledger.cosignature import Cosigner
    from ocrr.ledger.heads import Signer

    signer = Signer.generate(ORIGIN)
    signer.save(folder / "key.pem")
    procs, found = [], []
    for k in range(n):
        cosigner = Cosigner.generate(f"bench.invalid/w{k}")
        cosigner.save(folder / f"witness{k}.pem")
        port = free_port()
        cmd = [sys.executable, "-m", "ocrr.cli", "witness", "serve", "--state", str(folder / f"witness{k}.db")]
        cmd += ["--new-state", "--key", str(folder / f"witness{k}.pem"), "--name", cosigner.name]
        cmd += ["--port", str(port), "--log", f"{ORIGIN}={signer.vkey}"]
        procs.append(subprocess.Popen(cmd, stderr=log))
        found.append((f"http://127.0.0.1:{port}", cosigner.vkey))
    for proc, (url, _) in zip(procs, found):
        while True:  # a child process's port: no event to wait on
            assert proc.poll() is None, "ocrr witness serve exited (see the server log)"
            try:
                get(int(url.rsplit(":", 1)[1]), "/")
                break
            except OSError:
                time.sleep(0.1)
    return procs, found


def witnessed_wait(port: int, base: np.ndarray, n: int = 30) -> str:
    """Milliseconds from a correction's answer to a cosigned /checkpoint covering it, one at a time."""
    took = []
    for k in range(n):
        vec = base[k] / np.linalg.norm(base[k])
        body = json.dumps({"vectors": [vec.round(6).tolist()], "labels": ["bench"], "texts": [f"witnessed {k}"]})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/correct", body, {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        size = json.loads(conn.getresponse().read())["ids"][0] + 1
        conn.close()
        t0 = time.perf_counter()
        while int(get(port, "/checkpoint").split("\n")[1]) < size:
            time.sleep(0.002)  # another process's background work: nothing to wait on but its answer
        took.append(1000 * (time.perf_counter() - t0))
    return (
        f"a correction's wait for a cosigned /checkpoint covering it, one at a time ({n}): median "
        f"{np.median(took):.0f} ms, p90 {np.percentile(took, 90):.0f} ms, max {max(took):.0f} ms"
    )


def serve_and_load(args, phases, p99s: dict, latencies: dict, witnesses: int = 0) -> bool:
    """A fresh ledger and ``ocrr serve`` on it (with ``witnesses`` local witnesses), the phases'
    loads, a clean stop, and the check that the reopened ledger verifies and holds every
    acknowledged correction."""
    if args.witnesses:
        phases = [(f"{tag}, {witnesses} witnesses", *rest) for tag, *rest in phases]
    with tempfile.TemporaryDirectory(prefix="ocrr-bench-service-") as tmp:
        path = Path(tmp) / "ledger.db"
        t0 = time.perf_counter()
        base, texts, labels = build_ledger(path, args.entries, args.encoder)
        print(
            f"\nledger: {args.entries} entries of dimension {base.shape[1]} built in {time.perf_counter() - t0:.1f} s"
        )
        print(bare_predict(path, base))
        port = free_port()
        env = {**os.environ, "OCRR_TOKEN": TOKEN}
        log = open(Path(tmp) / "server.log", "w+")  # a file, not a pipe: a full pipe would stall the server
        witness_procs: list[subprocess.Popen] = []
        witnessed: list[tuple[str, str]] = []
        if args.sign or args.witnesses:
            if witnesses:
                witness_procs, witnessed = start_witnesses(witnesses, Path(tmp), log)
            else:
                from ocrr.ledger.heads import Signer

                Signer.generate(ORIGIN).save(Path(tmp) / "key.pem")
        encoder = [] if args.no_text else ["--encoder", args.encoder]
        if args.encoder_nice is not None:
            encoder += ["--encoder-nice", str(args.encoder_nice)]
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ocrr.cli",
                "serve",
                "--ledger",
                str(path),
                *encoder,
                "--port",
                str(port),
                "--workers",
                str(args.workers),
                *(["--pin-workers"] if args.pin_workers else []),
                *_signing(args, Path(tmp), witnessed),
            ],
            env=env,
            stderr=log,
            text=True,
        )
        try:
            t0 = time.perf_counter()
            up: set[int] = set()
            while len(up) < args.workers:  # wait for every worker: open + index + encoder load
                if server.poll() is not None:
                    log.seek(0)
                    print(log.read())
                    return False
                try:
                    up.add(json.loads(get(port, "/health"))["worker"])
                except OSError:
                    time.sleep(0.2)
            print(
                f"server up in {time.perf_counter() - t0:.1f} s (pid {server.pid}, port {port}, "
                f"{args.workers} worker process{'es' if args.workers > 1 else ''})"
            )
            print(round_trips(port, base))
            acked = []
            group_sizes = []  # (phase, corrections per commit reached), for the SQLite limit
            paced = []  # (phase, its pacing, the server's CPU ms per request), for the ideal server's limit
            ok = True
            print(
                f"load: {args.clients} keep-alive HTTP/1.1 connections from this process (pid {os.getpid()}), "
                "all in one asyncio loop; request bodies built before each send's clock starts (vectors as "
                + ("base64 float32" if args.b64 else "JSON lists of floats")
                + "); latency = from the send "
                "(paced: from when the request was due) to the last byte of the answer, as this client sees it"
            )
            for tag, seconds, mix, interval in phases:
                loads, *measured = run_phase(
                    port, args.clients, seconds, mix, tag, base, texts, labels, server.pid, interval, args.b64
                )
                ok &= report(tag, loads, *measured, p99s=p99s, latencies=latencies)
                acked += [a for c in loads for a in c.acked]
                n_acked, commits = sum(len(c.acked) for c in loads), measured[1][0]
                if n_acked:
                    group_sizes.append((tag, max(1, round(n_acked / max(commits, 1)))))
                if interval:
                    paced.append((tag, mix, interval, cpu_per_request(loads, measured[2][0])))
            if witnesses:
                text = get(port, "/metrics")
                print(
                    f"witnesses: {_metric(text, 'ocrr_witness_requests_total'):.0f} add-checkpoint requests, "
                    f"{_metric(text, 'ocrr_witness_failures_total'):.0f} failed, "
                    f"{_metric(text, 'ocrr_witness_refusals_total'):.0f} refused; witnessed head "
                    f"{_metric(text, 'ocrr_witness_lag_entries'):.0f} entries behind the log"
                )
                print(witnessed_wait(port, base))
        finally:
            server.send_signal(signal.SIGTERM)  # clean shutdown: waits for requests in flight
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
            for proc in witness_procs:
                proc.terminate()
                proc.wait(timeout=30)

        from ocrr.ledger.sqlite.store import DurableLedger

        t0 = time.perf_counter()
        with DurableLedger.open(path) as led:  # full check of chain and tree, or it raises
            mem = led.memory
            missing = [a for a in acked if a[0] >= len(mem) or (mem[a[0]].label, mem[a[0]].text) != a[1:]]
            print(
                f"reopened: {len(led)} entries, chain and Merkle tree verified in {time.perf_counter() - t0:.2f} s; "
                f"acknowledged corrections missing or wrong: {len(missing)}"
            )
        print(bare_predict(path, base))
        for tag, per_commit in group_sizes:
            print(f"{tag}: {sqlite_limit(Path(tmp), base.shape[1], per_commit)}")
        for tag, mix, interval, cpu_ms in paced:
            line, p99 = ideal_limit(args, tag, mix, interval, cpu_ms, base, texts, labels)
            print(f"{tag}: {line}")
            p99s.setdefault(f"{tag}, the ideal server, every request", []).append(p99)
        return not missing and ok


def cpu_seconds(pid: int) -> np.ndarray:
    """(user, system) CPU seconds so far of a process and every process under it (its workers
    and encoder processes), from Linux /proc (children that ended are not counted)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            stats[int(entry.name)] = (int(fields[1]), int(fields[11]), int(fields[12]))  # ppid, utime, stime
    tree, total = {pid}, np.zeros(2)
    for _ in range(4):  # workers, their encoder processes
        tree |= {p for p, (ppid, *_) in stats.items() if ppid in tree}
    for p in tree & stats.keys():
        total += stats[p][1:]
    return total / os.sysconf("SC_CLK_TCK")


def run_phase(port, n_clients, seconds, mix, tag, base, texts, labels, pid, interval=0.0, b64=False):
    loads = [Load(k, tag, base, texts, labels, mix, b64) for k in range(n_clients)]
    if interval:  # paced: each client sends one request per interval
        for load in loads:
            load.prepare(int(seconds / interval) + 2)
    before = _metrics(port)
    cpu0, own0, load0 = cpu_seconds(pid), time.process_time(), os.getloadavg()[0]
    wall = run_load(port, loads, seconds, interval)
    cpu = (cpu_seconds(pid) - cpu0, time.process_time() - own0)
    after = _metrics(port)
    return loads, wall, after - before, cpu, (load0, os.getloadavg()[0])


_COUNTERS = (
    "ocrr_ledger_commits_total",
    "ocrr_predict_searches_total",
    "ocrr_predict_pooled_total",
    "ocrr_ledger_entries",
    "ocrr_predict_full_scans_total",
    # the service's own timing of /predict (cumulative histogram buckets, all workers)
    'ocrr_request_seconds_bucket{path="/predict",le="0.0025"}',
    'ocrr_request_seconds_bucket{path="/predict",le="0.005"}',
    'ocrr_request_seconds_count{path="/predict"}',
)


def _metrics(port: int) -> np.ndarray:
    text = get(port, "/metrics")
    return np.array([_metric(text, name) for name in _COUNTERS])


def report(tag, loads, wall, counters, cpu, loadavg, p99s: dict, latencies: dict) -> bool:
    commits, searches, pooled, grown, full, within_2_5, within_5, timed = counters
    errors = [e for c in loads for e in c.errors]
    acked = [a for c in loads for a in c.acked]
    total = sum(len(v) for c in loads for v in c.lat.values())
    print(
        f"\n{tag}: {len(loads)} clients for {wall:.1f} s: {total} requests, {total / wall:.0f} requests/s, "
        f"{len(errors)} errors" + (f" (first: {errors[0]})" if errors else "")
    )
    print(f"  {'request':<16}{'count':>8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name in KINDS:
        lat = np.array([x for c in loads for x in c.lat[name]]) * 1000
        if len(lat):
            p50, p90, p99 = np.percentile(lat, [50, 90, 99])
            target = f"  (p99 target <= {TARGET_P99_MS:g} ms)" if name == "predict_vector" else ""
            print(f"  {name:<16}{len(lat):>8}{p50:>9.2f}{p90:>9.2f}{p99:>9.2f}{lat.max():>9.2f}{target}")
            if name == "predict_vector":
                p99s.setdefault(f"{tag}, predicts by vector", []).append(float(p99))
                latencies.setdefault(f"{tag}, predicts by vector", []).append(lat)
    print(
        f"  durable corrections: {len(acked) / wall:.0f}/s ({len(acked)} acknowledged, {commits:.0f} commits, "
        f"{len(acked) / max(commits, 1):.1f} corrections per fsync; target >= {TARGET_CORRECTIONS}/s); the ledger "
        f"grew by {grown:.0f} entries"
    )
    if searches:
        print(
            f"  predicts by vector: {pooled:.0f} answered by {searches:.0f} shared searches "
            f"({pooled / searches:.2f} per search); queries scanned in full (not settled by the "
            f"shortlist): {full:.0f}"
        )
    late = np.array([x for c in loads for x in c.late["predict_vector"]]) * 1000
    if late.any():
        lat = np.array([x for c in loads for x in c.lat["predict_vector"]]) * 1000
        print(
            f"  this client's own lateness, included above (sent after it could go: its timer, its turn on "
            f"a core): p50 {np.percentile(late, 50):.2f} ms, p99 {np.percentile(late, 99):.2f} ms; predict_vector "
            f"without it: p50 {np.percentile(lat - late, 50):.2f} ms, p99 {np.percentile(lat - late, 99):.2f} ms"
        )
    if timed:
        print(
            f"  the service's own timing of /predict (from the app's entry to its last byte handed to the "
            f"server): {100 * within_2_5 / timed:.1f} % within 2.5 ms, {100 * within_5 / timed:.2f} % within 5 ms; "
            "the rest of a slow request's time is before the app reads it or after it answers (its worker "
            "busy or off a core, this client's turn on a core)"
        )
    per_worker = Counter(c.worker for c in loads)
    print(
        "  connections per worker: "
        + ", ".join(f"{n} on worker {w}" for w, n in sorted(per_worker.items(), key=lambda wn: str(wn[0])))
        + " (each stays with the worker that served its first request)"
    )
    user, system = cpu[0]
    per_request = cpu_per_request(loads, cpu[0])
    print(
        f"  CPU: server (all its processes) {user:.1f} s user + {system:.1f} s system ({per_request:.2f} ms "
        f"per request), load generator {cpu[1]:.1f} s ({1000 * cpu[1] / max(total, 1):.2f} ms per request), "
        f"in {wall:.1f} s of wall on {os.cpu_count()} cores"
    )
    print(
        f"  load average (1 min) {loadavg[0]:.2f} at the start, {loadavg[1]:.2f} at the end "
        f"(/proc/loadavg: {Path('/proc/loadavg').read_text().strip()})"
    )
    return not errors


def cpu_per_request(loads, server_cpu) -> float:
    """The server's CPU ms (user + system) per request answered."""
    answered = sum(len(v) for c in loads for v in c.lat.values())
    return 1000 * float(np.sum(server_cpu)) / max(answered, 1)


def _metric(text: str, name: str) -> float:
    """The value of the sample ``name`` (``metric`` or ``metric{label="value",...}``) in a /metrics
    text, 0 if absent; read with Prometheus's own parser, so the order of the labels and the
    spelling of the numbers do not matter."""
    ((wanted,),) = [f.samples for f in text_string_to_metric_families(name + " 0\n")]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == wanted.name and sample.labels == wanted.labels:
                return sample.value
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
