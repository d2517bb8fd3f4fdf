"""Shared by the service tests: a tiny text encoder, a state over it, and a real server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from ocrr.service.config import ServiceConfig
from ocrr.service.state import build_state

DIM = 64
TOKEN = "6mHUzGkyPNMnygbUr3uoogiZHOSBdpMp7sykJnsJ3qI"  # secrets.token_urlsafe(32), as one should be made


class HashingEncoder:
    """Character-trigram hashing into DIM dimensions: deterministic, instant, no model."""

    id = "test-hashing"

    def encode(self, texts, progress=None) -> np.ndarray:
        out = np.zeros((len(texts), DIM), np.float32)
        for row, text in enumerate(texts):
            padded = f"  {text.lower()}  "
            for j in range(len(padded) - 2):
                h = hashlib.blake2b(padded[j : j + 3].encode(), digest_size=4).digest()
                out[row, int.from_bytes(h, "little") % DIM] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


SEED_TEXTS = {
    "card_arrival": ["my card has not arrived", "when will my new card come", "card still not delivered"],
    "balance": ["what is my balance", "how much money do i have", "show my account balance"],
    "transfer": ["send money to a friend", "transfer funds to another account", "make a bank transfer"],
}


def open_state(path, **options):
    """The service's state over the ledger file ``path``, with the hashing encoder and TOKEN."""
    return build_state(ServiceConfig(ledger=path, token=TOKEN, **options), encoder=HashingEncoder(), log=lambda m: None)


def seed(state) -> None:
    texts = [t for ts in SEED_TEXTS.values() for t in ts]
    labels = [lab for lab, ts in SEED_TEXTS.items() for _ in ts]
    state.substrate.correct(HashingEncoder().encode(texts), labels, texts)


def cut_back(path, keep: int) -> None:
    """Cut the ledger file back to its first ``keep`` entries consistently (the entries, the
    committed size, the chain head): intact on its own, short of what a service acknowledged."""
    conn = sqlite3.connect(path)
    head = conn.execute("SELECT hash FROM entries WHERE id = ?", (keep - 1,)).fetchone()[0]
    conn.execute("DELETE FROM entries WHERE id >= ?", (keep,))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'size'", (keep,))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'chain_head'", (head,))
    conn.commit()
    conn.close()


def signed_ledger(folder, origin: str):
    """A seeded ledger ``folder/l.db`` with a checkpoint record of all its entries signed by a
    new key (``folder/key``): (path, key path, origin)."""
    from ocrr.ledger.heads import Signer

    signer = Signer.generate(origin)
    signer.save(folder / "key")
    state = open_state(folder / "l.db", key=folder / "key", origin=signer.origin)
    seed(state)
    assert state.substrate.ledger.verify("full").ok
    state.close()
    return folder / "l.db", folder / "key", signer.origin


@contextmanager
def running(app):
    """Serve ``app`` (behind its body limit, as ``ocrr serve`` does) with uvicorn on a free
    127.0.0.1 port in a thread; yield its base URL."""
    import uvicorn

    from ocrr.service.limits import BodyLimit

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(BodyLimit(app), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


# -- `ocrr serve --workers N` in a subprocess ------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_workers(path, port, *extra, workers: int = 2):
    """``ocrr serve --workers`` on ``path`` and ``port`` (stderr piped, text)."""
    command = ["serve", "--ledger", str(path), "--port", str(port), "--workers", str(workers), *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", *command],
        env={**os.environ, "OCRR_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_workers(url, proc, workers, deadline, exclude_pids=()):
    """{worker slot: pid} once every slot answered /health (each request a new connection)."""
    import requests

    seen: dict[int, int] = {}
    while len(seen) < workers:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"workers {sorted(seen)} of {workers} answered"
        try:
            h = requests.get(f"{url}/health", timeout=2, headers={"Authorization": f"Bearer {TOKEN}"}).json()
            if h["pid"] not in exclude_pids:
                seen[h["worker"]] = h["pid"]
        except requests.ConnectionError:
            time.sleep(0.1)
    return seen


def session_on(url, slot, deadline):
    """A keep-alive session whose connection is served by worker ``slot``."""
    import requests

    while time.monotonic() < deadline:
        s = requests.Session()
        try:
            if s.get(f"{url}/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=2).json()["worker"] == slot:
                return s
        except requests.ConnectionError:
            time.sleep(0.1)
        s.close()
    raise AssertionError(f"no connection reached worker {slot}")


def self_signed(folder, name: str = "cert", passphrase: bytes | None = None):
    """A self-signed certificate for 127.0.0.1 (and localhost) and its key, as PEM files
    ``<name>.pem`` and ``<name>.key`` (the key readable by its owner only, encrypted with
    ``passphrase`` if given). Needs ``cryptography`` (the service extra)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), False)
        .sign(key, hashes.SHA256())
    )
    encryption = (
        serialization.NoEncryption() if passphrase is None else serialization.BestAvailableEncryption(passphrase)
    )
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    os.chmod(key_path, 0o600)
    return cert_path, key_path
