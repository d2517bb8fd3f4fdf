"""An open label space: label names <-> indices, growing when a new label appears."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.columns import LabelColumn


class LabelSpace:
    """Indices in first-seen order (stable as the space grows); ``ranks`` gives sorted order."""

    def __init__(self, labels: Iterable[str] = ()):
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self.ranks = np.empty(0, np.int64)
        self._rank_to_index = np.empty(0, np.int64)
        self.add(labels)

    @classmethod
    def over(cls, declared: Iterable[str] | None, seen: Iterable[str]) -> LabelSpace:
        """Every label a head is told about up front plus those of its fit data, sorted
        (so a head's rows do not depend on the order the data lists them in)."""
        return cls(sorted(set(declared or ()) | set(seen)))

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, label: str) -> bool:
        return label in self._index

    def add(self, labels: Iterable[str]) -> bool:
        """Add unseen labels; return True when the space grew."""
        grew = False
        for label in labels:
            if label not in self._index:
                if not isinstance(label, str) or not label:
                    raise OcrrError(
                        f"labels must be non-empty strings; got {label!r}. Fix the label column of your data."
                    )
                self._index[label] = len(self.names)
                self.names.append(label)
                grew = True
        if grew:
            order = np.argsort(np.array(self.names, dtype=object), kind="stable")
            self._rank_to_index = order.astype(np.int64)
            self.ranks = np.empty(len(order), np.int64)
            self.ranks[order] = np.arange(len(order))
        return grew

    def encode(self, labels: Sequence[str], grow: bool = False) -> np.ndarray:
        if isinstance(labels, LabelColumn):  # a ledger's column: one step per distinct label
            seen, place = labels.first_seen()
            return self.encode(seen, grow)[place] if len(seen) else np.zeros(len(place), np.int64)
        if grow:
            self.add(labels)
        try:
            return np.fromiter((self._index[label] for label in labels), np.int64, count=len(labels))
        except KeyError as err:
            raise OcrrError(
                f"unknown label {err.args[0]!r}: this system has not seen it. Correct the system with this label first."
            ) from None

    def encode_one(self, label: str) -> int:
        """Index of one label, adding it if unseen (the one-correction path of encode)."""
        index = self._index.get(label)
        if index is None:
            self.add((label,))
            index = self._index[label]
        return index

    def decode(self, indices: np.ndarray) -> list[str | None]:
        return [self.names[i] if i >= 0 else None for i in indices.tolist()]

    def decode_ranks(self, ranks: np.ndarray) -> list[str | None]:
        return [self.decode_rank(r) for r in ranks.tolist()]

    def decode_rank(self, rank: int) -> str | None:
        """The label of one rank (None for -1: no neighbour to vote)."""
        return self.names[self._rank_to_index[rank]] if rank >= 0 else None
