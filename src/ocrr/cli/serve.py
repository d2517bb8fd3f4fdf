"""``ocrr serve``: open the ledger, optionally seed it from a dataset, and run uvicorn."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from ocrr.errors import OcrrError


def add_serve(sub) -> None:
    s = sub.add_parser("serve", help="serve a persistent substrate over HTTP, with a review page at /")
    s.add_argument("--ledger", type=Path, required=True, help="the durable ledger file (created if missing)")
    s.add_argument(
        "--system",
        default="substrate",
        help="substrate spec, e.g. substrate:k=3 or bounded_fifo_1000 (default substrate)",
    )
    s.add_argument("--seed", type=int, default=0, help="seed of a bounded substrate's eviction (default 0)")
    s.add_argument(
        "--encoder",
        default=None,
        help="encoder for texts (minilm, st:<model id>); without one, /predict takes vectors only",
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
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file holding the bearer token for /correct (default: $OCRR_TOKEN, else a new random one)",
    )
    s.add_argument("--key", type=Path, default=None, help="Ed25519 key to sign heads (ocrr ledger keygen)")
    s.add_argument("--origin", default=None, help="the log's name in signed heads (default ocrr.invalid/<file>)")
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
    s.set_defaults(handler=_cmd_serve)


def _token(args) -> tuple[str, bool]:
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip()
        except OSError as e:
            raise OcrrError(f"cannot read --token-file {args.token_file} ({e})") from e
        if len(token) < 16:
            raise OcrrError(f"the token in {args.token_file} is shorter than 16 characters; use a longer one")
        return token, False
    if os.environ.get("OCRR_TOKEN"):
        return os.environ["OCRR_TOKEN"], False
    return secrets.token_urlsafe(24), True


def _encoder_nice(value: str) -> int | str:
    if value == "idle":
        return value
    try:
        level = int(value)
    except ValueError:
        level = -1
    if not 0 <= level <= 19:
        raise argparse.ArgumentTypeError(f"{value!r}: give a niceness 0-19, or idle")
    return level


def build_state(
    ledger: Path,
    system: str = "substrate",
    encoder=None,
    fit: str | None = None,
    data_dir: str | None = None,
    key: Path | None = None,
    origin: str | None = None,
    token: str = "",
    seed: int = 0,
    verify: str = "full",
    log=print,
    encoder_nice: int | str = 0,
):
    """Open everything ``ocrr serve`` serves (also used by tests and the benchmark)."""
    from ocrr.ledger.heads import Signer, default_origin
    from ocrr.service.app import ServiceState
    from ocrr.systems.persistent import open_substrate

    signer = Signer.load(key, origin or default_origin(ledger)) if key is not None else None
    sub = open_substrate(ledger, system, seed=seed, verify=verify)
    holder = [None]

    def close() -> None:
        sub.close()
        getattr(holder[0], "close", lambda: None)()

    try:
        if isinstance(encoder, str):  # a spec: the model runs in its own process (see service/encoder.py)
            from ocrr.service.encoder import EncoderProcess

            encoder = holder[0] = EncoderProcess(encoder, nice=encoder_nice)
        elif encoder is not None:
            encoder = holder[0] = SerialEncoder(encoder)
        if fit is not None:
            if len(sub):
                log(f"--fit {fit}: the ledger already holds {len(sub)} entries; not seeding it again")
            else:
                _seed_from_dataset(sub, fit, encoder, data_dir, log)
    except BaseException:
        close()
        raise
    return ServiceState(substrate=sub, token=token, encoder=encoder, signer=signer, close=close)


class SerialEncoder:
    """One encode at a time (a model is not made for concurrent calls, and on a small box
    parallel calls only thrash the CPU); loads the model before the first request."""

    def __init__(self, encoder):
        import threading

        self.inner, self.lock = encoder, threading.Lock()
        self.encode(["warm up"])

    def encode(self, texts, progress=None):
        with self.lock:
            try:
                return self.inner.encode(texts, progress=progress)
            except Exception as e:  # noqa: BLE001 - the client sent texts this encoder cannot take
                raise OcrrError(f"the encoder failed on these texts ({e}); send plain text or vectors") from e


def _seed_from_dataset(sub, name: str, encoder, data_dir, log) -> None:
    import numpy as np

    from ocrr.data import load_dataset
    from ocrr.encoders.base import l2_normalise

    dataset = load_dataset(name, data_dir=data_dir)
    train = dataset.train
    if train.vecs is not None:
        vecs = train.vecs
    elif encoder is None:
        raise OcrrError(f"--fit {name} needs an encoder for its texts; add --encoder minilm")
    else:
        log(f"encoding {len(train)} {name} train texts…")
        vecs = l2_normalise(np.asarray(encoder.encode(list(train.texts)), np.float32))
    sub.correct(vecs, list(train.labels), list(train.texts) if train.texts is not None else None)
    log(f"seeded the ledger with {len(train)} {name} train items ({len(set(train.labels))} labels)")


def limit_threads() -> None:
    """Requests run in parallel threads: one BLAS / OpenMP / torch thread each beats pools that
    fight over the cores (a 10k x 384 search: ~2 ms with one thread, ~8 ms with two; MiniLM
    on one sentence: 18 ms of CPU with one thread, 87 with two). Call once everything is loaded."""
    import faiss  # noqa: F401 - loaded before the limit, which then covers its OpenMP pool (the predict shortlist)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    # A request that releases the GIL often (a model's many small ops, a BLAS call) waits up
    # to the switch interval to get it back from a busy thread: keep that wait short.
    sys.setswitchinterval(0.0005)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _cmd_serve(args) -> int:
    try:
        import uvicorn

        from ocrr.service.app import BodyLimit, create_app
    except ImportError as e:
        raise OcrrError(f"ocrr serve needs the service extra ({e.name} is missing); pip install 'ocrr[service]'") from e
    if not 1 <= args.workers <= 64:
        raise OcrrError(f"--workers takes 1 to 64 processes, got {args.workers}; one per core is the usual choice")
    token, generated = _token(args)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    # With workers, this process only checks the ledger (and seeds it): each worker loads its own encoder.
    encoder = args.encoder if args.workers == 1 or args.fit else None
    state = build_state(
        args.ledger,
        args.system,
        encoder,
        args.fit,
        args.data_dir,
        args.key,
        args.origin,
        token,
        args.seed,
        "checkpoint" if args.quick_open else "full",
        log,
        args.encoder_nice,
    )
    log(f"ledger {args.ledger}: {len(state.substrate)} entries, verified")
    if generated:
        log(f"bearer token for /correct (set OCRR_TOKEN or --token-file to choose one): {token}")
    if args.workers > 1:
        return _serve_workers(args, state, token, log)
    limit_threads()
    log(f"review page: http://{args.host}:{args.port}/   API: http://{args.host}:{args.port}/docs")
    close = state.close

    def close_and_say() -> None:  # runs at shutdown, after the requests in flight
        close()
        log(f"stopped: ledger {args.ledger} closed at {len(state.substrate)} entries")

    state.close = close_and_say
    # uvicorn stops on Ctrl-C / SIGTERM gracefully, then re-raises the signal (exit status -2 / -15).
    uvicorn.run(BodyLimit(create_app(state)), host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def _serve_workers(args, state, token: str, log) -> int:
    """``--workers N``: the ledger is checked (and seeded) here once; N worker processes then
    open it from that checkpoint and answer on one socket (service/workers.py)."""
    from ocrr.service.workers import bind, supervise, worker_main

    state.close()
    try:
        sock = bind(args.host, args.port, listen=False)  # claims the port; the workers listen on it
    except OSError as e:
        raise OcrrError(
            f"cannot listen on {args.host}:{args.port} ({e.strerror}); pick another --port or --host"
        ) from e
    config = {
        "host": args.host,
        "port": sock.getsockname()[1],
        "ledger": args.ledger,
        "system": args.system,
        "encoder": args.encoder,
        "key": args.key,
        "origin": args.origin,
        "token": token,
        "seed": args.seed,
        "encoder_nice": args.encoder_nice,
    }
    port = config["port"]  # the one bound (--port 0: a free one)
    log(
        f"review page: http://{args.host}:{port}/   API: http://{args.host}:{port}/docs ({args.workers} worker processes)"
    )
    status = supervise(args.workers, sock, worker_main, config, log)
    log(f"stopped: {args.workers} workers, ledger {args.ledger} closed")
    return status
