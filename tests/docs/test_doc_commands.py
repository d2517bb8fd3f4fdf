"""Every documented command runs offline: README.md, docs/getting-started.md and the tutorials.

Each page is one test case. Its blocks run in order (the convention is in
``tests/docs/doc_blocks.py``) with the installed ``ocrr`` console script first on PATH,
``OCRR_DATA_DIR`` unset and every download switched off (``OCRR_OFFLINE=1``,
``HF_HUB_OFFLINE=1``), in folders under a temporary directory. A Python block runs as a
user saves and runs it, ``python file.py`` (so a worker pool imports it, as it would theirs).
The pages share one user cache, so the demo set is encoded once per session. What ran, and
the blocks marked ``not-run`` with their reasons, are printed (``pytest -rP`` or ``-s`` shows
them); a tutorial must run at least one command.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from tests.docs.doc_blocks import Block, bash_script, read_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "getting-started.md",
    *sorted((ROOT / "docs" / "tutorials").glob("*.md")),
]
BLOCK_TIMEOUT_S = 300  # one block; the slowest (the first demo encoding) took 20-65 s on a busy 2-core box
SCRIPTS = Path(sysconfig.get_path("scripts"))  # where pip put the `ocrr` console script
PYTEST_SUMMARY = re.compile(r"^(\d+) passed\b", re.MULTILINE)  # pytest -q's last line


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One user cache for every page: the demo embeddings are computed once, offline."""
    return tmp_path_factory.mktemp("docs-cache")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_run_offline(page, shared_cache, tmp_path):
    assert page.is_file(), f"{page.relative_to(ROOT)} is missing: the docs promise it"
    assert (SCRIPTS / "ocrr").is_file(), f"no ocrr console script in {SCRIPTS}: install ocrr (make setup)"
    blocks = read_blocks(page)
    env = _offline_env(shared_cache)
    ran, skipped, left_out = 0, [], []
    groups: list[int] = []  # process groups to end when the page is done (servers run with &)
    try:
        for index, block in enumerate(blocks):
            left_out += block.make_lines
            if block.action == "skip":
                skipped.append(f"{block.where} ({block.language}): {block.not_run}")
                continue
            if block.action not in ("save", "run"):
                continue
            folder = tmp_path / (f"in-{block.run_in}" if block.run_in else f"block-{index}")
            folder.mkdir(exist_ok=True)
            if block.action == "save":
                assert block.title is not None
                (folder / block.title).parent.mkdir(parents=True, exist_ok=True)
                (folder / block.title).write_text(block.text, encoding="utf-8")
                continue
            count, output = _run(block, folder, env, groups)
            ran += count
            _check_pytest_summary(block, output, blocks[index + 1 : index + 2])
    finally:
        _end(groups)
    print(f"\n{page.relative_to(ROOT)}: {ran} commands run")
    for line in skipped:
        print(f"  not run: {line}")
    for line in left_out:
        print(f"  not run (a make target): {line}")
    if page.parent.name == "tutorials":
        assert ran > 0, f"{page.name} has no runnable command: a tutorial must run offline"


def _offline_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OCRR_DATA_DIR", "OCRR_TOKEN", "PYTHONPATH")}
    env.update(
        PATH=f"{SCRIPTS}{os.pathsep}{env.get('PATH', '')}",
        OCRR_CACHE_DIR=str(cache),
        OCRR_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def _run(block: Block, folder: Path, env: dict[str, str], groups: list[int]) -> tuple[int, str]:
    """Run one block in ``folder``; return how many commands it held, and what it printed. Fails naming the block."""
    if block.language == "bash":
        argv, count, shown = ["bash", "-c", bash_script(block.commands)], len(block.commands), block.commands
    else:  # saved and run as a user does (`python file.py`): a worker pool then imports this file
        script = folder / f"doc_block_{block.line}.py"
        script.write_text(block.text, encoding="utf-8")
        argv, count, shown = [sys.executable, script.name], 1, [block.text]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so what it leaves running can be ended
    )
    try:
        output, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _end([proc.pid])
        output, _ = proc.communicate()
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s:\n{_tail(output)}")
    finally:
        # Remember the group only while something of it still runs (a server started with &):
        # an empty group's id may be reused by someone else's processes.
        if _group_alive(proc.pid):
            groups.append(proc.pid)
    if proc.returncode != 0:
        pytest.fail(
            f"{block.where} ({block.language} block) failed with exit status {proc.returncode}:\n"
            + "\n".join(shown)
            + f"\n--- output ---\n{_tail(output)}"
        )
    print(f"{block.where}: {count} command(s) in {time.monotonic() - started:.1f} s")
    return count, output


def _check_pytest_summary(block: Block, output: str, shown_after: list[Block]) -> None:
    """Where a page shows the pytest summary a command prints ("31 passed in 0.56s"), the command
    prints that count today: a check added to the suite must not leave the page stale."""
    if not shown_after or shown_after[0].language != "text":
        return
    promised = PYTEST_SUMMARY.findall(shown_after[0].text)
    if promised:
        got = PYTEST_SUMMARY.findall(output)
        assert got == promised, f"{shown_after[0].where} shows {promised} passed; {block.where} printed {got}"


def _end(groups: list[int]) -> None:
    """SIGTERM every process group still alive (a server a page started with &), then SIGKILL."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pgid in groups:
            try:
                os.killpg(pgid, signum)
                alive.append(pgid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_group_alive(g) for g in alive):
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _tail(output: str, lines: int = 60) -> str:
    return "\n".join(output.splitlines()[-lines:])
