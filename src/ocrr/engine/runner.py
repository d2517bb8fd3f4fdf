"""Drive one system through one scenario: episodes of predict, then correct; evaluate where planned.

A stream is a sequence of episodes. Within an episode the system predicts every item with
the state it has at the episode's start; then the policy picks which errors are corrected,
in one ``correct`` call. The held-out protocol is the case of one-item episodes, which has
an exact fast path (lookahead batching, see ``_one_item_episodes``).

``run`` is a generator of Checkpoint records, so callers can show progress, stop early or
stream results to disk; every stream prediction goes into a ``StreamTrace``.
``run_to_output`` collects one run as tidy long-format rows.

Near-future accuracy (EvalOCL, Hammoud et al. 2023), when the scenario sets a ``shift`` S
(counted in items): the state that predicts items [a, b) also predicts items
[a + S, b + S), in the same predict call, so each stream item j is also predicted by the
state that predicted item j - S. States that have seen no stream item ask nothing (the
paper's running average starts after the first update).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ocrr.batch import Batch
from ocrr.policies.basic import Policy
from ocrr.policies.feedback import Feedback
from ocrr.protocols.base import RunSoFar
from ocrr.protocols.scenario import Scenario
from ocrr.protocols.summary import FOOTPRINT_COLUMNS
from ocrr.systems.base import Footprint, System


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
    item i (with the state at its episode's start); ``corrected[i]``: was it corrected.

    With a near-future ``shift`` S: ``ahead[j]`` is the prediction of item j by the state that
    predicted item j - S, and ``asked[j]`` whether that query was made."""

    def __init__(self, n: int, shift: int | None = None):
        self.predicted: list = [None] * n
        self.corrected = np.zeros(n, bool)
        self.shift = shift
        self.ahead: list | None = None if shift is None else [None] * n
        self.asked = np.zeros(n if shift is not None else 0, bool)

    def record_ahead(self, source: int, guesses: list) -> None:
        """Near-future predictions of items source + S, source + S + 1, ... by the state that
        predicts item ``source`` (none by a state that has seen no stream item)."""
        if source > 0 and guesses:
            # near-future guesses exist only with a shift, and then ``ahead`` is allocated
            assert self.shift is not None and self.ahead is not None
            lo = source + self.shift
            self.ahead[lo : lo + len(guesses)] = guesses
            self.asked[lo : lo + len(guesses)] = True


def accuracy(system, batch: Batch) -> float:
    """Fraction of ``batch`` predicted right, from one batched predict call."""
    if len(batch) == 0:
        return float("nan")
    predictions = system.predict(batch)
    return float(np.mean([p == t for p, t in zip(predictions, _labels(batch))]))


def _labels(batch: Batch) -> Sequence[str]:
    """The true labels of a stream or eval-set batch (protocols always label both)."""
    assert batch.labels is not None, "stream and eval-set batches carry their labels"
    return batch.labels


class _Clock:
    """Cumulative seconds per phase; kept apart from results (never reproducible)."""

    def __init__(self):
        self.fit = self.predict = self.correct = self.eval = 0.0


def run(
    system, scenario: Scenario, policy: Policy, lookahead: bool = True, trace: StreamTrace | None = None
) -> Iterator[Checkpoint]:
    """Fit, then stream; yield a checkpoint before the stream and after each planned episode."""
    stream = scenario.stream
    shift = getattr(scenario, "shift", None)
    trace = trace if trace is not None else StreamTrace(len(stream), shift)
    if trace.shift != shift:
        raise ValueError(f"the trace's near-future shift {trace.shift} differs from the scenario's {shift}")
    # the policy's coins, noisy labels, delays and budget: the same for every system of a run
    feedback = Feedback(policy, scenario.seed_value, stream, scenario.seed_set, scenario.labels)
    clock = _Clock()
    t0 = time.perf_counter()
    system.fit(scenario.seed_set)
    clock.fit = time.perf_counter() - t0
    points = scenario.eval_points()
    bounds = scenario.bounds()
    counts = {"corrections": 0}
    # A system declaring learns=False answers its fixed eval sets at every checkpoint as it did
    # at the first (ocrr.checks verifies that corrections never change its predictions).
    static_eval = lookahead and getattr(system, "learns", True) is False and scenario.dynamic_eval_sets is None
    first_scores: dict[str, float] = {}

    def checkpoint(episode: int) -> Checkpoint:
        t = time.perf_counter()
        if first_scores:
            acc = dict(first_scores)
        else:
            sets = dict(scenario.eval_sets)
            if scenario.dynamic_eval_sets is not None:
                so_far = RunSoFar(int(bounds[episode]), episode, trace.predicted, trace.corrected, bounds)
                sets.update(scenario.dynamic_eval_sets(so_far))
            acc = {name: accuracy(system, _evaluated(system, name, batch)) for name, batch in sets.items()}
            if static_eval:
                first_scores.update(acc)
        clock.eval += time.perf_counter() - t
        last = episode == points[-1]
        return Checkpoint(
            int(bounds[episode]),
            episode,
            counts["corrections"],
            acc,
            clock.fit,
            clock.predict,
            clock.correct,
            clock.eval,
            system.footprint() if last else None,
            last,
        )

    yield checkpoint(0)
    step_through = _one_item_episodes if scenario.episode_bounds is None else _episodes
    if step_through is _one_item_episodes and (getattr(system, "learns", True) or not lookahead):
        # items come one by one (a static system's come in growing windows: one matrix product each)
        anticipate = getattr(system, "anticipate", None)
        if anticipate is not None:
            t = time.perf_counter()
            anticipate(stream)
            clock.predict += time.perf_counter() - t
    walk = _Walk(
        system, stream, bounds, feedback, trace, clock, counts, lookahead, int(points[1]) if len(points) > 1 else 1
    )
    for start, end in zip(points[:-1], points[1:]):
        step_through(walk, int(start), int(end))
        if int(end) == points[-1] and hasattr(system, "end_of_stream"):
            # a system that learns offline (CMR's OfflineRefining reference) trains here, once
            t = time.perf_counter()
            system.end_of_stream()
            clock.correct += time.perf_counter() - t
        yield checkpoint(int(end))


@dataclass
class _Walk:
    """One run's state as the stream is walked: what both episode steppers read and update."""

    system: System
    stream: Batch
    bounds: np.ndarray
    feedback: Feedback
    trace: StreamTrace
    clock: _Clock
    counts: dict  # corrections so far (and the one-item stepper's lookahead window)
    lookahead: bool
    first_window: int  # the first lookahead window: up to the first checkpoint


def _episodes(walk: _Walk, start: int, end: int) -> None:
    """Episodes start..end-1: one predict call per episode, then one correct call with the
    corrections due at its end (none: no call): without a delay, the errors the policy reveals."""
    system, stream, bounds = walk.system, walk.stream, walk.bounds
    feedback, trace, clock = walk.feedback, walk.trace, walk.clock
    for e in range(start, end):
        a, b = int(bounds[e]), int(bounds[e + 1])
        if a == b:
            continue
        t = time.perf_counter()
        predicted, ahead = predict_with_ahead(system, stream, a, b, trace.shift if a > 0 else None)
        clock.predict += time.perf_counter() - t
        trace.predicted[a:b] = predicted
        if ahead:
            trace.record_ahead(a, ahead)
        scores = feedback.budget_scores(system, stream, a, b)
        for i in range(a, b):
            if feedback.reveal(i, predicted[i - a], None if scores is None else scores[i - a]):
                feedback.send(i, made_at=b)
        _deliver(walk, b)


def _one_item_episodes(walk: _Walk, start: int, end: int) -> None:
    """Items start..end-1, each predicted by the state it arrives to.

    With ``lookahead`` the predictions come in batches: a window of upcoming items (up to the
    next checkpoint) in one call and, as soon as an item is corrected, the predictions after
    it are dropped and the next window is one item, doubling after every window that needed
    no correction. Since ``predict`` has no side effects and batched equals one-by-one
    prediction (both checked for every system by ocrr.checks), the results are those of
    predicting item by item; a static system costs one call per segment instead of fifty.
    A delayed correction changes the state when it is delivered, not when it is made: the
    window breaks there. Budget scores come from the window's state, as its predictions do.
    """
    # A system declaring learns=False is not changed by corrections (ocrr.checks verifies
    # it), so its predictions never go stale.
    system, stream, feedback, trace, clock = walk.system, walk.stream, walk.feedback, walk.trace, walk.clock
    static = getattr(system, "learns", True) is False
    window = walk.counts.setdefault("window", walk.first_window)
    pos = start
    while pos < end:
        upto = min(end, pos + window) if walk.lookahead else pos + 1
        t = time.perf_counter()
        predicted, ahead = predict_with_ahead(system, stream, pos, upto, trace.shift)
        clock.predict += time.perf_counter() - t
        scores = feedback.budget_scores(system, stream, pos, upto)
        first = pos
        window *= 2  # no correction in this window: look further ahead next time
        for offset, guess in enumerate(predicted):
            i = first + offset
            pos = i + 1
            trace.predicted[i] = guess
            if offset < len(ahead):  # the state item i arrives to also predicts item i + S
                trace.record_ahead(i, ahead[offset : offset + 1])
            if feedback.reveal(i, guess, None if scores is None else scores[offset]):
                feedback.send(i, made_at=i + 1)
            if _deliver(walk, i + 1):
                if not static:
                    window = 1  # errors come in runs: predict the next item alone
                    break  # the state changed: predictions after i are stale
    walk.counts["window"] = window


def _deliver(walk: _Walk, now: int) -> bool:
    """Correct the system with everything due by stream time ``now``, in arrival order, in one
    call (with the labels the user gave); whether there was anything."""
    due, batch = walk.feedback.deliver(walk.stream, now)
    if not due:
        return False
    assert batch is not None  # deliver returns a batch whenever something is due
    t = time.perf_counter()
    walk.system.correct(batch)
    walk.clock.correct += time.perf_counter() - t
    walk.trace.corrected[due] = True
    walk.counts["corrections"] += len(due)
    return True


def predict_with_ahead(system, stream: Batch, a: int, b: int, shift: int | None) -> tuple[list, list]:
    """(predictions of items [a, b), near-future predictions of items [a + shift, b + shift)
    cut at the stream's end) from one predict call; no near-future queries without a shift."""
    hi = min(b + shift, len(stream)) if shift is not None else a
    lo = a + shift if shift is not None else a
    if lo >= hi:
        return system.predict(stream[a:b]), []
    if lo <= b:  # the two ranges touch or overlap: one slice
        out = system.predict(stream[a:hi])
        return out[: b - a], out[lo - a : hi - a]
    out = system.predict(stream[np.r_[a:b, lo:hi]])
    return out[: b - a], out[b - a :]


@dataclass
class RunOutput:
    """One run as plain data: long-format metric rows, timings, footprint, stream predictions."""

    metrics: list[dict] = field(default_factory=list)  # {step, episode, metric, value}
    timings: list[dict] = field(default_factory=list)  # wall-clock columns, kept apart
    footprint: dict = field(default_factory=dict)
    predictions: dict = field(default_factory=dict)  # column -> list, one entry per stream item


def run_to_output(
    system, scenario: Scenario, policy: Policy, on_checkpoint: Callable[[Checkpoint], None] | None = None
) -> RunOutput:
    """Run and collect: per checkpoint the corrections, ``acc_<set>`` per eval set, the
    online accuracy so far (stream predictions right, before learning the item) and, with a
    near-future shift, ``near_future_accuracy`` (the running average of the near-future
    queries made so far)."""
    out = RunOutput()
    shift = getattr(scenario, "shift", None)
    trace = StreamTrace(len(scenario.stream), shift)
    labels = _labels(scenario.stream)
    n = len(labels)
    right = 0
    seen = 0
    near = {"right": 0, "asked": 0}
    for cp in run(system, scenario, policy, trace=trace):
        right += sum(trace.predicted[i] == labels[i] for i in range(seen, cp.step))
        if shift is not None:  # queries made by the states that predicted items seen .. cp.step - 1
            assert trace.ahead is not None  # allocated by StreamTrace for a shift
            for j in range(min(seen + shift, n), min(cp.step + shift, n)):
                if trace.asked[j]:
                    near["asked"] += 1
                    near["right"] += trace.ahead[j] == labels[j]
        seen = cp.step
        at = {"step": cp.step, "episode": cp.episode}
        out.metrics.append({**at, "metric": "corrections", "value": float(cp.corrections)})
        out.metrics += [{**at, "metric": f"acc_{name}", "value": acc} for name, acc in cp.accuracy.items()]
        if cp.step:
            out.metrics.append({**at, "metric": "online_accuracy", "value": right / cp.step})
        if near["asked"]:
            out.metrics.append({**at, "metric": "near_future_accuracy", "value": near["right"] / near["asked"]})
        out.timings.append(
            {
                **at,
                "fit_seconds": cp.fit_seconds,
                "predict_seconds": cp.predict_seconds,
                "correct_seconds": cp.correct_seconds,
                "eval_seconds": cp.eval_seconds,
            }
        )
        if cp.last and cp.footprint is not None:
            fp = cp.footprint
            out.footprint = dict(zip(FOOTPRINT_COLUMNS, (fp.entries, fp.params, fp.bytes)))
        if on_checkpoint:
            on_checkpoint(cp)
    out.predictions = prediction_columns(scenario, trace)
    return out


def prediction_columns(scenario: Scenario, trace: StreamTrace) -> dict:
    """One row per stream item: episode, step (items the predicting state had seen), item,
    true label, predicted label, corrected, the protocol's own ``stream_columns`` and, with a
    near-future shift, ``near_future``: item j's prediction by the state that predicted j - S."""
    bounds = scenario.bounds()
    n = len(scenario.stream)
    episode = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    return {
        "episode": episode.tolist(),
        "step": bounds[episode].tolist(),
        "item": list(range(n)),
        "label": list(_labels(scenario.stream)),
        "predicted": [None if p is None else str(p) for p in trace.predicted],
        "corrected": trace.corrected.tolist(),
        **{k: list(v) for k, v in scenario.stream_columns.items()},
        **({} if trace.ahead is None else {"near_future": [None if p is None else str(p) for p in trace.ahead]}),
    }


def _evaluated(system: System, name: str, batch: Batch) -> Batch:
    """The items of an eval set that a system asks to be scored on: a system whose every
    prediction is costly (llm_icl's ``max_eval``) offers ``evaluation_subset(name, n)``, a
    seeded sample recorded with its hyperparameters; every other system is scored on all."""
    pick = getattr(system, "evaluation_subset", None)
    rows = pick(name, len(batch)) if pick is not None else None
    return batch if rows is None else batch[rows]
