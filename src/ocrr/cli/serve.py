"""``ocrr serve``: argv (and $OCRR_TOKEN) into a ``ServiceConfig``, then ``ocrr.service.serve``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ocrr.cli.common import add_command
from ocrr.errors import OcrrError
from ocrr.ledger.location import as_location
from ocrr.service import ServiceConfig, serve
from ocrr.service.config import MAKE_TOKEN, check_token
from ocrr.service.encoder import check_nice


def add_parser(sub) -> None:
    s = add_command(sub, "serve", run, help="serve a persistent substrate over HTTP, with a review page at /")
    s.add_argument(
        "--ledger",
        type=as_location,
        required=True,
        help="the durable ledger file (created if missing), or a postgresql://… URL: any number of "
        "`ocrr serve` replicas may share one database (docs/postgres.md)",
    )
    s.add_argument(
        "--system",
        default="substrate",
        help="substrate spec, e.g. substrate:k=3 or bounded_fifo_1000 (default substrate)",
    )
    s.add_argument("--seed", type=int, default=0, help="seed of a bounded substrate's eviction (default 0)")
    s.add_argument(
        "--encoder",
        default=None,
        help=(
            "encoder for texts, as ocrr run's --encoder (minilm, minilm_int8, st:<model id> …; docs/encoders.md); "
            "without one, /predict takes vectors only"
        ),
    )
    s.add_argument(
        "--encoder-nice",
        type=_encoder_nice,
        default="idle",
        metavar="N|idle",
        help="priority of the encoder process: a niceness 0-19, or idle (the default: Linux's "
        "SCHED_IDLE, the model runs only on a core nothing else wants), so that on a small "
        "box predicts by vector and corrections get a contended core before text encoding",
    )
    s.add_argument(
        "--fit",
        default=None,
        metavar="DATASET",
        help="when the ledger is empty, seed it with this dataset's train split (needs --encoder "
        "unless the dataset carries vectors)",
    )
    s.add_argument("--data-dir", default=None, help="where --fit looks for the dataset")
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1); an address other machines reach needs "
        "--tls-cert/--tls-key, or --insecure-public",
    )
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file holding the bearer token (at least 128 bits, e.g. from "
        f"{MAKE_TOKEN}) for /correct, /verify and /corrections/recent (default: $OCRR_TOKEN, "
        "else a new random one, written to <ledger>.token with mode 0600, never printed)",
    )
    s.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate: serve HTTPS (with --tls-key)")
    s.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert")
    s.add_argument(
        "--insecure-public",
        action="store_true",
        help="allow a --host other machines reach without TLS (the token and texts then cross the "
        "network in clear: only behind a proxy that terminates TLS)",
    )
    s.add_argument(
        "--allowed-hosts",
        type=_host_list,
        default=None,
        metavar="NAME,…",
        help="the names clients reach the service by (the Host header; *.example.com for any name "
        "below it, * for any); requests for another name get 400, against DNS rebinding (default: "
        "localhost, 127.0.0.1, [::1] and the --host address unless it is 0.0.0.0 or ::)",
    )
    s.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection that has not sent a request's headers this long after it opened or "
        "after its last answer (default 10), against clients that hold connections by sending slowly",
    )
    s.add_argument(
        "--check-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="check what is new in the ledger file this often (default 60; 0: never); damage found "
        "makes the service read-only and /health 503 until restarted on a good file",
    )
    s.add_argument(
        "--verify-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="/verify rehashes the whole file at most this often; calls in between get the last result (default 30)",
    )
    s.add_argument("--key", type=Path, default=None, help="Ed25519 key to sign heads (ocrr ledger keygen)")
    s.add_argument("--origin", default=None, help="the log's name in signed heads (default ocrr.invalid/<file>)")
    s.add_argument(
        "--signed-state",
        type=Path,
        default=None,
        metavar="PATH",
        help="the record of the last head --key signed, which every new head must extend (default "
        "<key>.signed; keep it where the ledger's storage cannot reach it)",
    )
    s.add_argument(
        "--witness",
        action="append",
        default=[],
        metavar="URL=VKEY",
        help="a C2SP tlog-witness (`ocrr witness serve`) to send each new checkpoint to: its URL and its "
        "cosignature verifier key (`ocrr witness keygen` prints it); repeat per witness. Needs --key. "
        "/checkpoint then serves the latest checkpoint cosigned by --quorum of them (which may be older "
        "than /head; 503 until one is), while /correct answers at once with the log-signed head",
    )
    s.add_argument(
        "--quorum",
        type=int,
        default=None,
        metavar="K",
        help="how many of the --witness must cosign a checkpoint before /checkpoint serves it (1 to their "
        "number; default: all of them)",
    )
    s.add_argument(
        "--quick-open", action="store_true", help="on open, rehash only the entries after the last checkpoint"
    )
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="processes answering requests, all on one port and one ledger file (default 1; one per "
        "core lets predicts use every core: one Python process is bound by its GIL)",
    )
    s.add_argument(
        "--pin-workers",
        action="store_true",
        help="keep each worker on its own core (Linux; with --workers N): for a box that runs the "
        "service alone, where it lowers the tail latency; elsewhere a pinned worker cannot move off a busy core",
    )


def _token(args) -> str | None:
    """--token-file, else $OCRR_TOKEN (either at least 128 bits), else None: the service makes
    a random one and writes it to a 0600 file beside the ledger."""
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip()
        except OSError as e:
            raise OcrrError(f"cannot read --token-file {args.token_file} ({e})") from e
        where = f"the token in {args.token_file}"
    else:
        token, where = os.environ.get("OCRR_TOKEN") or "", "$OCRR_TOKEN"
        if not token:
            return None
    check_token(token, where)
    return token


def _host_list(value: str) -> tuple[str, ...]:
    """--allowed-hosts's type: names separated by commas (checked by ServiceConfig)."""
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _encoder_nice(value: str) -> int | str:
    """--encoder-nice's type: a niceness 0-19, or idle."""
    try:
        return check_nice(value if value == "idle" else int(value))
    except (ValueError, OcrrError):
        raise argparse.ArgumentTypeError(f"{value!r}: give a niceness 0-19, or idle") from None


def run(args) -> int:
    _check_fit(args.fit, args.encoder)
    config = ServiceConfig(
        ledger=args.ledger,
        system=args.system,
        seed=args.seed,
        encoder=args.encoder,
        encoder_nice=args.encoder_nice,
        fit=args.fit,
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        token=_token(args),
        key=args.key,
        origin=args.origin,
        signed_state=args.signed_state,
        quick_open=args.quick_open,
        workers=args.workers,
        pin_workers=args.pin_workers,
        check_every=args.check_every,
        verify_every=args.verify_every,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure_public=args.insecure_public,
        allowed_hosts=args.allowed_hosts,
        header_timeout=args.header_timeout,
        witnesses=tuple(args.witness),
        quorum=args.quorum,
    )
    return serve(config)


def _check_fit(fit: str | None, encoder: str | None) -> None:
    """--fit with texts needs --encoder: refused before anything opens (or creates) the ledger."""
    if fit is None or encoder is not None:
        return
    from ocrr.engine.sweep.grid import EMBEDDING_ONLY

    if fit.split(":")[0] not in EMBEDDING_ONLY:
        raise OcrrError(f"--fit {fit} needs an encoder for its texts; add --encoder minilm")
