"""Read the runnable examples out of a Markdown page, by the docs' convention.

- A fenced block whose info string starts with ``bash`` is run: one command per line, a
  trailing ``\\`` continues a line, lines starting with ``#`` are comments. ``make …``
  lines are not run: ``make run``, ``test`` and ``setup`` would recurse into the suite or
  reinstall it, and every target needs the repository's Makefile (CI runs them itself).
- A ``python`` block is run with the test's Python interpreter.
- A block with ``title="NAME"`` in its info string (mkdocs-material's file title) is the
  content of a file: it is saved as NAME in the block's working folder, not run.
- Any other block (``console``, ``text``, ``toml``, …) is never run.
- HTML comments on the lines directly above a fence steer the block:
  ``<!-- not-run: REASON -->`` skips it (the reason is reported);
  ``<!-- run-in: NAME -->`` runs it in the working folder NAME, shared with the page's
  other blocks of that name (otherwise each block gets a fresh folder).

Each block runs in a shell (or Python process) of its own, in the page's order: files
carry over between blocks of one folder, shell variables and ``cd`` do not. A bash block
stops at its first failing command (``set -eo pipefail``), and the test names that
command. A python block runs as ``python -c``, so modules saved in its folder import.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

RUN_LANGUAGES = ("bash", "python")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_COMMENT = re.compile(r"^\s*<!--\s*(?P<key>not-run|run-in)\s*:\s*(?P<value>.*?)\s*-->\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')
# `make` targets recurse into the suite (test), reinstall it (setup) or need the Makefile
_MAKE_SKIPPED = re.compile(r"^\s*make\b")


class DocFormatError(ValueError):
    """A page breaks the convention (an unclosed fence, a heredoc in a bash block)."""


@dataclass
class Block:
    """One fenced block of a page, with where it starts and how the convention treats it."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    title: str | None = None
    not_run: str | None = None
    run_in: str | None = None
    commands: list[str] = field(default_factory=list)  # bash: the commands to run
    make_lines: list[str] = field(default_factory=list)  # bash: `make …` lines left out

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def action(self) -> str:
        """'save', 'skip', 'run' or 'ignore'."""
        if self.not_run is not None:
            return "skip"
        if self.title is not None:
            return "save"
        if self.language in RUN_LANGUAGES and (self.language == "python" or self.commands):
            return "run"
        return "ignore"


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of the page at ``path``, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        body, j = [], i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise DocFormatError(f"{path.name}:{i + 1}: the fence opened here is never closed")
        block = Block(path, i + 1, _language(info), "\n".join(body) + "\n")
        title = _TITLE.search(info)
        block.title = title["title"] if title else None
        _steer(block, lines, i)
        if block.language == "bash" and block.title is None:
            block.commands, block.make_lines = bash_commands(block.text, block.where)
        blocks.append(block)
        i = j + 1
    return blocks


def bash_commands(text: str, where: str) -> tuple[list[str], list[str]]:
    """(commands to run, `make` lines left out) of a bash block, continuations joined."""
    commands: list[str] = []
    skipped: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if "<<" in line and not re.search(r"<<<", line):
            raise DocFormatError(f'{where}: a heredoc cannot be run line by line; use a block with title="FILE"')
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        command = (current + line).strip()
        current = ""
        (skipped if _MAKE_SKIPPED.match(command) else commands).append(command)
    if current:
        raise DocFormatError(f"{where}: the last line ends with a backslash")
    return commands, skipped


def bash_script(commands: list[str]) -> str:
    """A script that runs ``commands`` in order, stops at the first that fails, and names it."""
    lines = [
        "set -eo pipefail",
        "trap 'status=$?; echo \"docs test: this command failed (exit $status): $DOC_COMMAND\" >&2' ERR",
    ]
    for command in commands:
        lines.append(f"DOC_COMMAND={shlex.quote(command)}")
        lines.append(command)
    return "\n".join(lines) + "\n"


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0])


def _language(info: str) -> str:
    word = info.split()[0] if info.split() else ""
    return word.strip("{}.").lower()


def _steer(block: Block, lines: list[str], fence_index: int) -> None:
    """Read the <!-- not-run / run-in --> comments directly above the fence."""
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    while k >= 0:
        comment = _COMMENT.match(lines[k])
        if not comment:
            break
        if comment["key"] == "not-run":
            if not comment["value"]:
                raise DocFormatError(f"{block.where}: <!-- not-run: --> needs a reason")
            block.not_run = comment["value"]
        else:
            block.run_in = comment["value"]
        k -= 1
