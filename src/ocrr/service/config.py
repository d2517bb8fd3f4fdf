"""What ``ocrr serve`` is asked to do: one frozen, validated object.

The command line (``cli/serve.py``) and Python callers build a ``ServiceConfig``; the
service never reads argv. Every value is checked when the config is made, so a mistake is
reported before a ledger is opened or a port claimed. Options are named as the flags of
``ocrr serve`` name them (``workers`` is ``--workers``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ocrr.data import check_dataset
from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import check_cosigner_vkey
from ocrr.ledger.heads import check_origin
from ocrr.ledger.location import as_location, is_database_url
from ocrr.service.encoder import check_encoder_spec, check_nice
from ocrr.service.hosts import allowed_hosts
from ocrr.service.rehash_trusted import WARM_UP
from ocrr.service.tokens import MAKE_TOKEN, MIN_TOKEN_BITS, token_weakness
from ocrr.specs import field_options, format_value, option
from ocrr.systems.registry import make_system

MAX_WORKERS = 64
# Until the pass after a quick open runs, an entry edited under the checkpoint goes unseen:
# it may wait an hour at most.
MAX_REHASH_AFTER = 3600


@dataclass(frozen=True)
class ServiceConfig:
    """The options of ``ocrr serve``, each declared once (type, constraint, default, help: the
    flag's help in ``ocrr serve -h``) and checked by ``ocrr.specs``; then the rules that
    involve several options at once."""

    ledger: Path | str = option(
        kind=object,
        help="the durable ledger file (created if missing), or a postgresql://… URL: any number of "
        "`ocrr serve` replicas may share one database (docs/postgres.md)",
    )
    system: str = option(default="substrate", kind=str, help="substrate spec, e.g. substrate:k=3 or bounded_fifo_1000")
    seed: int = option(default=0, kind=int, help="seed of a bounded substrate's eviction (an integer ≥ 0)")
    encoder: str | None = option(
        default=None,
        kind=str,
        allow_none=True,
        help="encoder for texts, as ocrr run's --encoder (minilm, minilm_int8, st:<model id> …; "
        "docs/encoders.md); without one, /predict takes vectors only",
    )
    encoder_nice: int | str | None = option(
        # None: not given, so that a given idle is told from the default (a given one needs
        # --encoder); ``nice`` is the value used: the given one, else "idle".
        default=None,
        kind=object,  # a niceness 0-19 or "idle": checked by check_nice
        help="priority of the encoder process (with --encoder): a niceness 0-19, or idle (Linux's "
        "SCHED_IDLE: the model runs only on a core nothing else wants), so that on a small box predicts "
        "by vector and corrections get a contended core before text encoding (default idle)",
    )
    fit: str | None = option(
        default=None,
        kind=str,
        allow_none=True,
        help="when the ledger is empty, seed it with this dataset's train split (needs --encoder "
        "unless the dataset carries vectors)",
    )
    data_dir: str | None = option(default=None, kind=str, allow_none=True, help="where --fit looks for the dataset")
    host: str = option(
        default="127.0.0.1",
        kind=str,
        help="address to listen on; an address other machines reach needs --tls-cert/--tls-key, or --insecure-public",
    )
    port: int = option(default=8000, kind=int, low=0, high=65535, help="port; 0: any free port")
    token: str | None = option(
        default=None,
        kind=str,
        allow_none=True,
        help="the bearer token (at least 128 bits); default: a new random one, written to <ledger>.token",
    )
    key: Path | None = option(
        default=None, kind=Path, allow_none=True, help="Ed25519 key to sign heads (ocrr ledger keygen)"
    )
    origin: str | None = option(
        default=None,
        kind=str,
        allow_none=True,
        help="the log's name in signed heads (default: the one --key was made for, as its record of signed "
        "heads names it; else ocrr.invalid/<file>)",
    )
    signed_state: Path | None = option(
        default=None,
        kind=Path,
        allow_none=True,
        help="the record of the last head --key signed, which every new head must extend (default "
        "<key>.signed; keep it where the ledger's storage cannot reach it)",
    )
    quick_open: bool = option(
        default=False, kind=bool, help="on open, rehash only the entries after the last checkpoint"
    )
    rehash_after: float | None = option(
        # None: not given, so that a given 10 is told from the default (a given one needs
        # --quick-open); ``rehash_delay`` is the value used: the given one, else WARM_UP.
        default=None,
        kind=float,
        low=0,
        high=MAX_REHASH_AFTER,
        help="with --quick-open, seconds from the start until the entries it took on trust are rehashed "
        f"in the background (0: at once); damage to them goes unseen until then (default {format_value(WARM_UP)})",
    )
    index_file: Path | None = option(
        default=None,
        kind=Path,
        allow_none=True,
        help="an IVF index `ocrr ledger index` saved for this ledger and signed with --key: each worker "
        "opens it instead of training one (the --system must be the one it was built with; nprobe and "
        "rerank may differ); refused, naming the fix, unless its signature, files and Merkle root check out",
    )
    workers: int = option(
        default=1,
        kind=int,
        low=1,
        high=MAX_WORKERS,
        help="processes answering requests, all on one port and one ledger file (one per core lets "
        "predicts use every core: one Python process is bound by its GIL)",
    )
    pin_workers: bool = option(
        default=False,
        kind=bool,
        help="keep each worker on its own core (Linux; with --workers N): for a box that runs the "
        "service alone, where it lowers the tail latency; elsewhere a pinned worker cannot move off a busy core",
    )
    check_every: float = option(
        default=60.0,
        kind=float,
        low=0,
        help="seconds between checks of what is new in the ledger file (0: never); damage found makes "
        "the service read-only and /health 503 until restarted on a good file",
    )
    verify_every: float = option(
        default=30.0,
        kind=float,
        low=0,
        help="/verify rehashes the whole file at most this often (seconds); calls in between get the last result",
    )
    tls_cert: Path | None = option(
        default=None, kind=Path, allow_none=True, help="PEM certificate: serve HTTPS (with --tls-key)"
    )
    tls_key: Path | None = option(default=None, kind=Path, allow_none=True, help="PEM private key of --tls-cert")
    insecure_public: bool = option(
        default=False,
        kind=bool,
        help="allow a --host other machines reach without TLS (the token and texts then cross the "
        "network in clear: only behind a proxy that terminates TLS)",
    )
    allowed_hosts: tuple[str, ...] | None = option(
        default=None,
        kind=object,  # names, checked by hosts.allowed_hosts
        help="the names clients reach the service by (the Host header; *.example.com for any name "
        "below it, * for any); requests for another name get 400, against DNS rebinding (default: "
        "localhost, 127.0.0.1, [::1] and the --host address unless it is 0.0.0.0 or ::)",
    )
    header_timeout: float = option(
        default=10.0,
        kind=float,
        gt=0,
        help="seconds after a connection opened or got its last answer within which it must send a "
        "request's headers, against clients that hold connections by sending slowly",
    )
    witnesses: tuple[tuple[str, str], ...] = option(
        default=(),
        kind=object,  # (url, vkey) pairs or 'URL=VKEY' texts, checked by _check_witnesses
        help="a C2SP tlog-witness (`ocrr witness serve`) to send each new checkpoint to: its URL and its "
        "cosignature verifier key (`ocrr witness keygen` prints it); repeat per witness. Needs --key. "
        "/checkpoint then serves the latest checkpoint cosigned by --quorum of them (which may be older "
        "than /head; 503 until one is), while /correct answers at once with the log-signed head",
    )
    quorum: int | None = option(
        default=None,
        kind=int,
        low=1,
        allow_none=True,
        help="how many of the --witness must cosign a checkpoint before /checkpoint serves it (1 to their "
        "number; default: all of them)",
    )

    def __post_init__(self) -> None:
        for name, declared in CONFIG_OPTIONS.items():  # each value as declared (a path's text made a Path …)
            value = getattr(self, name)
            if value is None and declared.default is None:
                continue  # not given (--rehash-after's None is no value to bound)
            value = declared.check("ocrr serve", flag(name), value, hint="See 'ocrr serve --help'.")
            object.__setattr__(self, name, value)  # (how a frozen dataclass stores a converted value)
        object.__setattr__(self, "ledger", as_location(self.ledger))  # a URL stays a string
        if self.seed < 0:  # (not a declared bound: the declaration's words name the type alone)
            raise OcrrError(
                f"ocrr serve: --seed must be an integer ≥ 0, got {self.seed}: a bounded substrate's eviction "
                "seed, e.g. --seed 0"
            )
        if self.origin is not None:
            _check_origin(self.origin)
        if self.signed_state is not None and self.key is None:
            raise OcrrError("--signed-state records what --key signs: give --key too, or drop --signed-state")
        if self.index_file is not None and self.key is None:
            raise OcrrError(
                "--index-file is trusted through the signature of the ledger's key: give --key (the key "
                "`ocrr ledger index` signed it with)"
            )
        if self.pin_workers and self.workers < 2:
            raise OcrrError(
                "--pin-workers keeps each of several workers on its own core; with one worker there is "
                "nothing to spread: add --workers N (one per core), or drop --pin-workers"
            )
        if self.rehash_after is not None and not self.quick_open:  # given, even as the default's 10
            raise OcrrError(
                "--rehash-after delays the rehash that follows a quick open; without --quick-open every "
                "entry is rehashed before the service answers: add --quick-open, or drop --rehash-after"
            )
        if self.pin_workers and not hasattr(os, "sched_setaffinity"):
            raise OcrrError("--pin-workers needs Linux (it sets each worker's CPU affinity); drop it here")
        if not self.host:
            raise OcrrError(f"--host needs an address to listen on, got {self.host!r}; e.g. 127.0.0.1 or 0.0.0.0")
        _check_host(self.host)  # before the TLS rule below, which would take a typo for a public address
        if not self.system:
            raise OcrrError(f"--system takes a substrate spec, got {self.system!r}; e.g. substrate or substrate:k=3")
        if self.token is not None and not self.token.strip():
            raise OcrrError("the service token is empty; give a token, or none to have a random one made")
        if self.token is not None:
            check_token(self.token, "the service token")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise OcrrError("TLS needs both --tls-cert and --tls-key (PEM files); give both or neither")
        if not self.tls and not self.insecure_public and not is_loopback(self.host):
            raise OcrrError(
                f"--host {self.host} is reachable from other machines, and without TLS the token and "
                "users' texts would cross the network in clear; give --tls-cert and --tls-key, or "
                "--insecure-public if a proxy in front terminates TLS"
            )
        if self.encoder_nice is not None:
            check_nice(self.encoder_nice)
            if self.encoder is None:
                raise OcrrError(
                    "--encoder-nice sets the priority of the encoder process, and without --encoder there is "
                    "none: add --encoder (e.g. --encoder minilm), or drop --encoder-nice"
                )
        if self.encoder is not None:
            check_encoder_spec(self.encoder)
        if self.fit is not None:
            _check_fit(self.fit)
        _check_system(self.system, self.seed)
        object.__setattr__(self, "allowed_hosts", allowed_hosts(self.allowed_hosts, self.host))
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
        if quorum > len(pairs):
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
    def rehash_delay(self) -> float:
        """Seconds from the start until a quick open's trusted entries are rehashed:
        --rehash-after if given, else ``WARM_UP``."""
        return WARM_UP if self.rehash_after is None else self.rehash_after

    @property
    def nice(self) -> int | str:
        """The encoder process's priority: --encoder-nice if given, else ``"idle"``."""
        return "idle" if self.encoder_nice is None else self.encoder_nice

    @property
    def verify(self) -> str:
        """How much of the ledger file is rehashed on open (``open_substrate``'s ``verify``)."""
        return "checkpoint" if self.quick_open else "full"


CONFIG_OPTIONS = field_options(ServiceConfig)


def flag(name: str) -> str:
    """The ``ocrr serve`` flag of a config option: ``pin_workers`` is ``--pin-workers``."""
    return "--" + name.replace("_", "-")


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
    url, vkey = pair[0].strip(), pair[1]
    if not url.startswith(("http://", "https://")):
        raise OcrrError(f"--witness URL {url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8780)")
    try:
        host = urlsplit(url).hostname
    except ValueError:  # (e.g. an unclosed [IPv6 address)
        host = None
    if not host:
        raise OcrrError(
            f"--witness URL {url!r} names no host: give the witness's address after the scheme "
            "(e.g. http://127.0.0.1:8780)"
        )
    return url.rstrip("/"), check_cosigner_vkey(vkey)


def _check_origin(origin: str) -> None:
    """--origin names the log in its signed heads: a schema-less URL, never empty (an empty one
    would silently sign as the default ``ocrr.invalid/<file>``)."""
    try:
        check_origin(origin)
    except OcrrError:
        raise OcrrError(
            f"--origin {origin!r} is not a log name: give one such as example.com/my-ledger (printable "
            "ASCII, no spaces or '+'), or drop --origin to sign under the one the key was made for"
        ) from None


def _check_host(host: str) -> None:
    """--host names an address this machine can listen on: an IP address, or a name that
    resolves (binding resolves it again; what is refused here would be refused there)."""
    if host == "localhost":
        return
    try:
        ipaddress.ip_address(host.strip("[]"))
        return
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        why = e.strerror if isinstance(e, socket.gaierror) else "not a valid host name"
        raise OcrrError(
            f"--host {host} is not an address to listen on ({why}); give an IP address of this machine "
            "(127.0.0.1 for this machine only, 0.0.0.0 for every interface) or a name that resolves to one"
        ) from None


def _check_fit(fit: str) -> None:
    """--fit names a dataset ``load_dataset`` knows, with valid options (nothing is read yet)."""
    try:
        check_dataset(fit)
    except OcrrError as e:
        raise OcrrError(f"--fit {fit}: {e}") from None


def _check_system(system: str, seed: int) -> None:
    """--system names a known system with valid options (built, not fitted: that is cheap); that
    it is a substrate a ledger can serve is checked as the ledger opens."""
    try:
        make_system(system, seed=seed)
    except OcrrError as e:
        raise OcrrError(f"--system {system}: {e}") from None


def check_tls_files(cert: Path, key: Path) -> None:
    """Refuse, naming the fix, a --tls-cert/--tls-key pair the TLS server could not load: a file
    missing or not a file, a certificate that is not one, a key that is not its key (or is
    encrypted: ``ocrr serve`` takes no passphrase). Reads the files, so ``serve`` calls it, once,
    before anything is started, written or printed (the config itself touches no file)."""
    for name, path in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            what = "" if path.is_file() else "is not a file" if path.exists() else "does not exist"
        except OSError as e:  # (e.g. a folder on the way that this user may not enter)
            what = f"cannot be read ({e})"
        if what:
            raise OcrrError(
                f"{name} {path} {what}: give the PEM file of the certificate (--tls-cert) and of its "
                "private key (--tls-key)"
            )

    def no_passphrase() -> bytes:
        raise OcrrError(
            f"--tls-key {key} is encrypted and ocrr serve takes no passphrase: give it unencrypted "
            "(e.g. openssl pkey -in KEY -out PLAIN_KEY; keep it mode 0600)"
        )

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=no_passphrase)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise OcrrError(
            f"--tls-cert {cert} and --tls-key {key} do not load as a certificate and its private key ({e}): "
            "give the PEM certificate (chain) as --tls-cert and the PEM private key of that certificate as --tls-key"
        ) from e


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
