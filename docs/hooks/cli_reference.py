"""MkDocs hook: render the ``ocrr`` command line into docs/reference/cli.md at build time.

The page on disk holds an introduction and the marker below; at build time the marker is
replaced by every command, sub-command and option, read from the same argparse parser that
``ocrr`` runs (``ocrr.cli.main.build_parser``), so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"
USAGE_WIDTH = 80  # fixed, so the page does not depend on the terminal that builds it


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker of the CLI reference page with the generated reference."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER!r}: the CLI reference has nowhere to go")
    from ocrr.cli.main import build_parser

    return markdown.replace(MARKER, render(build_parser()))


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown for every command under ``parser`` (one section each, nested commands included)."""
    return "\n".join(_section(prog, sub, help_line) for prog, sub, help_line in _commands(parser, None))


def _commands(
    parser: argparse.ArgumentParser, help_line: str | None
) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    """(prog, parser, one-line help) for the top parser when it has options of its own (``--version``)
    and for every command below it, depth first, in parser order."""
    sub_actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if help_line is not None or not sub_actions or any(_documented(a) for a in parser._actions):
        yield parser.prog, parser, help_line
    for action in sub_actions:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            yield from _commands(sub, helps.get(name) or "")


def _section(prog: str, parser: argparse.ArgumentParser, help_line: str | None) -> str:
    depth = prog.count(" ")  # "ocrr run" -> 1, "ocrr ledger verify" -> 2
    lines = [f"{'#' * max(2, min(depth + 1, 4))} `{prog}`", ""]  # the page's title is the only h1
    about = parser.description or help_line
    if about:
        lines += [_text(about), ""]
    lines += ["```text", _usage(parser).rstrip(), "```", ""]
    rows = [_row(parser, action) for action in parser._actions if _documented(action)]
    if rows:
        lines += ["| option | default | what it does |", "| --- | --- | --- |", *rows, ""]
    if parser.epilog:
        lines += [_text(parser.epilog), ""]
    return "\n".join(lines)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(prog=parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help()


def _documented(action: argparse.Action) -> bool:
    return action.help is not argparse.SUPPRESS and not isinstance(
        action, argparse._HelpAction | argparse._SubParsersAction
    )


def _row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.option_strings:
        metavar = _metavar(action)
        flags = ", ".join(f"`{flag}{' ' + metavar if metavar else ''}`" for flag in action.option_strings)
    else:
        flags = f"`{action.metavar or action.dest}` (positional)"
        if action.nargs in ("*", "+", argparse.REMAINDER):
            flags += ", several"
    help_text = _expanded_help(parser, action)
    if action.choices is not None and not isinstance(action.choices, dict):
        help_text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    return f"| {flags} | {_default(action)} | {_cell(help_text)} |"


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    return argparse.HelpFormatter(prog="ocrr")._format_args(action, action.dest.upper())


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    value = " ".join(map(str, action.default)) if isinstance(action.default, list | tuple) else str(action.default)
    return f"`{value}`" if value and "`" not in value and "|" not in value else _cell(value)


def _expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    formatter = argparse.HelpFormatter(prog=parser.prog)
    return " ".join(formatter._expand_help(action).split())


def _text(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False)


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: no raw pipes, no stray HTML."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("*", "\\*")
