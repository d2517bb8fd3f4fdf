"""The operator's page (docs/service.md) and the README's service section name only commands
and options that exist: every `ocrr serve` / `ocrr ledger ...` line in their code blocks
parses with the real command line parser."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ocrr.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
SERVICE_DOC = ROOT / "docs" / "service.md"
README = ROOT / "README.md"
_STOP = {">", ">>", "|", "&&", ";", "2>", "2>&1"}


def _readme_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## The substrate as a service")
    return text[start : text.index("\n## ", start + 1)]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^\s*```[a-z]*\n(.*?)^\s*```", text, flags=re.S | re.M)


def _commands(text: str) -> list[list[str]]:
    """The argv of every ocrr command in the code blocks (continuations joined, comments,
    redirections and elided arguments dropped)."""
    found = []
    for block in _code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").removeprefix("# ")
            m = re.match(r"^(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?ocrr (serve|ledger)\b(.*)$", line)
            if not m:
                continue
            words = shlex.split(m.group(1) + m.group(2), comments=True)
            argv = []
            for w in words:
                if w in _STOP or w.startswith((">", "2>")):
                    break
                if w != "...":
                    argv.append(w)
            found.append(argv)
    return found


def _documents():
    return [(SERVICE_DOC.name, SERVICE_DOC.read_text(encoding="utf-8")), ("README.md", _readme_section())]


@pytest.mark.parametrize("name,text", _documents(), ids=lambda x: x if x.endswith("md") else "")
def test_every_documented_command_parses(name, text):
    commands = _commands(text)
    assert len(commands) >= (2 if name == "README.md" else 18), commands
    for argv in commands:
        try:
            build_parser(argv[0]).parse_args(argv)
        except SystemExit as e:  # argparse: an unknown option, a missing or malformed argument
            pytest.fail(f"{name}: `ocrr {' '.join(argv)}` does not parse (exit {e.code})")


def test_the_readme_section_is_short_and_links_the_operators_page():
    section = _readme_section()
    assert len(section.strip().splitlines()) <= 40
    assert "(docs/service.md)" in section


def test_the_page_covers_what_an_operator_needs():
    doc = SERVICE_DOC.read_text(encoding="utf-8")
    for needed in (
        "--token-file",
        "OCRR_TOKEN",
        "0600",
        "--tls-cert",
        "--insecure-public",
        "--encoder-nice",
        "--workers",
        "ocrr ledger keygen",
        "**Rotate**",
        "ocrr ledger import",
        "--expect-size",
        "--checkpoint",
        "--verifier-key",
        "--check-every",
        "503",
        "### How to recover",
        "## Metrics",
        "## Auditing",
    ):
        assert needed in doc, needed
