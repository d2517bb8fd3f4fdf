"""``ocrr client head|predict|correct|audit``: the verifying client (``ocrr.client.Client``) from
the command line.

Each command prints JSON on stdout and exits 0 when everything it received verified, 1 when the
service showed an inconsistency (a fork, a rollback, a missing quorum, an entry that is not what
was sent, a bad signature, proof or tile: the JSON then holds the error and its evidence), and 2
for a usage error or a service that cannot be reached or answers 503 (nothing was verified).
The last verified checkpoint is kept in ``--state`` (default: one file per log under
``$XDG_STATE_HOME/ocrr/client/``), so each run holds the log to what the previous runs saw.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from pathlib import Path

from ocrr.cli.common import print_error
from ocrr.errors import OcrrError


def add_parser(sub) -> None:
    c = sub.add_parser(
        "client",
        help="talk to an `ocrr serve` and verify everything it answers (checkpoints, proofs, entries, tiles)",
    )
    csub = c.add_subparsers(dest="client_command", required=True)
    h = csub.add_parser("head", help="fetch, verify and keep the service's latest checkpoint")
    _common(h)
    h.set_defaults(handler=_cmd_head)
    p = csub.add_parser("predict", help="predictions for vectors or texts (they carry no proof)")
    _common(p)
    _items(p)
    p.set_defaults(handler=_cmd_predict)
    r = csub.add_parser("correct", help="send corrections and check the log holds exactly them")
    _common(r)
    _items(r)
    r.add_argument("--label", action="append", required=True, help="one label per item, in order")
    r.set_defaults(handler=_cmd_correct)
    a = csub.add_parser("audit", help="check the whole log from its tiles against the latest checkpoint")
    _common(a)
    a.add_argument(
        "--no-entries",
        action="store_true",
        help="check the hash tiles only, even with a token (without: the entry bundles are fetched and rehashed)",
    )
    a.set_defaults(handler=_cmd_audit)


def _common(p) -> None:
    p.add_argument("--url", required=True, help="the service's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--vkey", required=True, help="the log's verifier key (as `ocrr ledger keygen` prints it), or a file holding it"
    )
    p.add_argument(
        "--witness",
        action="append",
        default=[],
        metavar="VKEY",
        help="a witness's cosignature verifier key, or a file holding it (repeat per witness)",
    )
    p.add_argument("--quorum", type=int, default=0, help="how many witnesses must cosign each checkpoint (default 0)")
    p.add_argument(
        "--state",
        type=Path,
        default=None,
        help="the file keeping the last verified checkpoint (default: $XDG_STATE_HOME/ocrr/client/<log name>.json, "
        "~/.local/state when XDG_STATE_HOME is unset)",
    )
    p.add_argument(
        "--token-file", type=Path, default=None, help="file holding the service token (default: $OCRR_TOKEN)"
    )
    p.add_argument(
        "--timeout", type=_seconds, default=30.0, help="seconds to wait for the service, a number > 0 (default 30)"
    )


def _seconds(text: str) -> float:
    """--timeout's type: a finite number of seconds > 0 (the HTTP library refuses 0, nan, inf)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"give a number of seconds > 0, e.g. --timeout 30; got {text!r}")
    return value


def _items(p) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--vectors", type=Path, help="a JSON file holding a list of vectors (lists of numbers)")
    g.add_argument("--text", action="append", help="a text for the service to encode (repeat per item)")
    p.add_argument("--texts", type=Path, default=None, help="with --vectors: a JSON list of texts stored beside them")


def _key(value: str, what: str) -> str:
    """A verifier key given inline (it holds '+') or in a file."""
    if "+" in value:
        return value.strip()
    try:
        return Path(value).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise OcrrError(f"{what} {value!r} is neither a verifier key (name+id+key) nor a readable file ({e})") from e


def _token(args) -> str | None:
    if args.token_file is not None:
        try:
            return args.token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise OcrrError(f"cannot read --token-file {args.token_file} ({e})") from e
    return os.environ.get("OCRR_TOKEN") or None


def default_state(vkey: str) -> Path:
    """Where the client keeps a log's trusted checkpoint when --state is not given."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", vkey.split("+", 1)[0])
    return base / "ocrr" / "client" / f"{name}.json"


def _client(args):
    from ocrr.client import Client

    vkey = _key(args.vkey, "--vkey")
    state = args.state if args.state is not None else default_state(vkey)
    witnesses = [_key(w, "--witness") for w in args.witness]
    return Client(args.url, vkey, witnesses, args.quorum, state, _token(args), args.timeout)


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise OcrrError(f"cannot read {what} from {path} ({e}); give a JSON file") from e


def _items_of(args) -> tuple[object, list[str] | None]:
    if args.text is not None:
        if args.texts is not None:
            raise OcrrError("--texts goes with --vectors; with --text the texts are the items")
        return list(args.text), None
    vectors = _read_json(args.vectors, "--vectors")
    texts = None if args.texts is None else _read_json(args.texts, "--texts")
    if texts is not None and not (isinstance(texts, list) and all(isinstance(t, str) for t in texts)):
        raise OcrrError(f"--texts {args.texts} must hold a JSON list of strings")
    return vectors, texts


def _run(args, act) -> int:
    """Print ``act(client)``'s JSON; an inconsistency: its JSON and evidence, exit status 1."""
    from ocrr.client import IntegrityFailure

    with _client(args) as client:
        try:
            out = act(client)
        except IntegrityFailure as e:
            doc = {"ok": False, "error": type(e).__name__, "message": str(e), "evidence": e.evidence()}
            print(json.dumps(doc, indent=2))
            print_error(e)
            return 1
    print(json.dumps({"ok": True, **out}, indent=2))
    return 0


def _cmd_head(args) -> int:
    return _run(args, lambda c: {"checkpoint": c.head().to_dict()})


def _cmd_predict(args) -> int:
    items, _ = _items_of(args)
    return _run(args, lambda c: {"predictions": c.predict(items)})


def _cmd_correct(args) -> int:
    items, texts = _items_of(args)
    return _run(args, lambda c: c.correct(items, args.label, texts=texts).to_dict())


def _cmd_audit(args) -> int:
    def audit(c) -> dict:
        report = c.audit(entries=False if args.no_entries else None).to_dict()
        report.pop("ok")
        return report

    return _run(args, audit)
