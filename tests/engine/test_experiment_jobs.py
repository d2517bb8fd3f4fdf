"""``ocrr run`` on worker processes writes the same run folder as in one process: the runs are
the same tasks, and their tables are assembled in the order asked for, whichever finished first."""

from __future__ import annotations

import pytest
from tests.conftest import python_output

from ocrr.cli.main import main
from ocrr.engine.experiment import Experiment, plan_experiment, run_experiment
from ocrr.errors import OcrrError

SYSTEMS = ["substrate", "static_knn", "online_linear"]


def _tables(result) -> dict:
    """Everything but the timings (wall times differ from one run to the next)."""
    names = ("per_checkpoint", "metrics", "footprints", "predictions", "summary")
    return {name: getattr(result, name) for name in names}


def test_two_workers_give_the_tables_of_one_process():
    exp = Experiment(dataset="demo", seeds=[0, 1], systems=SYSTEMS)
    heard = []
    plan = plan_experiment(exp)
    serial = run_experiment(plan, jobs=1)
    parallel = run_experiment(plan, jobs=2, on_checkpoint=lambda task, cp: heard.append((task.task_id, cp.last)))
    for name, table in _tables(serial).items():
        assert len(table) and table.equals(_tables(parallel)[name]), name
    assert serial.config == parallel.config
    # from workers: each run's last checkpoint only, once per run
    assert sorted(task_id for task_id, _ in heard) == sorted(t.task_id for t in plan.tasks)
    assert all(last for _, last in heard)


@pytest.mark.parametrize("jobs", [0, -1, True, 1.5])
def test_jobs_below_one_or_not_whole_are_refused(jobs):
    with pytest.raises(OcrrError, match="jobs must be a whole number of worker processes"):
        run_experiment(Experiment(dataset="demo", seeds=[0], systems=["static_knn"]), jobs=jobs)


def test_the_command_refuses_jobs_0_naming_the_fix(capsys, tmp_path):
    assert main(["run", "--dataset", "demo", "--jobs", "0", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--jobs must be at least 1" in err and "Traceback" not in err


def test_workers_see_the_environment_of_now_not_of_the_fork_server_s_start(tmp_path):
    """The fork server keeps the environment it started with; a pool hands its workers the
    owner's current one, as spawned workers would have. (In a subprocess: it changes the
    process's environment.)"""
    import subprocess
    import sys

    code = """
import os
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp
from ocrr.engine.fork_server import start_fork_server
from ocrr.engine.sweep.executors import _init_worker

def mark():
    return os.environ.get("OCRR_TEST_MARK")

if __name__ == "__main__":
    os.environ["OCRR_TEST_MARK"] = "at the server's start"
    assert start_fork_server()
    os.environ["OCRR_TEST_MARK"] = "now"
    ctx = mp.get_context("forkserver")
    with ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_worker, initargs=({}, {}, dict(os.environ))) as pool:
        print(pool.submit(mark).result())
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:  # without the owner's environment
        print(pool.submit(mark).result())
"""
    script = tmp_path / "env_check.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.splitlines() == ["now", "at the server's start"], out.stdout + out.stderr


def test_planning_the_main_job_leaves_torch_to_the_workers():
    """The command that hands its runs to workers names the linear systems (their settings go
    into the run's config) without importing torch: its workers' fork server loads it."""

    probe = (
        "import sys\n"
        "from ocrr.engine.experiment import Experiment, plan_experiment\n"
        "from ocrr.engine.fork_server import WORKER_MODULES\n"
        "plan = plan_experiment(Experiment(dataset='demo', seeds=[0], systems=["
        "'substrate', 'static_knn', 'static_linear', 'online_linear']))\n"
        "hyper = {t.system: t.hyperparameters for t in plan.tasks}\n"
        "assert '\"lr\":0.05' in hyper['online_linear'], hyper\n"
        "assert 'torch' in WORKER_MODULES\n"
        "print('torch' in sys.modules)\n"
    )
    assert python_output(probe) == "False"


def test_planning_the_main_sweep_leaves_torch_to_the_workers():
    """Every system of the main preset is named, with its settings, without torch (the
    continual baselines, knn_lm and the consolidating memory import it where they run)."""
    probe = (
        "import sys\n"
        "from ocrr.engine.sweep import PRESETS\n"
        "from ocrr.systems import make_system\n"
        "names = PRESETS['main']['systems']\n"
        "hyper = {n: make_system(n, labels=['a', 'b'], seed=0).hyperparameters() for n in names}\n"
        "assert hyper['lwf']['temperature'] == 2.0 and 'refit_every' in hyper['consolidating'], hyper\n"
        "print(len(names), 'torch' in sys.modules)\n"
    )
    assert python_output(probe) == "10 False"
