"""The ``ocrr`` command line: a thin shell over the library, one module per command."""

from ocrr.cli.main import main

__all__ = ["main"]
