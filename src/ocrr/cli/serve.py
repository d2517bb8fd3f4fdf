"""``ocrr serve``: argv (and $OCRR_TOKEN) into a ``ServiceConfig``, then ``ocrr.service.serve``
(which checks the TLS files before it writes or prints anything)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from ocrr.cli.common import add_command
from ocrr.errors import OcrrError
from ocrr.ledger.location import as_location
from ocrr.service import ServiceConfig, serve
from ocrr.service.config import CONFIG_OPTIONS, MAKE_TOKEN, check_token, flag
from ocrr.service.encoder import check_nice
from ocrr.specs import FROM_SIGNATURE, format_value


def add_parser(sub) -> None:
    s = add_command(sub, "serve", run, help="serve a persistent substrate over HTTP, with a review page at /")
    # Each flag sets the ServiceConfig option of its name; help and default come from its declaration.
    _flag(s, "ledger", type=as_location, required=True)
    _flag(s, "system")
    _flag(s, "seed")
    _flag(s, "encoder")
    _flag(s, "encoder_nice", type=_encoder_nice, metavar="N|idle")
    _flag(s, "fit", metavar="DATASET")
    _flag(s, "data_dir")
    _flag(s, "host")
    _flag(s, "port")
    s.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file holding the bearer token (at least 128 bits, e.g. from "
        f"{MAKE_TOKEN}) for /correct, /verify and /corrections/recent (default: $OCRR_TOKEN, "
        "else a new random one, written to <ledger>.token with mode 0600, never printed)",
    )
    _flag(s, "tls_cert")
    _flag(s, "tls_key")
    _flag(s, "insecure_public")
    _flag(s, "allowed_hosts", type=_host_list, metavar="NAME,…")
    _flag(s, "header_timeout", metavar="SECONDS")
    _flag(s, "check_every", metavar="SECONDS")
    _flag(s, "verify_every", metavar="SECONDS")
    _flag(s, "key")
    _flag(s, "origin")
    _flag(s, "signed_state", metavar="PATH")
    _flag(s, "witnesses", "--witness", action="append", default=[], metavar="URL=VKEY")
    _flag(s, "quorum", metavar="K")
    _flag(s, "quick_open")
    _flag(s, "rehash_after", metavar="SECONDS")
    _flag(s, "index_file", metavar="FILE")
    _flag(s, "workers", metavar="N")
    _flag(s, "pin_workers")


def _flag(parser: argparse.ArgumentParser, name: str, spelled: str | None = None, **argparse_options) -> None:
    """The flag (``flag(name)`` unless ``spelled``) that sets the ServiceConfig option ``name``:
    its help, default and type from the option's declaration, a switch for a bool."""
    declared = CONFIG_OPTIONS[name]
    if declared.kind is bool:
        argparse_options.setdefault("action", "store_true")
    elif declared.kind in (int, float):
        argparse_options.setdefault("type", _number_or_text(declared.kind))
    elif declared.kind is Path:
        argparse_options.setdefault("type", declared.kind)
    shown = ""
    if declared.default is not FROM_SIGNATURE:  # (the required --ledger has none)
        argparse_options.setdefault("default", declared.default)
        if declared.default not in (None, ()) and declared.default is not False:  # (a switch is off)
            shown = f" (default {format_value(declared.default)})"
    parser.add_argument(spelled or flag(name), dest=name, help=declared.help + shown, **argparse_options)


def _number_or_text(kind: type) -> Callable[[str], object]:
    """A numeric flag's type: the number, else the text as given, which ServiceConfig refuses with
    the message its declaration gives every bad value (argparse's own names no fix)."""

    def number(text: str) -> object:
        try:
            return kind(text)
        except ValueError:
            return text

    return number


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
    config = config_from_args(args)  # first: it names an unknown --fit dataset as such
    _check_fit(args.fit, args.encoder)
    return serve(config)


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    """The config the parsed flags ask for: each option from its flag, the token from
    --token-file or $OCRR_TOKEN (never from argv, where other users' ``ps`` would show it). It
    reads no TLS file: ``serve`` loads them once, before a ledger or token file is made."""
    given = {name: getattr(args, name) for name in CONFIG_OPTIONS if name != "token"}
    return ServiceConfig(**given, token=_token(args))


def _check_fit(fit: str | None, encoder: str | None) -> None:
    """--fit with texts needs --encoder: refused before anything opens (or creates) the ledger."""
    if fit is None or encoder is not None:
        return
    from ocrr.engine.sweep.grid import EMBEDDING_ONLY

    if fit.split(":")[0] not in EMBEDDING_ONLY:
        raise OcrrError(f"--fit {fit} needs an encoder for its texts; add --encoder minilm")
