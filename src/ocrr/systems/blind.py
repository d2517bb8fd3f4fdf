"""The blind classifier of EvalOCL (Hammoud et al. 2023, Sec. 3.2): it never reads the input.

It predicts, for every item, the mode of the last k revealed labels (ties: the newest of the
tied labels wins; fewer than k labels at the start: the mode of those there are; none yet:
no prediction). Whatever accuracy it reaches comes from label correlation in the stream, so
its accuracy at a shift S says how much of a learner's accuracy at that shift the stream
gives away for free (``ocrr calibrate-shift`` chooses S from it).

``blind_modes`` is the same rule over a whole label sequence at once, for calibration.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from ocrr.batch import Batch
from ocrr.specs import Option
from ocrr.systems.base import Footprint, System, check_vectors, require_labels


def mode_newest_wins(window: Sequence[str]) -> str | None:
    """The most frequent label of ``window`` (oldest first); among tied labels, the newest."""
    if not window:
        return None
    counts: dict[str, int] = {}
    for label in window:
        counts[label] = counts.get(label, 0) + 1
    top = max(counts.values())
    return next(label for label in reversed(window) if counts[label] == top)


class BlindClassifier(System):
    """Mode of the last ``k`` revealed labels (seed labels first, in seed-set order, then every
    corrected item in order). Vectors are validated, never used."""

    family = "strawman"
    options = {"k": Option(1, int, low=1, help="revealed labels in the window")}
    default_name = "blind"
    window_: deque[str] | None = None  # until fit

    def _window(self) -> deque[str]:
        """``window_``, which ``fit`` has set."""
        assert self.window_ is not None, "fit() sets window_"
        return self.window_

    def fit(self, seed: Batch) -> BlindClassifier:
        labels = require_labels(seed, self.name)
        self.dim_ = check_vectors(seed.vecs, None, "seed vectors").shape[1]
        self.window_ = deque(labels, maxlen=self.k)
        return self

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        check_vectors(batch.vecs, self.dim_, "query vectors")  # refused like any system's; never read
        return [mode_newest_wins(list(self._window()))] * len(batch)

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        labels = require_labels(batch, self.name)
        check_vectors(batch.vecs, self.dim_, "vectors")
        self._window().extend(labels)

    def footprint(self) -> Footprint:
        self._require_fitted()
        window = self._window()
        return Footprint(entries=len(window), bytes=8 + sum(len(label) for label in window))


def blind_modes(codes: np.ndarray, k: int, starts: np.ndarray) -> np.ndarray:
    """The blind rule over a whole stream: for each start a, the mode of codes[a - k : a]
    (newest wins ties; -1 where a == 0). ``codes``: integer labels in stream order."""
    out = np.full(len(starts), -1, np.int64)
    for i, a in enumerate(starts):
        if a <= 0:
            continue
        window = codes[max(0, a - k) : a]
        counts = np.bincount(window)
        tied = counts[window] == counts.max()
        out[i] = window[np.flatnonzero(tied)[-1]]
    return out
