"""The documentation site builds in strict mode, and its CLI reference covers the whole parser."""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "cli_reference.py"
DOCS_PACKAGES = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")


def _load_hook():
    spec = importlib.util.spec_from_file_location("cli_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _missing_docs_packages() -> list[str]:
    missing = []
    for name in DOCS_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


def _all_parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def _page_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = _missing_docs_packages()
    if missing:
        pytest.skip(f"the docs tools are not installed ({', '.join(missing)}): pip install -e .[docs]")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_page(site):
    for page in ("index.html", "getting-started/index.html", "reference/api/index.html", "configuration/index.html"):
        assert (site / page).is_file(), page
    for section in ("concepts", "reproductions"):
        assert any((site / section).iterdir()), section


@pytest.mark.slow
def test_the_cli_reference_names_every_command_and_option(site):
    from ocrr.cli.main import build_parser

    text = _page_text(site / "reference" / "cli" / "index.html")
    for parser in _all_parsers(build_parser()):
        assert parser.prog in text, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue  # -h is on every command; suppressed options are hidden on purpose
            for flag in action.option_strings:
                assert flag in text, f"{parser.prog} {flag}"


@pytest.mark.slow
def test_the_api_reference_renders_the_public_names(site):
    text = _page_text(site / "reference" / "api" / "index.html")
    for name in ("open_substrate", "make_system", "check_system", "register_protocol", "make_policy"):
        assert name in text, name
    for name in ("DurableLedger", "export_jsonl", "ServiceConfig", "run_experiment", "OcrrError"):
        assert name in text, name


def test_the_cli_hook_renders_nested_commands_defaults_and_escapes_pipes():
    hook = _load_hook()
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--version", action="version", version="1.0", help="print the version")
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="run things", description="Run things: the long story.")
    run.add_argument("--mode", default="fast", help="fast | slow (default %(default)s)")
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds")
    run.add_argument("--quiet", action="store_true", help="no output")
    run.add_argument("--hidden", help=argparse.SUPPRESS)
    group = commands.add_parser("ledger", help="ledger commands")
    inner = group.add_subparsers(dest="what")
    inner.add_parser("verify", help="check a file").add_argument("path", help="the file")

    page = hook.render(parser)

    headings = re.findall(r"^(#+) `([^`]+)`", page, re.M)
    assert headings == [("##", "tool"), ("##", "tool run"), ("##", "tool ledger"), ("###", "tool ledger verify")]
    assert "| `--version` |  | print the version |" in page
    mode_row = next(line for line in page.splitlines() if line.startswith("| `--mode"))
    assert mode_row == "| `--mode MODE` | `fast` | fast \\| slow (default fast) |"
    assert "| `--seeds SEEDS [SEEDS ...]` | `0 1` | seeds |" in page
    assert "| `--quiet` |  | no output |" in page
    assert "--hidden" not in page
    assert "| `path` (positional) |  | the file |" in page
    assert "Run things: the long story." in page


def test_the_cli_hook_fills_only_its_page_and_insists_on_the_marker():
    hook = _load_hook()

    class Page:
        def __init__(self, uri: str):
            self.file = type("File", (), {"src_uri": uri})()

    assert hook.on_page_markdown("text " + hook.MARKER, Page("index.md")) == "text " + hook.MARKER
    filled = hook.on_page_markdown("# CLI\n\n" + hook.MARKER, Page(hook.PAGE))
    assert hook.MARKER not in filled and "## `ocrr run`" in filled
    with pytest.raises(ValueError, match="marker"):
        hook.on_page_markdown("# CLI without the marker", Page(hook.PAGE))


def test_the_site_loads_no_font_from_the_web(site):
    """theme.font: false: the pages use the system fonts, so an offline reader (or ``ocrr serve``'s
    /docs on a closed network) sees the site as it is, without requests to a font CDN."""
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis.com" not in index and "fonts.gstatic.com" not in index
