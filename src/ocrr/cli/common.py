"""What every command shares: the console and the error line (kept light: `ocrr` imports it first)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape


def console() -> Console:
    """A console wide enough for the results table even when output is piped."""
    return Console(width=max(Console().width, 120))


def print_error(err: Exception) -> None:
    """One error line on stderr, never hard-wrapped (a path or URL in it stays whole for copying), its text
    printed as written: brackets in it (a list, "[stream=0]") are not rich markup."""
    Console(stderr=True).print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
