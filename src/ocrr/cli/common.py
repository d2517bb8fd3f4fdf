"""What every command shares: its parser's shape, the console, the error line and the hint line (kept light: `ocrr`
imports it first).

Every message the CLI prints (an error, a hint, a notice such as "wrote ... to <folder>") is
one unwrapped line: a terminal folds it where it must, but no newline is ever put inside a path
or URL, so it stays whole for copying. Tables and panels still lay themselves out to the width.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape


def add_command(
    sub, name: str, run: Callable[[argparse.Namespace], int], *, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """The parser of ``ocrr <name>``, whose arguments ``run`` is called with; each command
    module's ``add_parser(sub)`` makes its own with this, then adds its arguments."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=run)
    return parser


class Screen(Console):
    """A rich console whose plain-text messages are never hard-wrapped.

    ``print`` of strings alone defaults to ``soft_wrap=True`` (rich would otherwise break them
    at the console width, inside paths too); renderables (tables, panels, progress) keep rich's
    layout, since soft wrapping would crop a panel's text.
    """

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        if soft_wrap is None and objects and all(isinstance(o, str) for o in objects):
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **options)


def console(fit_terminal: bool = False) -> Screen:
    """A console wide enough for the results table even when output is piped (120 columns at
    least); with ``fit_terminal``, a terminal's own width (a listing meant to fit one screen)."""
    probe = Console()
    return Screen(width=probe.width if fit_terminal and probe.is_terminal else max(probe.width, 120))


def print_error(err: Exception) -> None:
    """One error line on stderr, never hard-wrapped (a path or URL in it stays whole for copying), its text
    printed as written: brackets in it (a list, "[stream=0]") are not rich markup."""
    Screen(stderr=True).print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)


def print_hint(text: str) -> None:
    """One hint line on stderr: a combination that runs but is known to be meaningless, or better
    done otherwise. Not an error: the command goes on."""
    Screen(stderr=True).print(f"[yellow]hint:[/] {escape(text)}", highlight=False)


def print_warning(text: str) -> None:
    """One warning line on stderr: something the user should know that stops nothing (a damaged
    file whose run runs again). Not an error: the command goes on."""
    Screen(stderr=True).print(f"[yellow]warning:[/] {escape(text)}", highlight=False)
