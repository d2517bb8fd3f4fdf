"""Drive one system through one scenario: episodes of predict, then correct; evaluate where planned.

A stream is a sequence of episodes. Within an episode the system predicts every item with
the state it has at the episode's start; then the policy picks which errors are corrected,
in one ``correct`` call. The held-out protocol is the case of one-item episodes, which has
an exact fast path (lookahead batching, see ``_one_item_episodes``).

``run`` is a generator of Checkpoint records, so callers can show progress, stop early or
stream results to disk; every stream prediction goes into a ``StreamTrace``.
``run_to_output`` collects one run as tidy long-format rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from ocrr.batch import Batch
from ocrr.policies import Policy
from ocrr.protocols.base import RunSoFar
from ocrr.protocols.scenario import Scenario
from ocrr.systems.base import Footprint


@dataclass
class Checkpoint:
    step: int  # stream items seen
    episode: int  # episodes finished
    corrections: int  # items corrected so far
    accuracy: dict[str, float]  # eval-set name -> accuracy
    fit_seconds: float
    predict_seconds: float  # cumulative, stream predictions only
    correct_seconds: float  # cumulative
    eval_seconds: float  # cumulative, checkpoint evaluations
    footprint: Footprint | None = None  # set on the last checkpoint
    last: bool = False


class StreamTrace:
    """Every stream prediction of a run: ``predicted[i]`` was made before the system learned
    item i (with the state at its episode's start); ``corrected[i]``: was it corrected."""

    def __init__(self, n: int):
        self.predicted: list = [None] * n
        self.corrected = np.zeros(n, bool)


def accuracy(system, batch: Batch) -> float:
    """Fraction of ``batch`` predicted right, from one batched predict call."""
    if len(batch) == 0:
        return float("nan")
    predictions = system.predict(batch)
    return float(np.mean([p == t for p, t in zip(predictions, batch.labels)]))


class _Clock:
    """Cumulative seconds per phase; kept apart from results (never reproducible)."""

    def __init__(self):
        self.fit = self.predict = self.correct = self.eval = 0.0


def run(system, scenario: Scenario, policy: Policy, lookahead: bool = True,
        trace: StreamTrace | None = None) -> Iterator[Checkpoint]:
    """Fit, then stream; yield a checkpoint before the stream and after each planned episode."""
    stream = scenario.stream
    trace = trace if trace is not None else StreamTrace(len(stream))
    coins = policy.coins(scenario.seed_value, len(stream))
    clock = _Clock()
    t0 = time.perf_counter()
    system.fit(scenario.seed_set)
    clock.fit = time.perf_counter() - t0
    points = scenario.eval_points()
    bounds = scenario.bounds()
    counts = {"corrections": 0}

    def checkpoint(episode: int) -> Checkpoint:
        t = time.perf_counter()
        sets = dict(scenario.eval_sets)
        if scenario.dynamic_eval_sets is not None:
            so_far = RunSoFar(int(bounds[episode]), episode, trace.predicted, trace.corrected, bounds)
            sets.update(scenario.dynamic_eval_sets(so_far))
        acc = {name: accuracy(system, batch) for name, batch in sets.items()}
        clock.eval += time.perf_counter() - t
        last = episode == points[-1]
        return Checkpoint(int(bounds[episode]), episode, counts["corrections"], acc, clock.fit, clock.predict,
                          clock.correct, clock.eval, system.footprint() if last else None, last)

    yield checkpoint(0)
    step_through = _one_item_episodes if scenario.episode_bounds is None else _episodes
    for start, end in zip(points[:-1], points[1:]):
        step_through(system, stream, bounds, int(start), int(end), coins, trace, clock, counts, lookahead,
                     first_window=int(points[1]) if len(points) > 1 else 1, reveal_right=policy.reveals_right)
        if int(end) == points[-1] and hasattr(system, "end_of_stream"):
            # a system that learns offline (CMR's OfflineRefining reference) trains here, once
            t = time.perf_counter()
            system.end_of_stream()
            clock.correct += time.perf_counter() - t
        yield checkpoint(int(end))


def _episodes(system, stream: Batch, bounds, start: int, end: int, coins, trace: StreamTrace, clock: _Clock,
              counts: dict, lookahead: bool, first_window: int, reveal_right: bool = False) -> None:
    """Episodes start..end-1: one predict call per episode, then one correct call with the
    errors the policy reveals (none: no call)."""
    labels = stream.labels
    for e in range(start, end):
        a, b = int(bounds[e]), int(bounds[e + 1])
        if a == b:
            continue
        t = time.perf_counter()
        predicted = system.predict(stream[a:b])
        clock.predict += time.perf_counter() - t
        trace.predicted[a:b] = predicted
        chosen = [i for i in range(a, b) if (reveal_right or predicted[i - a] != labels[i]) and coins[i]]
        if chosen:
            t = time.perf_counter()
            system.correct(stream[np.asarray(chosen)])
            clock.correct += time.perf_counter() - t
            trace.corrected[chosen] = True
            counts["corrections"] += len(chosen)


def _one_item_episodes(system, stream: Batch, bounds, start: int, end: int, coins, trace: StreamTrace,
                       clock: _Clock, counts: dict, lookahead: bool, first_window: int,
                       reveal_right: bool = False) -> None:
    """Items start..end-1, each predicted by the state it arrives to.

    With ``lookahead`` the predictions come in batches: a window of upcoming items (up to the
    next checkpoint) in one call and, as soon as an item is corrected, the predictions after
    it are dropped and the next window is one item, doubling after every window that needed
    no correction. Since ``predict`` has no side effects and batched equals one-by-one
    prediction (both checked for every system by ocrr.checks), the results are those of
    predicting item by item; a static system costs one call per segment instead of fifty.
    """
    labels = stream.labels
    # A system declaring learns=False is not changed by corrections (ocrr.checks verifies
    # it), so its predictions never go stale.
    static = getattr(system, "learns", True) is False
    window = counts.setdefault("window", first_window)
    pos = start
    while pos < end:
        upto = min(end, pos + window) if lookahead else pos + 1
        t = time.perf_counter()
        predicted = system.predict(stream[pos:upto])
        clock.predict += time.perf_counter() - t
        first = pos
        window *= 2  # no correction in this window: look further ahead next time
        for offset, guess in enumerate(predicted):
            i = first + offset
            pos = i + 1
            trace.predicted[i] = guess
            if (reveal_right or guess != labels[i]) and coins[i]:
                t = time.perf_counter()
                system.correct(stream[i])
                clock.correct += time.perf_counter() - t
                trace.corrected[i] = True
                counts["corrections"] += 1
                if not static:
                    window = 1  # errors come in runs: predict the next item alone
                    break  # the state changed: predictions after i are stale
    counts["window"] = window


@dataclass
class RunOutput:
    """One run as plain data: long-format metric rows, timings, footprint, stream predictions."""

    metrics: list[dict] = field(default_factory=list)  # {step, episode, metric, value}
    timings: list[dict] = field(default_factory=list)  # wall-clock columns, kept apart
    footprint: dict = field(default_factory=dict)
    predictions: dict = field(default_factory=dict)  # column -> list, one entry per stream item


def run_to_output(system, scenario: Scenario, policy: Policy,
                  on_checkpoint: Callable[[Checkpoint], None] | None = None) -> RunOutput:
    """Run and collect: per checkpoint the corrections, ``acc_<set>`` per eval set and the
    online accuracy so far (stream predictions right, before learning the item)."""
    out = RunOutput()
    trace = StreamTrace(len(scenario.stream))
    labels = scenario.stream.labels
    right = 0
    seen = 0
    for cp in run(system, scenario, policy, trace=trace):
        right += sum(trace.predicted[i] == labels[i] for i in range(seen, cp.step))
        seen = cp.step
        at = {"step": cp.step, "episode": cp.episode}
        out.metrics.append({**at, "metric": "corrections", "value": float(cp.corrections)})
        out.metrics += [{**at, "metric": f"acc_{name}", "value": acc} for name, acc in cp.accuracy.items()]
        if cp.step:
            out.metrics.append({**at, "metric": "online_accuracy", "value": right / cp.step})
        out.timings.append({**at, "fit_seconds": cp.fit_seconds, "predict_seconds": cp.predict_seconds,
                            "correct_seconds": cp.correct_seconds, "eval_seconds": cp.eval_seconds})
        if cp.last and cp.footprint is not None:
            fp = cp.footprint
            out.footprint = {"footprint_entries": fp.entries, "footprint_params": fp.params,
                             "footprint_bytes": fp.bytes}
        if on_checkpoint:
            on_checkpoint(cp)
    out.predictions = prediction_columns(scenario, trace)
    return out


def prediction_columns(scenario: Scenario, trace: StreamTrace) -> dict:
    """One row per stream item: episode, step (items the predicting state had seen), item,
    true label, predicted label, corrected, then the protocol's own ``stream_columns``."""
    bounds = scenario.bounds()
    n = len(scenario.stream)
    episode = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    return {"episode": episode.tolist(), "step": bounds[episode].tolist(), "item": list(range(n)),
            "label": list(scenario.stream.labels), "predicted": [None if p is None else str(p) for p in trace.predicted],
            "corrected": trace.corrected.tolist(), **{k: list(v) for k, v in scenario.stream_columns.items()}}
