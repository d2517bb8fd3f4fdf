"""Drive one system through one scenario: predict each stream item, maybe correct, checkpoint.

``run`` is a generator of Checkpoint records, so callers can show progress, stop early
or stream results to disk. ``run_to_rows`` flattens one run into tidy rows (one per
checkpoint), keeping wall-clock timings apart from the reproducible columns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from ocrr.policies import Policy
from ocrr.protocols.scenario import Scenario
from ocrr.batch import Batch
from ocrr.systems.base import Footprint

CHECKPOINT_EVERY = 50


@dataclass
class Checkpoint:
    step: int  # stream items seen
    corrections: int  # corrections applied so far
    accuracy: dict[str, float]  # eval-set name -> accuracy
    fit_seconds: float
    predict_seconds: float  # cumulative, stream predictions only
    correct_seconds: float  # cumulative
    eval_seconds: float  # cumulative, checkpoint evaluations
    footprint: Footprint | None = None  # set on the last checkpoint
    last: bool = False


def accuracy(system, batch: Batch) -> float:
    """Fraction of ``batch`` predicted right, from one batched predict call."""
    if len(batch) == 0:
        return float("nan")
    predictions = system.predict(batch)
    return float(np.mean([p == t for p, t in zip(predictions, batch.labels)]))


def run(system, scenario: Scenario, policy: Policy, every: int = CHECKPOINT_EVERY,
        lookahead: bool = True) -> Iterator[Checkpoint]:
    """Fit, then stream; yield a checkpoint at step 0, every ``every`` items and at the end.

    Each stream item is predicted by the system in the state it has when the item arrives.
    With ``lookahead`` the runner gets those predictions in batches: it predicts a window
    of upcoming items (up to the next checkpoint) in one call and, as soon as an item is
    corrected, drops the predictions after it and goes on from the next item with a
    window of one, doubling it after every window that needed no correction. Since
    ``predict`` has no side effects and batched equals one-by-one prediction (both checked
    for every system by the conformance suite), the results are those of predicting item
    by item; a static system then costs one batched call per segment instead of fifty.
    """
    stream = scenario.stream
    n = len(stream)
    coins = policy.coins(scenario.seed_value, n)
    t0 = time.perf_counter()
    system.fit(scenario.seed_set)
    fit_s = time.perf_counter() - t0
    predict_s = correct_s = eval_s = 0.0
    corrections = 0

    def checkpoint(step: int, last: bool) -> Checkpoint:
        nonlocal eval_s
        t = time.perf_counter()
        acc = {name: accuracy(system, batch) for name, batch in scenario.eval_sets.items()}
        eval_s += time.perf_counter() - t
        return Checkpoint(step, corrections, acc, fit_s, predict_s, correct_s, eval_s,
                          system.footprint() if last else None, last)

    yield checkpoint(0, last=(n == 0))
    labels = stream.labels
    # A system declaring learns=False is not changed by corrections (the conformance
    # suite checks it), so its predictions never go stale.
    static = getattr(system, "learns", True) is False
    window = every
    for start in range(0, n, every):
        end = min(n, start + every)
        pos = start
        while pos < end:
            upto = min(end, pos + window) if lookahead else pos + 1
            t = time.perf_counter()
            predicted = system.predict(stream[pos:upto])
            predict_s += time.perf_counter() - t
            first = pos
            window *= 2  # no correction in this window: look further ahead next time
            for offset, guess in enumerate(predicted):
                i = first + offset
                pos = i + 1
                if guess != labels[i] and coins[i]:
                    t = time.perf_counter()
                    system.correct(stream[i])
                    correct_s += time.perf_counter() - t
                    corrections += 1
                    if not static:
                        window = 1  # errors come in runs: predict the next item alone
                        break  # the state changed: predictions after i are stale
        yield checkpoint(end, last=(end == n))


@dataclass
class RunResult:
    """Tidy rows of one (system, scenario, policy) run."""

    checkpoints: list[dict] = field(default_factory=list)  # reproducible columns only
    timings: list[dict] = field(default_factory=list)  # wall-clock columns, kept apart
    footprint: dict = field(default_factory=dict)


def run_to_rows(system, scenario: Scenario, policy: Policy, keys: dict, every: int = CHECKPOINT_EVERY,
                on_checkpoint: Callable[[Checkpoint], None] | None = None) -> RunResult:
    """Run and flatten checkpoints into rows that start with ``keys`` (dataset, encoder, ...)."""
    result = RunResult()
    for cp in run(system, scenario, policy, every):
        base = {**keys, "step": cp.step, "corrections": cp.corrections}
        result.checkpoints.append({**base, **{f"acc_{name}": acc for name, acc in cp.accuracy.items()}})
        result.timings.append({**base, "fit_seconds": cp.fit_seconds, "predict_seconds": cp.predict_seconds,
                               "correct_seconds": cp.correct_seconds, "eval_seconds": cp.eval_seconds})
        if cp.last and cp.footprint is not None:
            fp = cp.footprint
            result.footprint = {**keys, "footprint_entries": fp.entries, "footprint_params": fp.params,
                                "footprint_bytes": fp.bytes}
        if on_checkpoint:
            on_checkpoint(cp)
    return result


_BLAS_LIMIT = None  # keeps threadpoolctl's limit alive for the process


def configure_threads(torch_threads: int = 1, blas_threads: int | None = 1) -> None:
    """Pin the thread pools deliberately.

    Torch: the heads are tiny, and a torch pool fighting numpy's BLAS threads over two
    cores made per-correction steps several times slower. BLAS: single-query retrieval
    is a memory-bound matrix-vector product that a second thread only slows down, and a
    fixed thread count keeps floating-point summation order, hence results, the same on
    every machine. ``blas_threads=None`` leaves BLAS alone.
    """
    global _BLAS_LIMIT
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(torch_threads)
    if blas_threads is not None:
        _BLAS_LIMIT = threadpool_limits(limits=blas_threads, user_api="blas")
