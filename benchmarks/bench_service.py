"""Load on `ocrr serve` from a second process over 127.0.0.1.

Builds a durable ledger of ``--entries`` entries (the bundled demo set's texts encoded
with MiniLM, repeated with a little noise), starts ``ocrr serve`` on it as a child
process, then runs ``--clients`` concurrent keep-alive clients for ``--seconds``,
mixing predicts by vector, predicts by text and single-item corrections; then, for
``--burst`` seconds, the same clients sending corrections only. Prints requests/s,
p50/p99 latency per kind, durable corrections/s (acknowledged ones, each fsynced before
its answer) and corrections per commit; then stops the server with SIGTERM, reopens the
ledger, checks it fully and checks that every acknowledged correction is in it.

Run: PYTHONPATH=src python benchmarks/bench_service.py [--seconds 20] [--clients 8]
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
                 tag: str):
        super().__init__(daemon=True)
        self.k, self.port, self.until, self.mix, self.tag = k, port, until, mix, tag
        self.base, self.texts, self.labels = base, texts, labels
        self.lat: dict[str, list[float]] = {name: [] for name in KINDS}
        self.acked: list[tuple[int, str, str]] = []  # (entry id, label, text) of each acknowledged correction
        self.errors: list[str] = []

    def run(self) -> None:
        rng = np.random.default_rng([self.k, len(self.tag)])
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        n = 0
        while time.monotonic() < self.until:
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
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ocrr-bench-service-") as tmp:
        path = Path(tmp) / "ledger.db"
        t0 = time.perf_counter()
        base, texts, labels = build_ledger(path, args.entries, args.encoder)
        print(f"ledger: {args.entries} entries of dimension {base.shape[1]} built in {time.perf_counter() - t0:.1f} s")
        port = free_port()
        env = {**os.environ, "OCRR_TOKEN": TOKEN}
        log = open(Path(tmp) / "server.log", "w+")  # a file, not a pipe: a full pipe would stall the server
        server = subprocess.Popen([sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), "--encoder",
                                   args.encoder, "--port", str(port)], env=env, stderr=log, text=True)
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
            phases = [("mixed", args.seconds, MIXED), ("corrections only", args.burst, CORRECTIONS_ONLY)]
            for tag, seconds, mix in phases:
                if seconds > 0:
                    clients, wall, commits = run_phase(port, args.clients, seconds, mix, tag, base, texts, labels)
                    ok &= report(tag, clients, wall, commits)
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


def run_phase(port, n_clients, seconds, mix, tag, base, texts, labels):
    commits0 = _metric(get(port, "/metrics"), "ocrr_ledger_commits_total")
    until = time.monotonic() + seconds
    clients = [Client(k, port, until, base, texts, labels, mix, tag) for k in range(n_clients)]
    t0 = time.perf_counter()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.perf_counter() - t0
    return clients, wall, _metric(get(port, "/metrics"), "ocrr_ledger_commits_total") - commits0


def report(tag, clients, wall, commits) -> bool:
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
    return not errors


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
