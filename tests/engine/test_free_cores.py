"""No idle core while work waits: when fewer runs are left than a pool has cores, a run whose
system takes free cores (``System.takes_free_cores``) is raised to the cores that fell free,
with the results it has on one thread; every other run stays on one thread."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pandas as pd
import pytest
from tests.engine.free_cores_probes import LLMWaitsForFreeCores, SeesThreads, WaitsForFreeCores

from ocrr.checks.data import Subject, check_data
from ocrr.engine.experiment import Experiment, plan_experiment
from ocrr.engine.fork_server import available_cores
from ocrr.engine.sweep import Grid, executors, prepare_data, read_log, run_sweep
from ocrr.protocols.summary import FOOTPRINT_PARAMS
from ocrr.systems import REGISTRY
from ocrr.systems.registry import register
from ocrr.utils.threads import CoreBudget, pinned_threads

needs_two_cores = pytest.mark.skipif(available_cores() < 2, reason="sharing free cores needs two")


@pytest.fixture
def probes():
    register("sees_threads", SeesThreads, "test", "static_knn reporting its threads", in_all=False)
    register("waits_for_free_cores", WaitsForFreeCores, "test", "waits for the tail", in_all=False)
    yield
    del REGISTRY["sees_threads"], REGISTRY["waits_for_free_cores"]


def _run(tasks, jobs):
    data = prepare_data(tasks, None, None)
    return {task.system: output for task, output in executors.LocalExecutor(jobs).run(tasks, data)}


@needs_two_cores
def test_a_lone_task_is_given_the_free_cores(probes):
    tasks = plan_experiment(Experiment(dataset="demo", seeds=[0], systems=["sees_threads"])).tasks
    output = _run(tasks, jobs=2)["sees_threads"]
    assert output["threads"] == 2
    assert output["footprint"][FOOTPRINT_PARAMS] == 2  # torch's pool in the worker, while predicting


@needs_two_cores
def test_the_last_running_task_takes_the_cores_the_others_left(probes):
    systems = ["substrate", "static_knn", "waits_for_free_cores"]
    outputs = _run(plan_experiment(Experiment(dataset="demo", seeds=[0], systems=systems)).tasks, jobs=2)
    assert outputs["waits_for_free_cores"]["threads"] == 2
    assert outputs["substrate"]["threads"] == outputs["static_knn"]["threads"] == 1


@needs_two_cores
def test_the_last_running_llm_icl_scores_as_many_prompts_at_once_as_it_has_cores():
    """Its torch stays on one thread; it is handed the share and scores two prompts at once."""
    register("llm_waits", LLMWaitsForFreeCores, "test", "llm_icl waiting for the tail", in_all=False)
    llm = "llm_waits:k=3:candidates=all:model=tiny-random:cache=none:progress=0"
    protocol = "heldout:n_heldout=2:eval_cap=4:every=60"
    experiment = Experiment(dataset="demo", seeds=[0], systems=["substrate", llm], protocol=protocol)
    try:
        outputs = _run(plan_experiment(experiment).tasks, jobs=2)
    finally:
        del REGISTRY["llm_waits"]
    [waited] = [output for system, output in outputs.items() if system.startswith("llm_waits")]
    assert waited["threads"] == 2  # the share it was handed
    assert waited["footprint"][FOOTPRINT_PARAMS] == 2  # prompts it scored at once
    assert outputs["substrate"]["threads"] == 1


@needs_two_cores
def test_a_system_that_does_not_take_free_cores_stays_on_one_thread():
    tasks = plan_experiment(Experiment(dataset="demo", seeds=[0], systems=["online_linear"])).tasks
    assert _run(tasks, jobs=2)["online_linear"]["threads"] == 1


def test_the_share_grows_only_once_fewer_runs_are_left_than_cores():
    budget = CoreBudget(4, mp.get_context("spawn"))
    assert [budget.share_among(n) for n in (9, 4, 3, 2, 1, 0)] == [1, 1, 1, 2, 4, 4]


@needs_two_cores
def test_a_mixed_sweep_gives_the_results_of_one_process(probes, tmp_path):
    """The run raised to two threads at the tail (logged) writes what it writes on one."""
    grid = Grid(
        datasets=["demo"],
        seeds=[0],  # one run that waits for the others (two would wait for each other)
        systems=["substrate", "static_knn", "online_linear", "waits_for_free_cores"],
    )
    serial = run_sweep(grid, tmp_path / "serial", executor="serial")
    pooled = run_sweep(grid, tmp_path / "pooled", executor="local", jobs=2)
    assert not serial.failed and not pooled.failed
    columns = [c for c in serial.results.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(serial.results[columns], pooled.results[columns], check_exact=True)
    threads = {r["system"]: r["threads"] for r in read_log(tmp_path / "pooled") if r.get("event") == "done"}
    assert threads["waits_for_free_cores"] == 2 and threads["online_linear"] == 1


def _takers() -> list[str]:
    """One registered name per class that declares it takes free cores (aliases share a class)."""
    names: dict[object, str] = {}
    for name in sorted(REGISTRY):
        try:
            factory = REGISTRY[name].factory
        except ImportError:  # an optional extra is missing: nothing of it runs here
            continue
        if REGISTRY[name].family != "test" and getattr(factory, "takes_free_cores", False):
            names.setdefault(factory, name)
    return sorted(names.values())


@pytest.mark.parametrize("name", _takers())
def test_a_system_that_takes_free_cores_gives_the_same_numbers_on_two_threads(name):
    """The declaration's proof: fit, a stream of corrections, an evaluation, on one thread and
    on two, byte for byte (on the conformance suite's small data, with its light settings)."""
    data = check_data()
    subject = Subject(name)
    spreads_itself = callable(getattr(REGISTRY[name].factory, "use_free_cores", None))
    runs = []
    for threads in (1, 2):
        with pinned_threads(1 if spreads_itself else threads):  # as a pool worker sets them
            system = subject.fitted(data)
            if spreads_itself:
                system.use_free_cores(lambda threads=threads: threads)
            before = system.predict(data.eval)
            for i in range(len(data.stream)):
                item = data.stream[np.asarray([i])]
                system.predict(item)
                system.correct(item)
            runs.append((np.asarray(before), np.asarray(system.predict(data.eval))))
    assert all(np.array_equal(one, two) for one, two in zip(runs[0], runs[1]))
