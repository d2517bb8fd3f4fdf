"""`ocrr serve` on a ledger of a million (or ten million) entries, each figure beside its target.

Builds (once; cached under ``--cache``) a durable ledger of ``--entries`` synthetic unit
vectors of ``--dim`` with class structure (``--classes`` random unit centres, each entry its
class's centre plus Gaussian noise, renormalised), appended through the ledger's own bulk path
(``DurableLedger.extend`` in blocks, one transaction each, not HTTP), and records a signed
checkpoint over the tree the build hashed (as ``ocrr ledger import`` does). Then, each
beside its target, with the load average (the box is shared):

* full verify: ``ocrr ledger verify FILE`` (rehashes every entry), wall time;
* restart to healthy: ``ocrr serve --quick-open --key … --workers N`` started, until every
  worker answers ``/health``;
* RSS and PSS of the supervisor and of each worker after the start and after the load
  (anonymous, file-backed and shared-memory pages apart: the rows the supervisor hands the
  workers are shared memory, counted whole in each RSS and split between them in PSS);
* predict by vector at a paced ``--rate`` (requests/s in all, ``--seconds``): p50, p99;
* with ``--system substrate:index=ivf_…`` and ``--index-file`` (an index ``ocrr ledger index``
  saved for the cached ledger): the opt-in approximate search, each worker opening the saved
  index instead of training one;
* agreement with the exact vote: ``--agreement`` queries sent one per request, their labels
  compared with the substrate's exact search and vote computed in this process after the
  service stopped, from the file's rows checked and streamed a block at a time
  (``ocrr.systems.substrate.streamed_vote``: at 10M the rows are not held);
* append cost: ``--appends`` single-item ``/correct`` requests one after another (each durable
  before its answer), median and p99 latency. Run the script at 10k and at 1M/10M: flat means
  the same figure at every size;
* the supervisor's rehash of the entries the quick open took on trust (it starts as the
  workers are handed them and runs on idle CPU while all of the above runs): its log line,
  which says how long it took, waited for up to ``--rehash-wait`` seconds.

The cached file grows by the corrections each run appends (a few hundred entries): the sizes
printed are the file's own. Big files: 1M entries of 384 take about 2 GB, 10M about 20 GB;
delete ``--cache`` afterwards.

Run: PYTHONPATH=src python benchmarks/bench_service_scale.py --entries 1000000 --cache /tmp/ocrr-scale
Targets (2 workers): healthy <= 10 s at 1M, <= 60 s at 10M; RSS <= 2 GB per worker at 1M,
<= 24 GB for two at 10M; predict p99 at 1,000 requests/s <= 5 ms at 1M, <= 10 ms at 10M.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import TOKEN, Load, free_port, get, run_load  # noqa: E402 - the same load generator

ORIGIN = "bench.invalid/scale"
BLOCK = 50_000  # entries appended per transaction while building


def targets(entries: int) -> dict[str, float]:
    """The targets at this size (the 10M ones above 1M)."""
    big = entries > 1_000_000
    return {
        "healthy_s": 60.0 if big else 10.0,
        "rss_gb_per_worker": 12.0 if big else 2.0,
        "p99_ms": 10.0 if big else 5.0,
    }


def load_average() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def class_centres(classes: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 0])
    centres = rng.normal(size=(classes, dim)).astype(np.float32)
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def synthetic_block(centres: np.ndarray, lo: int, hi: int, seed: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Entries ``lo``..``hi``: (unit vectors, class numbers), the same for the same arguments."""
    rng = np.random.default_rng([seed, 1, lo])
    classes = rng.integers(len(centres), size=hi - lo)
    vecs = centres[classes] + rng.normal(0, noise, (hi - lo, centres.shape[1])).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32), classes


def build(path: Path, key: Path, args) -> None:
    """The ledger at ``path`` (``args.entries`` entries through the bulk path) and a signed
    checkpoint over it, unless the cache holds them already."""
    from ocrr.ledger.heads import Signer
    from ocrr.ledger.sqlite.store import DurableLedger

    if path.exists() and key.exists():
        print(f"ledger: cached {path}")
        return
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)
    Signer.generate(ORIGIN).save(key)
    centres = class_centres(args.classes, args.dim, args.seed)
    t0 = time.perf_counter()

    def chain_head(vecs, labels, texts, hashes: list[bytes]) -> bytes:
        return hashes[-1]  # keep no copy of the rows: at 10M they would not fit beside the build

    with DurableLedger.open(path, dim=args.dim, apply=chain_head, signer=Signer.load(key, ORIGIN)) as led:
        for lo in range(0, args.entries, BLOCK):
            hi = min(lo + BLOCK, args.entries)
            vecs, classes = synthetic_block(centres, lo, hi, args.seed, args.noise)
            led.extend(vecs, [f"c{c}" for c in classes.tolist()], [f"item {i}" for i in range(lo, hi)])
            if (hi // BLOCK) % 20 == 0 or hi == args.entries:
                rate = hi / (time.perf_counter() - t0)
                print(f"  built {hi:,} entries ({rate:,.0f}/s, {load_average()})", flush=True)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        # Signed over the tree this process built while appending, as `ocrr ledger import` does:
        # every entry was hashed here, so a second full read would only repeat that work.
        led._record_checkpoint()
    print(
        f"ledger: {args.entries:,} entries of dimension {args.dim} appended in {built:.1f} s "
        f"({args.entries / built:,.0f}/s), signed checkpoint recorded in {time.perf_counter() - t0:.1f} s "
        f"({load_average()})"
    )


def full_verify(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ocrr.cli", "ledger", "verify", str(path)], check=True, capture_output=True)
    return time.perf_counter() - t0


def worker_pids(server: int) -> list[int]:
    """The server's processes: itself (with workers, the supervisor) and its children (the
    workers, and the supervisor's small helper; no encoder processes here: no --encoder)."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == server:
                children.append(int(entry.name))
    return [server, *sorted(children)]


def rss_mb(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[name] = int(value.split()[0]) / 1024
    with open(f"/proc/{pid}/smaps_rollup") as fh:  # PSS: shared pages split between the processes mapping them
        for line in fh:
            name, _, value = line.partition(":")
            if name == "Pss":
                out[name] = int(value.split()[0]) / 1024
    return out


def show_rss(when: str, server: int, limit_gb: float) -> bool:
    """Each of the server's processes (the workers, and the supervisor's small helpers)."""
    ok = True
    for pid in worker_pids(server):
        m = rss_mb(pid)
        ok &= m["VmRSS"] <= 1024 * limit_gb
        role = "supervisor" if pid == server else "worker" if m["VmRSS"] > 64 else "helper"
        print(
            f"  RSS {when}, {role} pid {pid}: {m['VmRSS']:,.0f} MB, PSS {m.get('Pss', float('nan')):,.0f} MB "
            f"(anonymous {m['RssAnon']:,.0f}, file {m['RssFile']:,.0f}, "
            f"shared memory {m['RssShmem']:,.0f}; peak {m['VmHWM']:,.0f}) target <= {limit_gb:g} GB ({load_average()})"
        )
    return ok


def queries(args, n: int, salt: int) -> np.ndarray:
    """Noisy copies of class centres (not stored rows): each query's neighbours are a real vote."""
    centres = class_centres(args.classes, args.dim, args.seed)
    rng = np.random.default_rng([args.seed, 2, salt])
    q = centres[rng.integers(len(centres), size=n)] + rng.normal(0, args.noise, (n, args.dim)).astype(np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def post(port: int, path: str, body: dict, token: bool = False) -> tuple[int, dict]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {TOKEN}"} if token else {})}
    conn.request("POST", path, json.dumps(body), headers)
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data


def served_labels(port: int, qs: np.ndarray, clients: int) -> list:
    """Each query's label, one query per request, ``clients`` requests at a time (so they
    share the service's pooled passes, as under load)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(q: np.ndarray) -> str:
        status, data = post(port, "/predict", {"vectors": [q.tolist()]})
        assert status == 200, data
        return data["predictions"][0]["label"]

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, qs))


def exact_labels(path: Path, key: Path, system: str, qs: np.ndarray, appended: int) -> list:
    """The exact vote: ``system``'s own exact search and vote over every stored row, streamed
    (``ocrr.systems.substrate.streamed_vote``): the file checked from its signed checkpoint
    without holding its rows, then read a block at a time, each row proven the checked one, so
    that at 10M it fits beside nothing more than a block. The ``appended`` corrections (random
    directions, far from every query) came after the agreement queries were answered, so none
    may be a neighbour here."""
    from ocrr.ledger.heads import Signer
    from ocrr.ledger.location import CheckedRows, scan_location
    from ocrr.systems.registry import make_system
    from ocrr.systems.substrate.streamed_vote import exact_vote

    report, scan = scan_location(path, "checkpoint", (Signer.load(key, ORIGIN).vkey,), rows=False)
    if not report or scan is None or scan.dim is None:
        raise SystemExit(f"the ledger is damaged: {report.reason}; run `ocrr ledger verify {path}`")
    checked, dim = scan.hashes, scan.dim
    del scan  # the tree: only the checked chain hashes are needed to read the rows back
    with CheckedRows(path, checked, dim) as stored:
        found = exact_vote(stored, qs, make_system(system))
    if (found.ids >= len(checked) - appended).any():
        raise SystemExit("an appended correction is a neighbour of an agreement query: rerun with --appends 0")
    return found.labels


def appends(port: int, args, n: int) -> np.ndarray:
    rng = np.random.default_rng([args.seed, 5])  # random directions: no query's neighbours
    vecs = rng.normal(size=(n, args.dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    took = []
    for j, vec in enumerate(vecs.astype(np.float32)):
        body = {"vectors": [vec.tolist()], "labels": ["appended"], "texts": [f"scale append {j}"]}
        t0 = time.perf_counter()
        status, data = post(port, "/correct", body, token=True)
        took.append(time.perf_counter() - t0)
        assert status == 200, data
    return 1000 * np.asarray(took)


def serve(path: Path, key: Path, args, log) -> tuple[subprocess.Popen, int, float]:
    port = free_port()
    cmd = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), "--port", str(port)]
    cmd += ["--workers", str(args.workers), "--quick-open", "--key", str(key), "--origin", ORIGIN]
    cmd += ["--system", args.system, *(["--pin-workers"] if args.pin_workers else [])]
    cmd += ["--index-file", str(args.index_file)] if args.index_file else []
    cmd += ["--check-every", str(args.check_every)] if args.check_every is not None else []
    t0 = time.perf_counter()
    server = subprocess.Popen(cmd, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=log, text=True)
    up: set[int] = set()
    while len(up) < args.workers:  # another process's start: nothing to wait on but its answer
        if server.poll() is not None:
            log.seek(0)
            raise SystemExit(f"ocrr serve exited:\n{log.read()}")
        try:
            up.add(json.loads(get(port, "/health"))["worker"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    return server, port, time.perf_counter() - t0


WARM_AFTER_S = 2.0  # the paced load's first seconds, reported apart: a service just started is slower in them


def service_cpu(pid: int) -> float:
    """CPU seconds used so far by the process ``pid`` and its children (the workers)."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def paced(port: int, args) -> tuple[float, float, int, int, float]:
    """Predicts by vector only, paced to ``args.rate`` in all: (p50 ms, p99 ms, answered, errors,
    p99 ms of the requests due ``WARM_AFTER_S`` or more after the first)."""
    base = queries(args, 256, salt=3)
    texts, labels = ["unused"] * len(base), ["unused"] * len(base)
    loads = [Load(k, "scale", base, texts, labels, (1.0, 0.0, 0.0), False) for k in range(args.clients)]
    interval = args.clients / args.rate
    for load in loads:
        load.prepare(int(args.seconds / interval) + 2)
    run_load(port, loads, args.seconds, interval)
    lat = 1000 * np.concatenate([np.asarray(load.lat["predict_vector"]) for load in loads])
    sent = np.concatenate([np.asarray(load.sent["predict_vector"]) for load in loads])
    errors = sum(len(load.errors) for load in loads)
    if not len(lat):
        return float("nan"), float("nan"), 0, errors, float("nan")
    warm = lat[sent >= sent.min() + WARM_AFTER_S]
    warm_p99 = float(np.percentile(warm, 99)) if len(warm) else float("nan")
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), len(lat), errors, warm_p99


def rehashed(log, wait: float) -> str:
    """What the supervisor said of rehashing the entries its quick open took on trust (it
    starts once the workers are handed them, on idle CPU), waiting up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        log.seek(0)
        said = [line.strip() for line in log if "took on trust are intact" in line or "fails closed" in line]
        if said or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    return (
        f"supervisor: {said[-1]}"
        if said
        else f"the supervisor's rehash of the trusted entries: not done within {wait:g} s"
    )


def mark(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=0.05, help="per-component noise around a class centre")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, required=True, help="folder that keeps the built ledger between runs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pin-workers", action="store_true")
    ap.add_argument("--system", default="substrate", help="ocrr serve --system (default substrate)")
    ap.add_argument(
        "--index-file",
        type=Path,
        default=None,
        help="ocrr serve --index-file: an IVF index `ocrr ledger index` saved for the cached ledger with its key "
        "(origin " + ORIGIN + "), opened by each worker instead of trained; --system must be the one it was built with",
    )
    ap.add_argument("--rate", type=float, default=1000.0, help="predicts by vector per second, in all")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0, help="paced load (0: skip)")
    ap.add_argument(
        "--windows", type=int, default=1, help="paced windows of --seconds, back to back, each reported (default 1)"
    )
    ap.add_argument("--agreement", type=int, default=2000, help="queries compared with the exact vote (0: skip)")
    ap.add_argument("--appends", type=int, default=200, help="single-item corrections timed (0: skip)")
    ap.add_argument("--skip-verify", action="store_true", help="do not time a full verify")
    ap.add_argument(
        "--rehash-wait",
        type=float,
        default=600.0,
        help="seconds to wait, after the rest, for the supervisor's rehash of the entries the quick open "
        "took on trust (0: do not wait)",
    )
    ap.add_argument(
        "--check-every",
        type=float,
        default=None,
        help="ocrr serve --check-every (default: the service's own): seconds between background checks",
    )
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    path = args.cache / f"ledger-{args.entries}-{args.dim}-{args.classes}-{args.seed}.db"
    key = path.with_suffix(".pem")
    want = targets(args.entries)
    if not args.build_only:
        print(f"bench_service_scale: {args.entries:,} entries, {args.workers} workers, {load_average()}", flush=True)
    if args.build_only:
        build(path, key, args)
        return 0
    # built in a child process: the builder's copy of every row is not this process's while it measures
    subprocess.run([sys.executable, __file__, *sys.argv[1:], "--build-only"], check=True)
    ok = True
    if not args.skip_verify:
        print(f"full verify (ocrr ledger verify, every entry rehashed): {full_verify(path):.1f} s ({load_average()})")
    log = open(args.cache / "server.log", "w+")  # a file: a full pipe would stall the server
    server, port, healthy = serve(path, key, args, log)
    try:
        ok &= healthy <= want["healthy_s"]
        print(
            f"restart to healthy (--quick-open, {args.workers} workers): {healthy:.1f} s, target <= "
            f"{want['healthy_s']:g} s: {mark(healthy <= want['healthy_s'])} ({load_average()})"
        )
        ok &= show_rss("after the start", server.pid, want["rss_gb_per_worker"])
        if args.agreement:
            qs = queries(args, args.agreement, salt=4)
            t0 = time.perf_counter()
            served = served_labels(port, qs, args.clients)
            took = time.perf_counter() - t0
            print(f"  {args.agreement} predicts, {args.clients} at a time, in {took:.1f} s ({load_average()})")
        for window in range(args.windows if args.seconds else 0):
            began, cpu0 = time.perf_counter(), service_cpu(server.pid)
            p50, p99, n, errors, warm_p99 = paced(port, args)
            busy = (service_cpu(server.pid) - cpu0) / (time.perf_counter() - began)
            ok &= p99 <= want["p99_ms"] and not errors
            print(
                f"predict by vector at {args.rate:g}/s offered ({args.clients} paced clients, {args.seconds:g} s"
                + (f", window {window + 1} of {args.windows}" if args.windows > 1 else "")
                + f"): {n} answered, {errors} errors, p50 {p50:.2f} ms, p99 {p99:.2f} ms, target p99 <= "
                f"{want['p99_ms']:g} ms: {mark(p99 <= want['p99_ms'] and not errors)}; the requests due "
                f"{WARM_AFTER_S:g} s or more after the first: p99 {warm_p99:.2f} ms; the service's processes "
                f"busy {busy:.2f} cores ({load_average()})"
            )
        ok &= show_rss("after the load", server.pid, want["rss_gb_per_worker"])
        if args.appends:
            took = appends(port, args, args.appends)
            print(
                f"append cost: {args.appends} single-item /correct, one at a time (durable before the answer): "
                f"median {np.median(took):.2f} ms, p99 {np.percentile(took, 99):.2f} ms; flat = the same at "
                f"10k entries (run this script with --entries 10000 beside it; the ledger's own append at "
                f"each size: bench_append_flat.py) ({load_average()})"
            )
            slowest = np.argsort(-took, kind="stable")[:3]  # (a p99 of 200 is its second slowest: say which)
            print("  the slowest: " + ", ".join(f"{took[j]:.2f} ms (#{j + 1})" for j in slowest))
        if args.rehash_wait:
            print(f"  {rehashed(log, args.rehash_wait)} ({load_average()})")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    if args.agreement:
        t0 = time.perf_counter()
        exact = exact_labels(path, key, args.system, qs, appended=args.appends)
        took = time.perf_counter() - t0
        print(f"  the exact vote, streamed from the checked file, in {took:.1f} s ({load_average()})")
        same = sum(a == b for a, b in zip(served, exact))
        ok &= same == len(qs)
        print(
            f"agreement with the exact vote: {same}/{len(qs)} queries ({100 * same / len(qs):.2f} %), "
            f"required: all ({load_average()})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
