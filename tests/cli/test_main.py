"""The `ocrr` entry point itself: its version, and a reader that stops early."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tests.conftest import python_output

import ocrr
from ocrr.cli.main import main


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"ocrr {ocrr.__version__}"


def test_version_loads_no_command():
    """`ocrr --version` answers without importing any command's module (all of them: ~1 s)."""
    probe = (
        "import sys\n"
        "from ocrr.cli.main import COMMANDS, main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m, _ in COMMANDS.values() if m in sys.modules))\n"
    )
    assert python_output(probe).splitlines()[-1] == "[]"


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    """`ocrr ledger export L | head -1`: the reader leaves early; no traceback, exit 0."""
    vectors = np.random.default_rng(0).standard_normal((200, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with ocrr.open_substrate(tmp_path / "l.db", "substrate") as substrate:
        substrate.correct(vectors, ["a"] * 200, None)  # ~400 KB of export: more than a pipe holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", "ledger", "export", str(tmp_path / "l.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize("module", ["ocrr.cli", "ocrr.cli.main"])
def test_both_module_forms_run_without_a_warning(module):
    proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ocrr {ocrr.__version__}"
    assert proc.stderr == "", proc.stderr  # runpy warned here when the package imported ocrr.cli.main


def test_ocrr_run_can_start_its_fork_server_before_the_engine_loads():
    """``ocrr run`` starts the fork server (its workers' imports) first thing in its handler:
    the command's own module must not load pandas or the engine before then, or the workers
    start that much later (measured: 0.3 s of a 5 s main job)."""
    probe = (
        "import sys\n"
        "import ocrr.cli.main, ocrr.cli.run\n"
        "heavy = ('pandas', 'torch', 'ocrr.engine.experiment', 'ocrr.engine.sweep')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert python_output(probe) == "[]"
