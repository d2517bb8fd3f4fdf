"""The ``ocrr`` command: builds the parser from one module per command and runs the chosen one.

Every command's module has one entry function, ``add_parser(sub)``, which adds the command's
parser and sets the function it runs (``run(args)``; a command with sub-commands sets one per
sub-command). A command's module is imported only when that command runs (all of them for ``ocrr -h``):
``ocrr serve`` then never loads matplotlib, ``ocrr ledger verify`` starts in a fraction of a
second, and the scale study's memory figures measure the study, not the rest of the CLI.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import stat
import sys

from ocrr import __version__
from ocrr.cli.common import print_error
from ocrr.errors import OcrrError
from ocrr.registry import Registry

# command -> the module that adds its parser (its add_parser), in `ocrr -h` order
COMMANDS: Registry[str] = Registry("command", hint="Run 'ocrr -h' to list them.")
for _command, _module in (
    ("run", "ocrr.cli.run"),
    ("embed", "ocrr.cli.embed"),
    ("systems", "ocrr.cli.systems"),
    ("protocols", "ocrr.cli.protocols"),
    ("sweep", "ocrr.cli.sweep"),
    ("report", "ocrr.cli.report"),
    ("scale", "ocrr.cli.scale"),
    ("calibrate-shift", "ocrr.cli.calibrate_shift"),
    ("ledger", "ocrr.cli.ledger"),
    ("serve", "ocrr.cli.serve"),
    ("witness", "ocrr.cli.witness"),
    ("client", "ocrr.cli.client"),
):
    COMMANDS.register(_command, _module)


# What a worker process that re-runs an unguarded script says (``_rerun_by_a_worker``).
UNGUARDED_SCRIPT = (
    "this script starts ocrr at its top level, so every worker process, which imports the script, "
    'starts it again: put the script\'s calls under `if __name__ == "__main__":` '
    "(or run with --jobs 1, which starts no worker)"
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if _rerun_by_a_worker():
        print_error(OcrrError(UNGUARDED_SCRIPT))
        raise SystemExit(2)  # ends this worker; the command that started it reports the dead worker
    parser = build_parser(_chosen_command(argv))
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
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe (e.g. to a worker process): a failure, not a reader leaving
            raise
        # `ocrr ... | head` closed the pipe: not an error of ours. Python would complain again
        # when it flushes stdout at exit; send the rest nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of one command (``command``), or of every command (None)."""
    parser = argparse.ArgumentParser(prog="ocrr", description="Online Correction Recovery benchmark.")
    parser.add_argument("--version", action="version", version=f"ocrr {__version__}")
    sub = parser.add_subparsers(dest="command")
    for name, module in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module).add_parser(sub)
    return parser


def _chosen_command(argv: list[str]) -> str | None:
    """The command named by argv, when its first word is one (else None: build them all, so
    `ocrr -h` lists every command and a misspelt one gets argparse's list of choices).
    ``ocrr --version`` needs no command's parser: "" builds none."""
    if argv[:1] == ["--version"]:
        return ""
    return argv[0] if argv and argv[0] in COMMANDS else None


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``ocrr ... | head``): the one broken pipe
    that is not a failure. Where poll cannot tell (no ``select.poll``), it is taken as a failure."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
    except (OSError, ValueError):  # no file behind stdout (closed, or replaced by an object)
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _rerun_by_a_worker() -> bool:
    """Whether a worker process is running the user's script again as it starts: multiprocessing
    runs the script that started the pool in each worker, under the name ``__mp_main__``. A script
    whose calls sit under ``if __name__ == "__main__":`` never calls ``main`` then, and a worker's
    task that calls ``main`` does not run from the script's top level."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if __name__ == "__main__":
    sys.exit(main())
