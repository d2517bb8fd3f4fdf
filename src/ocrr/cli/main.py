"""The ``ocrr`` command: builds the parser from one module per command and runs the chosen one."""

from __future__ import annotations

import argparse
import sys

from ocrr.cli import calibrate_shift, embed, protocols, report, run, scale, sweep, systems
from ocrr.cli.common import print_error
from ocrr.cli.ledger import add_commands as add_ledger_commands
from ocrr.cli.serve import add_serve
from ocrr.errors import OcrrError

COMMANDS = (run, embed, systems, protocols, sweep, report, scale, calibrate_shift)  # in `ocrr -h` order


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except OcrrError as err:
        print_error(err)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocrr", description="Online Correction Recovery benchmark.")
    sub = parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_parser(sub)
    add_ledger_commands(sub)
    add_serve(sub)
    return parser


if __name__ == "__main__":
    sys.exit(main())
