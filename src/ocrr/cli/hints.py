"""Hints: option combinations of ``ocrr run`` and ``ocrr sweep`` that run but are known to be
meaningless (an option that changes nothing) or better done otherwise (the ocl protocol
without the policy EvalOCL compares under). Each is one line, printed on stderr before the
work starts; the command goes on. A combination that cannot work is an OcrrError instead,
raised where the options are read.

The checks take the grid the command will run (so a hint speaks of what will happen, after
every option was validated) and the flags as given on the command line.
"""

from __future__ import annotations

from collections import Counter

from ocrr.engine.sweep import Grid
from ocrr.policies.basic import make_policy
from ocrr.protocols import make_protocol
from ocrr.specs import parse_spec, spec_name

# the held-out protocol's shortcut flags, by the option each one sets
SHORTCUT_FLAGS = {"n_heldout": "--heldout", "eval_cap": "--eval-cap", "every": "--every"}
ALWAYS_AVAILABLE = ("demo", "synthetic")  # datasets that are bundled or generated: never missing


def grid_hints(grid: Grid, *, policy_flag: str, shortcuts: dict, seeds: list[int] | None) -> list[str]:
    """Hints about a grid: ``policy_flag`` is how the command names its policies (--policy or
    --policies); ``shortcuts`` the held-out shortcut values given on the command line
    ({option: value}); ``seeds`` the --seeds given (None: not given)."""
    hints = _ocl_hints(grid, policy_flag)
    hints += _policy_hints(grid, policy_flag)
    hints += _shortcut_hints(grid, shortcuts)
    hints += _cmr_stream_hints(grid)
    if seeds:
        repeated = [str(s) for s, n in Counter(seeds).items() if n > 1]
        if repeated:
            hints.append(f"--seeds lists {', '.join(repeated)} more than once; each seed runs once.")
    return hints


def data_hints(datasets: list[str], no_oos: bool, test_fraction: float | None = None) -> list[str]:
    """Data options that change nothing for these datasets."""
    hints = []
    if no_oos and "clinc150" not in datasets:
        hints.append(
            f"--no-oos only changes clinc150 (it drops its out-of-scope class); "
            f"{', '.join(datasets)} {'is' if len(datasets) == 1 else 'are'} unaffected."
        )
    for dataset in datasets:
        kind, _, files = dataset.partition(":")
        if test_fraction is not None and kind in ("csv", "jsonl") and "," in files:
            hints.append(f"--test-fraction {test_fraction} is ignored: --dataset {dataset} names its test file.")
    return hints


def fallback_demo_hint(dataset: str) -> list[str]:
    """``ocrr run --fallback-demo`` on a dataset that is never missing."""
    if dataset in ALWAYS_AVAILABLE:
        return [f"--fallback-demo changes nothing with --dataset {dataset}: it is always available."]
    return []


def executor_hints(executor: str, jobs: int | None, address: str | None, report: bool, dry_run: bool) -> list[str]:
    """``ocrr sweep`` flags that the chosen way of running ignores."""
    hints = []
    if address is not None and executor != "ray":
        hints.append(f"--address is where a Ray cluster listens; --executor {executor} ignores it. Add --executor ray.")
    if jobs is not None and executor == "serial":
        hints.append(
            "--jobs is ignored by --executor serial (one run at a time, in this process); use local for workers."
        )
    if report and dry_run:
        hints.append("--report writes nothing with --dry-run (nothing runs); drop --dry-run to run and report.")
    return hints


def _ocl_hints(grid: Grid, policy_flag: str) -> list[str]:
    """EvalOCL's comparison reveals every label (the policy all) and, on a label-ordered stream
    (stay > 0), measures near-future accuracy (shift=S)."""
    ocl = [spec for spec in grid.protocols if spec_name(spec) == "ocl"]
    if not ocl:
        return []
    hints = []
    if not any(make_policy(p).reveals_right for p in grid.policies):
        named = " ".join(map(str, grid.policies))
        fix = "--policy all" if policy_flag == "--policy" else "add all to --policies"
        hints.append(
            f"the ocl protocol under {policy_flag} {named} learns only from corrected mistakes; EvalOCL's "
            f"comparison (online vs near-future accuracy, retention) reveals every label: {fix}."
        )
    for spec in ocl:
        protocol = make_protocol(spec)
        if protocol.shift is None and protocol.values["stay"] > 0:  # a shuffled stream (stay=0) has S* = 0
            hints.append(
                f"--protocol {spec} measures no near-future accuracy, only online accuracy (which a "
                f"label-ordered stream inflates); find S with 'ocrr calibrate-shift --protocol {spec}', "
                f"then give --protocol {spec}:shift=S."
            )
    return hints


def _policy_hints(grid: Grid, policy_flag: str) -> list[str]:
    hints = []
    for spec in grid.policies:
        policy = make_policy(spec)
        if policy.name.startswith("random:") and policy.p >= 1.0:
            same = "oracle" + policy.name[len("random:1") :]  # its feedback options, if any, kept
            hints.append(
                f"{policy_flag} {spec} corrects every wrong prediction, as oracle does; give {same} "
                "(the same runs, with results that sit beside oracle's)."
            )
    return hints


def _shortcut_hints(grid: Grid, shortcuts: dict) -> list[str]:
    """A held-out shortcut (--every 25) that the protocol spec also sets (heldout:every=10): the spec wins."""
    hints = []
    for spec in grid.protocols:
        if spec_name(spec) != "heldout":
            continue
        options = parse_spec(spec, "protocol")[1]
        for key, value in shortcuts.items():
            if value is not None and key in options:
                hints.append(
                    f"{SHORTCUT_FLAGS[key]} {value} is ignored: --protocol {spec} sets {key}={options[key]}. "
                    "Give it once."
                )
    return hints


def _cmr_stream_hints(grid: Grid) -> list[str]:
    """cmr:streams=S cycles runs over S streams by seed (stream = seed mod S): seeds that miss some."""
    hints = []
    for spec in grid.protocols:
        if spec_name(spec) != "cmr":
            continue
        streams = parse_spec(spec, "protocol")[1].get("streams")
        if not isinstance(streams, int) or streams < 1:
            continue
        covered = sorted({int(s) % streams for s in grid.seeds})
        if len(covered) < streams:
            hints.append(
                f"--protocol {spec} cycles over {streams} streams (stream = seed mod {streams}), but the seeds "
                f"reach {len(covered)} of them; give --seeds 0 to {3 * streams - 1} for {streams} streams x 3 seeds."
            )
    return hints
