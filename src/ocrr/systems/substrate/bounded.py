"""Bounded substrates: at most ``budget`` entries are searchable (paper 4.4, 5.1).

Every appended item -- the seed set first, then each correction, in order -- is offered
to an eviction policy; there is no training phase exempt from the budget:

* ``bounded_reservoir``: Vitter's Algorithm R over the sequence of all offered items.
  Item t (0-based) fills slot t while t < budget; afterwards it draws j uniform in
  [0, t] and, if j < budget, replaces the item in slot j. After n items the live set
  is a uniform random sample of size min(n, budget). One uniform double is drawn per
  offered item from a generator derived from the run seed, so the sample depends only
  on (seed, number of items offered) and never on how items were batched.
* ``bounded_fifo``: the newest ``budget`` items stay live.

A batch (the ~9000-item seed set, say) is decided in numpy before anything touches
the index: items that would enter and be replaced within the same batch are never
indexed, so fitting costs one add of the survivors, not an add/remove per item.

Evicted entries leave the retrieval index (``index.remove``), so they can never be
retrieved or vote again. They do NOT leave the ledger: it stays append-only and keeps
every entry ever appended, vectors included, so ``verify()`` still recomputes every
digest and detects tampering with evicted history too. Eviction itself is not written
into the chain: the live set is a deterministic function of (seed, budget, number of
entries), so ``verify()`` also replays the policy and checks that the index holds
exactly that live set, with vectors bit-equal to their ledger entries.

Any ``index=`` backend of the substrate works: eviction only calls ``index.remove`` and
``index.add``, and removal bumps ``index.epoch`` so cached incremental searches restart.

What the budget bounds: retrieval memory. ``footprint()`` reports the live entries
(and their bytes) as the storage the system needs; ``extra`` reports the ledger's
length and the number of evicted entries. This implementation still keeps evicted
vectors in memory inside the ledger. A real bounded deployment would keep only the
live vectors plus the 32-byte hashes of evicted entries (enough to check the chain
links up to them); the Ledger recomputes every digest from stored vectors, so
dropping them would need a pruned-entry notion in the Ledger itself and is not done.
"""

from __future__ import annotations

import numpy as np

from ocrr.batch import Batch
from ocrr.ledger.chain import VerifyResult
from ocrr.specs import Option
from ocrr.systems.base import Footprint
from ocrr.systems.buffers import fifo_keep, reservoir_slots
from ocrr.systems.seeds import derive_seed
from ocrr.systems.substrate.core import Substrate


class BoundedSubstrate(Substrate):
    """Substrate whose retrieval index holds at most ``budget`` entries; subclasses pick who stays."""

    eviction = "none"
    options = {"budget": Option(1000, int, low=1, help="entries searchable at most (the full ledger is kept)")}
    default_name = "bounded_none"  # each subclass: bounded_<its eviction>

    def hyperparameters(self) -> dict:
        return {"budget": self.budget, **super().hyperparameters()}  # the class names the eviction

    def anticipate(self, batch: Batch) -> None:
        """Nothing: once full, every correction evicts an entry, and the index drops what was
        anticipated whenever one leaves."""

    def fit(self, seed):
        self._reset_live()  # before super().fit, which offers the seed set to _index_new
        return super().fit(seed)

    # -- eviction ---------------------------------------------------------------------
    def _reset_live(self) -> None:
        raise NotImplementedError

    def _admit(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Offer ``ids`` (in order) to the policy; update the live set and return
        (batch positions of the newcomers that survive, live ids evicted)."""
        raise NotImplementedError

    def _index_new(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        index = self._fitted_index()
        keep, evicted = self._admit(np.asarray(ids, np.int64))
        if len(evicted):  # remove first, so the index never holds more than the budget
            index.remove(evicted)
        if len(keep):
            index.add(vecs[keep], ids[keep])

    def live_ids(self) -> np.ndarray:
        """Ids of the searchable entries, ascending."""
        raise NotImplementedError

    def _expected_live(self, n: int) -> np.ndarray:
        """The live set the policy gives after ``n`` offered items (replayed from scratch)."""
        raise NotImplementedError

    # -- audit and accounting -------------------------------------------------------------
    def verify(self, expected_head: bytes | None = None) -> VerifyResult:
        """Check the hash chain (all entries, evicted ones included), then that the index
        holds exactly the live set the policy yields on that history."""
        chain = super().verify(expected_head)
        if not chain.ok:
            return chain
        ledger, index = self._fitted()
        n = len(ledger)
        expected = self._expected_live(n)
        live = self.live_ids()
        if not np.array_equal(expected, live):
            bad = np.setxor1d(expected, live)
            return VerifyResult(
                False,
                int(bad[0]),
                f"live set differs from the {self.eviction} policy "
                f"replayed over {n} entries (first odd id {int(bad[0])})",
            )
        index_ids = np.asarray(index.ids)
        order = np.argsort(index_ids, kind="stable")
        if not np.array_equal(index_ids[order], live):
            return VerifyResult(False, None, "retrieval index does not hold exactly the live entries")
        if not self.index_kind.endswith("_sq8"):  # 8-bit codes cannot equal the float32 entries
            rows = np.asarray(index.vectors)[order]
            same = (rows == ledger.vectors[live]).all(axis=1)
            if not same.all():
                first = int(live[np.flatnonzero(~same)[0]])
                return VerifyResult(False, first, f"entry {first}: indexed vector differs from its ledger entry")
        return VerifyResult(
            True, None, f"{chain.reason}; {len(live)} live of {n} (budget {self.budget}, {self.eviction})"
        )

    def footprint(self) -> Footprint:
        fp = super().footprint()  # entries: the live (searchable) entries only
        ledger = self._fitted_ledger()
        live, evicted = fp.entries, len(ledger) - fp.entries
        per_entry = 4 * (ledger.dim or 0) + 8 + 32  # vector, label index, hash
        # Exact search: once anything is evicted the index owns a copy of the live vectors,
        # which is the bounded store itself -- count it once, by entries, not by capacity.
        nbytes = live * per_entry if self.index_kind == "exact" else fp.bytes
        return Footprint(
            entries=live,
            params=0,
            bytes=nbytes,
            extra={
                **fp.extra,
                "budget": self.budget,
                "eviction": self.eviction,
                "evicted_entries": evicted,
                # still held in memory by the full ledger (see module docstring)
                "history_bytes": evicted * per_entry,
            },
        )


class BoundedReservoir(BoundedSubstrate):
    """Vitter's Algorithm R: the live set is a uniform sample of everything appended so far."""

    eviction = "reservoir"
    default_name = "bounded_reservoir"
    _rng_key = "bounded_reservoir"  # not the spec: every budget of one seed shares the draws

    def _reset_live(self) -> None:
        self.slots_ = np.empty(0, np.int64)  # slot -> entry id
        self.offered_ = 0
        self.rng_ = np.random.default_rng(derive_seed(self.seed, self._rng_key))

    def _decide(self, n_before: int, draws: np.ndarray) -> np.ndarray:
        """Slot each offered item goes to, or -1 (Algorithm R); ``draws`` uniform in [0, 1)."""
        return reservoir_slots(n_before, draws, self.budget)

    def _admit(self, ids):
        slot = self._decide(self.offered_, self.rng_.random(len(ids)))
        self.offered_ += len(ids)
        chosen = np.flatnonzero(slot >= 0)[::-1]  # newest first: the last write to a slot wins
        slots, first = np.unique(slot[chosen], return_index=True)
        keep = np.sort(chosen[first])
        old = self.slots_
        evicted = old[slots[slots < len(old)]]
        grown = np.empty(min(self.offered_, self.budget), np.int64)
        grown[: len(old)] = old
        grown[slot[keep]] = ids[keep]
        self.slots_ = grown
        return keep, evicted

    def live_ids(self) -> np.ndarray:
        return np.sort(self.slots_)

    def _expected_live(self, n: int) -> np.ndarray:
        slot = self._decide(0, np.random.default_rng(derive_seed(self.seed, self._rng_key)).random(n))
        chosen = np.flatnonzero(slot >= 0)[::-1]
        _, first = np.unique(slot[chosen], return_index=True)
        return np.sort(chosen[first])  # entry ids are offer positions: the ledger is append-only


class BoundedFIFO(BoundedSubstrate):
    """First in, first out: the newest ``budget`` entries are live."""

    eviction = "fifo"
    default_name = "bounded_fifo"

    def _reset_live(self) -> None:
        self.live_ = np.empty(0, np.int64)  # ascending = arrival order

    def _admit(self, ids):
        keep, evicted, self.live_ = fifo_keep(self.live_, ids, self.budget)
        return keep, evicted

    def live_ids(self) -> np.ndarray:
        return self.live_.copy()

    def _expected_live(self, n: int) -> np.ndarray:
        return np.arange(max(0, n - self.budget), n, dtype=np.int64)
