"""The `ocrr` entry point itself: its version, and a reader that stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
        "print(sorted(m for m in COMMANDS.values() if m in sys.modules))\n"
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


# A tiny synthetic run on two worker processes: what a user's script starts with `ocrr run`.
RUN_ON_TWO_WORKERS = (
    '["run", "--dataset", "synthetic", "--data-option", "n_classes=14", "--data-option", "dim=16", '
    '"--data-option", "n_train_per_class=10", "--data-option", "n_test_per_class=4", '
    '"--systems", "static_knn", "--seeds", "0", "1", "--jobs", "2", "--quiet", "--out", "results"]'
)


def _run_script(folder, body: str) -> subprocess.CompletedProcess:
    """Save ``body`` as a script and run it as a user does: ``python script.py``."""
    (folder / "script.py").write_text(f"import sys\nfrom ocrr.cli.main import main\n\n{body}\n", encoding="utf-8")
    # this ocrr, wherever the script runs (a relative PYTHONPATH would not reach it from there)
    paths = [str(Path(ocrr.__file__).parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "script.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_an_unguarded_script_fails_loudly_naming_the_guard(tmp_path):
    """Worker processes import the script that started them: unguarded, it would run again in each
    of them. That must end in a clear error naming the fix and a non-zero exit, not exit 0 with no
    results (its broken pipe to the workers is not a reader closing stdout)."""
    done = _run_script(tmp_path, f"sys.exit(main({RUN_ON_TWO_WORKERS}))")
    assert done.returncode != 0, done.stdout + done.stderr
    assert 'if __name__ == "__main__":' in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "results" / "summary.csv").exists()


def test_a_guarded_script_runs_on_worker_processes(tmp_path):
    done = _run_script(tmp_path, f'if __name__ == "__main__":\n    sys.exit(main({RUN_ON_TWO_WORKERS}))')
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "results" / "summary.csv").is_file()


def test_a_broken_pipe_other_than_stdout_is_a_failure():
    """Only a reader closing stdout (`ocrr ... | head`) may end a command with exit 0; a command
    whose own pipe broke (e.g. to a worker process) failed, and says so."""
    probe = (
        "import sys\n"
        "import ocrr.cli.main as cli\n"
        "def add_parser(sub):\n"
        "    def handler(args):\n"
        "        raise BrokenPipeError(32, 'Broken pipe')\n"
        "    sub.add_parser('pipe').set_defaults(handler=handler)\n"
        "cli.COMMANDS['pipe'] = '__main__'\n"
        "sys.exit(cli.main(['pipe']))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "BrokenPipeError" in done.stderr
