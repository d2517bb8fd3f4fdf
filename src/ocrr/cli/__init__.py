"""The ``ocrr`` command line: a thin shell over the library, one module per command."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """``ocrr`` with ``argv`` (default: the process's arguments); returns the exit status.

    Imported here on call, not at package import: ``python -m ocrr.cli.main`` imports the
    package first, and a package that had already imported ``ocrr.cli.main`` makes runpy
    warn that the module it is about to run is in ``sys.modules``."""
    from ocrr.cli.main import main as run

    return run(argv)


__all__ = ["main"]
