"""``ocrr witness``: run a C2SP tlog-witness (``serve``), make its key (``keygen``), and read what
it holds and the conflicts it refused (``show``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ocrr.cli.paths import output_file
from ocrr.errors import OcrrError

_NAME_HELP = "the witness's name, a schema-less URL such as witness.example.com/w1 (part of its vkey)"


def add_parser(sub) -> None:
    w = sub.add_parser("witness", help="a C2SP tlog-witness: cosign the checkpoints of logs that stay append-only")
    wsub = w.add_subparsers(dest="witness_command", required=True)

    s = wsub.add_parser("serve", help="answer POST /add-checkpoint (c2sp.org/tlog-witness) until stopped")
    s.add_argument("--state", type=Path, required=True, help="the witness's state file (SQLite; one witness per file)")
    s.add_argument("--new-state", action="store_true", help="create --state (the first start only)")
    s.add_argument("--key", type=Path, required=True, help="the witness's private key (from `ocrr witness keygen`)")
    s.add_argument("--name", required=True, help=_NAME_HELP)
    s.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="ORIGIN=VKEY",
        help="a log to witness: its origin and verifier key (`ocrr ledger keygen` prints it); repeat per log",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8780, help="port, 0-65535 (0: any free port; default 8780)")
    s.set_defaults(handler=_cmd_serve)

    k = wsub.add_parser("keygen", help="create the witness's Ed25519 key; print its cosignature verifier key")
    k.add_argument("key", type=Path, help="where to write the private key (PEM, mode 600)")
    k.add_argument("--name", required=True, help=_NAME_HELP)
    k.set_defaults(handler=_cmd_keygen)

    show = wsub.add_parser(
        "show", help="print (JSON) the checkpoints the witness holds and the log-signed evidence of conflicts"
    )
    show.add_argument("--state", type=Path, required=True, help="the state file of `ocrr witness serve`")
    show.set_defaults(handler=_cmd_show)


def _cmd_serve(args) -> int:
    from ocrr.witness.config import WitnessConfig, logs_of
    from ocrr.witness.server import serve

    config = WitnessConfig(
        state=args.state,
        key=args.key,
        name=args.name,
        logs=logs_of(args.log),
        host=args.host,
        port=args.port,
        new_state=args.new_state,
    )
    return serve(config)


def _cmd_keygen(args) -> int:
    from ocrr.ledger.cosignature import Cosigner

    if args.key.exists():
        raise OcrrError(f"{args.key} already exists; choose another path (keys are never overwritten)")
    output_file(args.key, None)
    cosigner = Cosigner.generate(args.name)
    cosigner.save(args.key)
    print(cosigner.vkey)
    return 0


def _cmd_show(args) -> int:
    from ocrr.witness.state import read_state

    json.dump(read_state(args.state), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0
