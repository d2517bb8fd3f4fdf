"""What ``ocrr serve`` is asked to do: one frozen, validated object.

The command line (``cli/serve.py``) and Python callers build a ``ServiceConfig``; the
service never reads argv. Every value is checked when the config is made, so a mistake is
reported before a ledger is opened or a port claimed. Options are named as the flags of
``ocrr serve`` name them (``workers`` is ``--workers``).
"""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import check_cosigner_vkey
from ocrr.ledger.location import as_location, is_database_url
from ocrr.service.encoder import check_nice
from ocrr.service.hosts import allowed_hosts
from ocrr.service.tokens import MAKE_TOKEN, MIN_TOKEN_BITS, token_weakness

MAX_WORKERS = 64


@dataclass(frozen=True)
class ServiceConfig:
    """The options of ``ocrr serve`` (see ``ocrr serve -h`` for each one's help)."""

    ledger: Path | str  # the durable ledger file (created if missing), or a postgresql:// URL
    system: str = "substrate"  # substrate spec, e.g. substrate:k=3 or bounded_fifo_1000
    seed: int = 0  # seed of a bounded substrate's eviction
    encoder: str | None = None  # encoder spec for texts (minilm, st:<model id>); None: vectors only
    encoder_nice: int | str = "idle"  # the encoder process's niceness 0-19, or "idle" (SCHED_IDLE)
    fit: str | None = None  # seed an empty ledger with this dataset's train split
    data_dir: str | None = None  # where ``fit`` looks for the dataset
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port
    token: str | None = None  # the bearer token (>= 128 bits); None: a new random one, in token_path
    key: Path | None = None  # Ed25519 key signing the heads (ocrr ledger keygen)
    origin: str | None = None  # the log's name in signed heads (default ocrr.invalid/<file>)
    signed_state: Path | None = None  # the record of what ``key`` signed (default <key>.signed)
    quick_open: bool = False  # on open, rehash only the entries after the last checkpoint
    workers: int = 1  # processes answering on one port, over one ledger file
    pin_workers: bool = False  # keep each worker on its own core (Linux; --workers 2 or more)
    check_every: float = 60.0  # seconds between background checks of the file (0: none)
    verify_every: float = 30.0  # /verify rehashes the file at most this often; others get the last result
    tls_cert: Path | None = None  # PEM certificate (uvicorn's ssl_certfile); with tls_key
    tls_key: Path | None = None  # PEM private key (uvicorn's ssl_keyfile)
    insecure_public: bool = False  # allow a non-loopback host without TLS (--insecure-public)
    allowed_hosts: tuple[str, ...] | None = None  # Host names answered; None: loopback names and host (hosts.py)
    header_timeout: float = 10.0  # seconds a connection has to send a request's headers (header_timeout.py)
    # Witnesses that cosign the service's checkpoints (service/witnessing.py): (url, vkey) pairs, as
    # --witness URL=VKEY; quorum: how many must cosign a checkpoint before /checkpoint serves it
    # (None: all of them).
    witnesses: tuple[tuple[str, str], ...] = ()
    quorum: int | None = None

    def __post_init__(self) -> None:
        # Paths may come as strings; a frozen dataclass stores the converted value this way.
        object.__setattr__(self, "ledger", as_location(self.ledger))  # a URL stays a string
        if self.key is not None:
            object.__setattr__(self, "key", Path(self.key))
        if self.signed_state is not None:
            if self.key is None:
                raise OcrrError("--signed-state records what --key signs: give --key too, or drop --signed-state")
            object.__setattr__(self, "signed_state", Path(self.signed_state))
        if not _is_int(self.workers) or not 1 <= self.workers <= MAX_WORKERS:
            raise OcrrError(
                f"--workers takes 1 to {MAX_WORKERS} processes, got {self.workers!r}; one per core is the usual choice"
            )
        if not isinstance(self.pin_workers, bool):
            raise OcrrError(f"--pin-workers is on or off (True or False), got {self.pin_workers!r}")
        if self.pin_workers and self.workers < 2:
            raise OcrrError(
                "--pin-workers keeps each of several workers on its own core; with one worker there is "
                "nothing to spread: add --workers N (one per core), or drop --pin-workers"
            )
        if self.pin_workers and not hasattr(os, "sched_setaffinity"):
            raise OcrrError("--pin-workers needs Linux (it sets each worker's CPU affinity); drop it here")
        if not _is_int(self.port) or not 0 <= self.port <= 65535:
            raise OcrrError(f"--port takes 0 to 65535 (0: any free port), got {self.port!r}; pick another --port")
        if not isinstance(self.host, str) or not self.host:
            raise OcrrError(f"--host needs an address to listen on, got {self.host!r}; e.g. 127.0.0.1 or 0.0.0.0")
        if not _is_int(self.seed):
            raise OcrrError(f"--seed takes an integer, got {self.seed!r}")
        if not isinstance(self.system, str) or not self.system:
            raise OcrrError(f"--system takes a substrate spec, got {self.system!r}; e.g. substrate or substrate:k=3")
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise OcrrError("the service token is empty; give a token, or none to have a random one made")
        if self.token is not None:
            check_token(self.token, "the service token")
        for name in ("tls_cert", "tls_key"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        if (self.tls_cert is None) != (self.tls_key is None):
            raise OcrrError("TLS needs both --tls-cert and --tls-key (PEM files); give both or neither")
        if not self.tls and not self.insecure_public and not is_loopback(self.host):
            raise OcrrError(
                f"--host {self.host} is reachable from other machines, and without TLS the token and "
                "users' texts would cross the network in clear; give --tls-cert and --tls-key, or "
                "--insecure-public if a proxy in front terminates TLS"
            )
        for name in ("check_every", "verify_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise OcrrError(f"--{name.replace('_', '-')} takes seconds >= 0, got {value!r}")
        check_nice(self.encoder_nice)
        object.__setattr__(self, "allowed_hosts", allowed_hosts(self.allowed_hosts, self.host))
        value = self.header_timeout
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise OcrrError(
                f"--header-timeout takes seconds > 0 (how long a client may take to send a request's headers), "
                f"got {value!r}"
            )
        self._check_witnesses()

    def _check_witnesses(self) -> None:
        """--witness URL=VKEY (each URL and witness once) and --quorum K (1 to their number;
        default: all of them); witnesses cosign signed checkpoints, so they need --key."""
        pairs = tuple(parse_witness(w) if isinstance(w, str) else _witness_pair(w) for w in self.witnesses)
        object.__setattr__(self, "witnesses", pairs)
        if not pairs:
            if self.quorum is not None:
                raise OcrrError("--quorum counts witnesses: give them with --witness URL=VKEY, or drop --quorum")
            return
        if self.key is None:
            raise OcrrError(
                "--witness cosigns the checkpoints the service signs: give --key too (create one with "
                "`ocrr ledger keygen`)"
            )
        for i, (url, vkey) in enumerate(pairs):
            for other_url, other_vkey in pairs[:i]:
                if url == other_url or vkey == other_vkey:
                    raise OcrrError(f"--witness {url}={vkey} is given twice: give each witness once")
        quorum = len(pairs) if self.quorum is None else self.quorum
        if not _is_int(quorum) or not 1 <= quorum <= len(pairs):
            raise OcrrError(
                f"--quorum takes 1 to the number of witnesses given ({len(pairs)}), got {quorum!r}: the "
                "number that must cosign a checkpoint before /checkpoint serves it"
            )
        object.__setattr__(self, "quorum", quorum)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def on_database(self) -> bool:
        """Whether the ledger is a PostgreSQL database (replicas may share it)."""
        return is_database_url(self.ledger)

    @property
    def token_path(self) -> Path:
        """Where a generated token is written (0600), beside the ledger file."""
        if self.on_database:
            raise OcrrError(
                "a ledger in a database is served by replicas that must share one token: give --token-file "
                "or OCRR_TOKEN (make one with " + MAKE_TOKEN + ")"
            )
        ledger = Path(self.ledger)
        return ledger.with_name(ledger.name + ".token")

    @property
    def verify(self) -> str:
        """How much of the ledger file is rehashed on open (``open_substrate``'s ``verify``)."""
        return "checkpoint" if self.quick_open else "full"


def parse_witness(text: str) -> tuple[str, str]:
    """``URL=VKEY`` (a witness's base URL and its cosignature verifier key) -> (url, vkey)."""
    url, sep, vkey = text.partition("=") if isinstance(text, str) else ("", "", "")
    if not sep:
        raise OcrrError(
            f"--witness {text!r} is not URL=VKEY: give the witness's URL, '=', and the vkey "
            "`ocrr witness keygen` printed (e.g. http://127.0.0.1:8780=witness.example/w1+…)"
        )
    return _witness_pair((url, vkey))


def _witness_pair(pair: object) -> tuple[str, str]:
    if not isinstance(pair, tuple | list) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
        raise OcrrError(f"a witness is a (URL, VKEY) pair or 'URL=VKEY', got {pair!r}")
    url, vkey = pair[0].strip().rstrip("/"), pair[1]
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        raise OcrrError(f"--witness URL {url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8780)")
    return url, check_cosigner_vkey(vkey)


def check_token(token: str, where: str) -> None:
    """Refuse ``token`` (named ``where`` in the refusal) when it is too weak (``tokens.py``)."""
    weakness = token_weakness(token)
    if weakness is not None:
        raise OcrrError(
            f"{where} is too weak ({weakness}; at least {MIN_TOKEN_BITS} bits needed); "
            f"make one with {MAKE_TOKEN}, or give none to have one made"
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
