"""Incremental search for repeated query sets over a growing index.

Evaluation asks the same 800 queries after every 50 stream items, while the substrate
has only appended a few entries. Re-scanning all entries each time is wasted work:
this cache keeps each large query set's top-k and, after appends, scans only the new
rows and merges. The merge gives exactly the top-k of a full scan because neighbours
are totally ordered (similarity desc, then id desc). Removals invalidate the cache.
Indexes that cannot search from a row offset (``supports_start`` False: HNSW, sq8, and
``auto`` after its switch) are passed through uncached.

A set is kept from the second time it is asked for: evaluation sets come back at every
checkpoint, while a stream's episodes (CMR: 64 items each) are asked for once. Kept on
first sight, those episodes pushed the evaluation sets out of the ``max_sets`` slots, and
every checkpoint then re-scanned them whole.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ocrr.index.exact import top_k


@dataclass
class _Entry:
    epoch: int
    n_rows: int
    sims: np.ndarray
    ids: np.ndarray


class IncrementalSearch:
    def __init__(self, index: Any, min_queries: int = 64, max_sets: int = 4, max_seen: int = 256):
        self.index = index
        self.min_queries = min_queries  # single stream queries are not worth caching
        self.max_sets = max_sets
        self.max_seen = max_seen
        self._sets: OrderedDict[bytes, _Entry] = OrderedDict()
        self._seen_once: OrderedDict[bytes, None] = OrderedDict()  # digests of sets asked for once

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if len(queries) < self.min_queries or not getattr(self.index, "supports_start", True):
            return self.index.search(queries, k)
        key = hashlib.blake2b(queries.tobytes(), digest_size=16, person=int(k).to_bytes(16, "little")).digest()
        hit = self._sets.get(key)
        n_rows = len(self.index)
        if hit is not None and hit.epoch == self.index.epoch and hit.n_rows <= n_rows:
            if hit.n_rows < n_rows:
                new_sims, new_ids = self.index.search(queries, k, start=hit.n_rows)
                hit.sims, hit.ids = top_k(
                    np.concatenate([hit.sims, new_sims], axis=1), np.concatenate([hit.ids, new_ids], axis=1), k
                )
                hit.n_rows = n_rows
            self._sets.move_to_end(key)
        elif key not in self._seen_once:  # first sight: remember the digest only
            self._seen_once[key] = None
            while len(self._seen_once) > self.max_seen:
                self._seen_once.popitem(last=False)
            return self.index.search(queries, k)
        else:
            del self._seen_once[key]
            sims, ids = self.index.search(queries, k)
            hit = self._sets[key] = _Entry(self.index.epoch, n_rows, sims, ids)
            while len(self._sets) > self.max_sets:
                self._sets.popitem(last=False)
        return hit.sims, hit.ids
