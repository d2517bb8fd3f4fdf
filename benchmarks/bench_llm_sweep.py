"""What a finished sweep with ``llm_icl`` cost, and whether it reruns identically.

Reruns, in this process and from the answer cache the sweep filled, every ``llm_icl`` task of
the sweep in ``SWEEP_DIR``, and prints for each: the sweep's wall and CPU seconds (its
log.jsonl), the scoring requests the task makes, and whether the rerun's metrics equal the
sweep's, value for value. Then the totals: requests, model calls (the distinct answers
requested: each was computed once by the sweep, every other request was a cache hit), the
hit rate, and the sweep's CPU milliseconds per model call (an upper bound: the CPU time also
covers retrieval and prompt building).

A rerun makes no model call when the cache is complete; if it does, the line says so.

Run: PYTHONPATH=src python benchmarks/bench_llm_sweep.py SWEEP_DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from ocrr.engine.runner import run_to_output
from ocrr.engine.sweep.data import prepare_data, vectors
from ocrr.engine.sweep.grid import Grid
from ocrr.engine.sweep.store import load_metrics
from ocrr.policies.basic import make_policy
from ocrr.systems import make_system
from ocrr.systems.llm.cache import default_cache_path
from ocrr.systems.llm.icl import shared_cache
from ocrr.utils.threads import pin_threads


def sweep_times(out: Path) -> dict[str, dict]:
    times = {}
    for line in (out / "log.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "done":
            times[event["task_id"]] = event
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path, help="the sweep's --out folder")
    args = ap.parse_args()
    manifest = json.loads((args.sweep / "sweep.json").read_text())
    grid = Grid(**manifest["grid"])
    tasks = [t for t in grid.tasks() if t.system.startswith("llm_icl")]
    if not tasks:
        ap.error(f"{args.sweep} has no llm_icl task")
    pin_threads()
    times = sweep_times(args.sweep)
    recorded = load_metrics(args.sweep)
    data = prepare_data(tasks, grid.data_dir)
    requests = 0
    asked: set[str] = set()
    print("dataset    policy     seed  sweep s  sweep CPU s  requests  rerun calls  same metrics")
    for task in tasks:
        if task.task_id not in times:
            print(f"{task.dataset:<10} {task.policy:<10} {task.seed:>4}  (not finished in the sweep)")
            continue
        shared = data[task.data_key]
        vecs = vectors(shared)
        scenario = task.protocol_object.build_scenario(
            shared.dataset, vecs[: shared.n_train], vecs[shared.n_train :], task.seed
        )
        system = make_system(task.system, labels=scenario.labels, seed=scenario.seed_value)
        path = str(default_cache_path()) if system.cache == "user" else system.cache
        keys = shared_cache(path).record_keys()  # a fresh set for this task
        output = run_to_output(system, scenario, make_policy(task.policy))
        mine = pd.DataFrame(output.metrics).sort_values(["step", "metric"]).reset_index(drop=True)
        theirs = recorded[(recorded.task_id == task.task_id) & recorded.metric.isin(set(mine.metric))]
        theirs = theirs.sort_values(["step", "metric"]).reset_index(drop=True)
        same = len(mine) == len(theirs) and (mine["value"].to_numpy() == theirs["value"].to_numpy()).all()
        requests += system.stats.hits + system.stats.calls
        asked |= keys
        t = times[task.task_id]
        print(
            f"{task.dataset:<10} {task.policy:<10} {task.seed:>4}  {t['seconds']:7.0f}  {t['cpu_seconds']:11.0f}"
            f"  {system.stats.hits + system.stats.calls:8,}  {system.stats.calls:11,}  {'yes' if same else 'NO'}"
        )
    done = [times[t.task_id] for t in tasks if t.task_id in times]
    cpu = sum(t["cpu_seconds"] for t in done)
    calls = len(asked)
    print(
        f"\n{len(done)} llm_icl tasks: {sum(t['seconds'] for t in done) / 3600:.2f} h of task time, "
        f"{cpu / 3600:.2f} CPU-h; {requests:,} scoring requests, {calls:,} model calls "
        f"({1 - calls / max(requests, 1):.0%} cache hits), {1e3 * cpu / max(calls, 1):.0f} CPU ms per call"
    )


if __name__ == "__main__":
    main()
