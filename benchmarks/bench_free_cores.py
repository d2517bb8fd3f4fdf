"""No idle core while work waits: a mixed run, before (every run on one thread) and after
(the last runs take the cores the finished ones left, ``System.takes_free_cores``).

Run: python benchmarks/bench_free_cores.py [--dataset demo] [--systems substrate lora] [--seeds 0]
     [--protocol heldout] [--jobs 2] [--repeat 1]

llm_icl takes free cores by scoring several prompts at once (each on one torch thread), in its
checkpoint evaluations; a reduced demo run that finishes in minutes:
     python benchmarks/bench_free_cores.py --systems substrate llm_icl:cache=none:progress=0:max_eval=40 \
         --protocol heldout:n_heldout=4:every=60

A slow system that takes free cores beside a fast one that does not shows it: the fast run
ends and, before, the slow one finishes on one core while the other idles. Prints, for each
mode, the wall time, the runs' CPU seconds, core utilisation (CPU seconds / (wall x cores))
and the most threads each system ran on; then whether both modes gave the same numbers, and
the load average (the machine may be shared: figures are only comparable at a like load).
"""

from __future__ import annotations

import argparse
import os
import pickle
import time

from ocrr.engine.experiment import Experiment, plan_experiment
from ocrr.engine.sweep import prepare_data
from ocrr.engine.sweep.executors import LocalExecutor


def run_once(tasks, data, jobs: int, share: bool) -> tuple[float, dict]:
    started = time.perf_counter()
    outputs = {}
    for task, output in LocalExecutor(jobs, share_free_cores=share).run(tasks, data):
        if isinstance(output, BaseException):
            raise output
        outputs[task.task_id] = output
    return time.perf_counter() - started, outputs


def numbers(outputs: dict) -> bytes:
    """What a run computed (no times, no process ids): equal bytes, equal results."""
    keys = ("metrics", "footprint", "predictions", "hyperparameters")
    return pickle.dumps([[outputs[task_id][key] for key in keys] for task_id in sorted(outputs)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--systems", nargs="+", default=["substrate", "lora:progress=false"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--protocol", default="heldout")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="before/after pairs, interleaved")
    args = ap.parse_args()

    experiment = Experiment(dataset=args.dataset, systems=args.systems, seeds=args.seeds, protocol=args.protocol)
    plan = plan_experiment(experiment)
    data = prepare_data(plan.tasks, None, None)  # embeddings cached: not timed
    system_of = {task.task_id: task.system for task in plan.tasks}
    print(
        f"{len(plan.tasks)} runs ({', '.join(args.systems)} x seeds {args.seeds}) on {args.dataset}, "
        f"{args.protocol}, --jobs {args.jobs}"
    )
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = {}
    for _ in range(args.repeat):
        for mode, share in (("before", False), ("after", True)):
            wall, outputs = run_once(plan.tasks, data, args.jobs, share)
            cpu = sum(output["cpu_seconds"] for output in outputs.values())
            threads: dict[str, int] = {}
            for task_id, output in outputs.items():
                threads[system_of[task_id]] = max(threads.get(system_of[task_id], 1), output["threads"])
            print(
                f"{mode:>6}: wall {wall:8.2f} s   cpu {cpu:8.2f} s   utilisation {cpu / (wall * args.jobs):6.1%}"
                f"   threads {threads}   load {os.getloadavg()[0]:.2f}"
            )
            results.setdefault(mode, numbers(outputs))
    print("same numbers before and after:", results["before"] == results["after"])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
