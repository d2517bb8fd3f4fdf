"""Load on `ocrr serve` from a second process over 127.0.0.1.

Builds a durable ledger of ``--entries`` entries (the bundled demo set's texts encoded
with MiniLM, repeated with a little noise), starts ``ocrr serve`` on it as a child
process, then runs ``--clients`` concurrent keep-alive clients for ``--seconds``,
mixing predicts by vector, predicts by text and single-item corrections; then, for
``--burst`` seconds, the same clients sending corrections only. Prints requests/s,
p50/p99 latency per kind, durable corrections/s (acknowledged ones, each fsynced before
its answer) and corrections per commit; then stops the server with SIGTERM, reopens the
ledger, checks it fully and checks that every acknowledged correction is in it. With
``--rate R`` the mixed load runs once more with the clients paced to R requests/s in all
(latency then counted from when each request was due), to show latency below saturation.

Run: PYTHONPATH=src python benchmarks/bench_service.py [--seconds 20] [--clients 8] [--rate 200]
Targets on the 2-core box: predict by vector p99 <= 10 ms; >= 500 durable corrections/s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

TOKEN = "bench-token-0123456789abcdef"
KINDS = ("predict_vector", "predict_text", "correct")
MIXED = (0.45, 0.10, 0.45)
CORRECTIONS_ONLY = (0.0, 0.0, 1.0)


def build_ledger(path: Path, entries: int, encoder: str) -> tuple[np.ndarray, list[str], list[str]]:
    from ocrr.audit.store import DurableLedger
    from ocrr.data import load_dataset
    from ocrr.encoders import embed_dataset

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client(threading.Thread):
    def __init__(self, k: int, port: int, until: float, base: np.ndarray, texts: list, labels: list, mix: tuple,
                 tag: str, interval: float = 0.0):
        super().__init__(daemon=True)
        self.k, self.port, self.until, self.mix, self.tag = k, port, until, mix, tag
        self.interval = interval  # seconds between this client's sends (0: send as soon as answered)
        self.base, self.texts, self.labels = base, texts, labels
        self.lat: dict[str, list[float]] = {name: [] for name in KINDS}
        self.acked: list[tuple[int, str, str]] = []  # (entry id, label, text) of each acknowledged correction
        self.errors: list[str] = []

    def run(self) -> None:
        rng = np.random.default_rng([self.k, len(self.tag)])
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        n = 0
        due = time.perf_counter() + rng.uniform(0, self.interval)  # paced clients start spread out
        while time.monotonic() < self.until:
            if self.interval:
                time.sleep(max(0.0, due - time.perf_counter()))
            kind = KINDS[rng.choice(len(KINDS), p=self.mix)]
            i = int(rng.integers(len(self.texts)))
            headers = {"Content-Type": "application/json"}
            if kind == "predict_vector":
                vec = self.base[i] + rng.normal(0, 0.02, self.base.shape[1])
                path, body = "/predict", {"vectors": [(vec / np.linalg.norm(vec)).round(6).tolist()]}
            elif kind == "predict_text":
                path, body = "/predict", {"texts": [self.texts[i]]}
            else:
                text = f"bench correction {self.tag} {self.k}-{n}"
                vec = self.base[i] + rng.normal(0, 0.02, self.base.shape[1])
                path = "/correct"
                body = {"vectors": [(vec / np.linalg.norm(vec)).round(6).tolist()], "texts": [text],
                        "labels": [self.labels[i]]}
                headers["Authorization"] = f"Bearer {TOKEN}"
            t0 = time.perf_counter()
            if self.interval:  # latency from when the request was due: a late send counts as waiting
                t0, due = min(t0, due), max(due, t0 - self.interval) + self.interval
            conn.request("POST", path, json.dumps(body), headers)
            resp = conn.getresponse()
            data = resp.read()
            dt = time.perf_counter() - t0
            if resp.status != 200:
                self.errors.append(f"{path} {resp.status} {data[:120]!r}")
                continue
            self.lat[kind].append(dt)
            if kind == "correct":
                self.acked.append((json.loads(data)["ids"][0], self.labels[i], text))
                n += 1
        conn.close()


def get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    data = conn.getresponse().read().decode()
    conn.close()
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="mixed load (default 20 s)")
    ap.add_argument("--burst", type=float, default=5.0, help="corrections only, afterwards (default 5 s; 0: skip)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--no-text", action="store_true", help="serve without an encoder; no predicts by text")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="also run the mixed load paced at this many requests/s in all (0: skip)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ocrr-bench-service-") as tmp:
        path = Path(tmp) / "ledger.db"
        t0 = time.perf_counter()
        base, texts, labels = build_ledger(path, args.entries, args.encoder)
        print(f"ledger: {args.entries} entries of dimension {base.shape[1]} built in {time.perf_counter() - t0:.1f} s")
        port = free_port()
        env = {**os.environ, "OCRR_TOKEN": TOKEN}
        log = open(Path(tmp) / "server.log", "w+")  # a file, not a pipe: a full pipe would stall the server
        encoder = [] if args.no_text else ["--encoder", args.encoder]
        server = subprocess.Popen([sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), *encoder,
                                   "--port", str(port)], env=env, stderr=log, text=True)
        try:
            t0 = time.perf_counter()
            while True:  # wait for the server: open + full verify + index + encoder load
                if server.poll() is not None:
                    log.seek(0)
                    print(log.read())
                    return 1
                try:
                    json.loads(get(port, "/health"))
                    break
                except OSError:
                    time.sleep(0.2)
            print(f"server up in {time.perf_counter() - t0:.1f} s (pid {server.pid}, port {port})")
            acked = []
            ok = True
            mixed = (0.5, 0.0, 0.5) if args.no_text else MIXED
            phases = [("mixed", args.seconds, mixed, 0.0), ("corrections only", args.burst, CORRECTIONS_ONLY, 0.0)]
            if args.rate:
                phases.append((f"mixed, paced at {args.rate:.0f} requests/s", args.seconds, mixed,
                               args.clients / args.rate))
            for tag, seconds, mix, interval in phases:
                if seconds > 0:
                    clients, wall, commits, cpu = run_phase(port, args.clients, seconds, mix, tag, base, texts,
                                                            labels, server.pid, interval)
                    ok &= report(tag, clients, wall, commits, cpu)
                    acked += [a for c in clients for a in c.acked]
        finally:
            server.send_signal(signal.SIGTERM)  # clean shutdown: waits for requests in flight
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()

        from ocrr.audit.store import DurableLedger

        t0 = time.perf_counter()
        with DurableLedger.open(path) as led:  # full check of chain and tree, or it raises
            mem = led.memory
            missing = [a for a in acked if a[0] >= len(mem) or (mem[a[0]].label, mem[a[0]].text) != a[1:]]
            print(f"reopened: {len(led)} entries, chain and Merkle tree verified in {time.perf_counter() - t0:.2f} s; "
                  f"acknowledged corrections missing or wrong: {len(missing)}")
        return 0 if not missing and ok else 1


def cpu_seconds(pid: int) -> np.ndarray:
    """(user, system) CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return np.array([int(fields[11]), int(fields[12])]) / os.sysconf("SC_CLK_TCK")


def run_phase(port, n_clients, seconds, mix, tag, base, texts, labels, pid, interval=0.0):
    commits0 = _metric(get(port, "/metrics"), "ocrr_ledger_commits_total")
    cpu0, own0 = cpu_seconds(pid), time.process_time()
    until = time.monotonic() + seconds
    clients = [Client(k, port, until, base, texts, labels, mix, tag, interval) for k in range(n_clients)]
    t0 = time.perf_counter()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.perf_counter() - t0
    cpu = (cpu_seconds(pid) - cpu0, time.process_time() - own0)
    return clients, wall, _metric(get(port, "/metrics"), "ocrr_ledger_commits_total") - commits0, cpu


def report(tag, clients, wall, commits, cpu) -> bool:
    errors = [e for c in clients for e in c.errors]
    acked = [a for c in clients for a in c.acked]
    total = sum(len(v) for c in clients for v in c.lat.values())
    print(f"\n{tag}: {len(clients)} clients for {wall:.1f} s: {total} requests, {total / wall:.0f} requests/s, "
          f"{len(errors)} errors" + (f" (first: {errors[0]})" if errors else ""))
    print(f"  {'request':<16}{'count':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for name in KINDS:
        lat = np.array([x for c in clients for x in c.lat[name]]) * 1000
        if len(lat):
            print(f"  {name:<16}{len(lat):>8}{np.percentile(lat, 50):>9.2f}{np.percentile(lat, 99):>9.2f}")
    print(f"  durable corrections: {len(acked) / wall:.0f}/s ({len(acked)} acknowledged, {commits:.0f} commits, "
          f"{len(acked) / max(commits, 1):.1f} corrections per fsync)")
    user, system = cpu[0]
    print(f"  CPU: server {user:.1f} s user + {system:.1f} s system ({1000 * (user + system) / max(total, 1):.2f} ms "
          f"per request), load clients "
          f"{cpu[1]:.1f} s, in {wall:.1f} s of wall on {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.1f}")
    return not errors


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
