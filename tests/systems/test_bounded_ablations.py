"""Defining properties of the bounded substrates (paper 4.4) and the vote ablations (5.6)."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.index import ExactIndex
from ocrr.systems import Batch, make_system
from ocrr.systems.seeds import derive_seed
from ocrr.systems.substrate.bounded import BoundedReservoir


def unit_vectors(n, dim=8, seed=0):
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def items(n, dim=8, seed=0, prefix="item"):
    """n distinct unit vectors, each with its own label, so retrieval of each is checkable."""
    texts, labels = [f"{prefix} {i}" for i in range(n)], [f"{prefix}_{i:04d}" for i in range(n)]
    return Batch(unit_vectors(n, dim, seed), texts, labels)


# -- reservoir: a uniform sample ------------------------------------------------------------
N_ITEMS, BUDGET, N_BUCKETS, N_RUNS = 1000, 100, 10, 400
# Chi-square with N_BUCKETS - 1 = 9 degrees of freedom, significance 0.001: a correct
# sampler fails this with probability <= 0.1 % (less: draws within one run are without
# replacement, so bucket counts vary less than the multinomial the statistic assumes).
CHI2_CRITICAL_9DF_0001 = 27.877
CHUNKS = [600, 1, 99, 300]  # a seed set larger than the budget, then corrections of mixed sizes


def chi_square(kept_ids_per_run) -> float:
    """Inclusion counts per position bucket (100 positions each) against the uniform expectation."""
    counts = np.zeros(N_BUCKETS)
    for kept in kept_ids_per_run:
        counts += np.bincount(np.asarray(kept) // (N_ITEMS // N_BUCKETS), minlength=N_BUCKETS)
    expected = len(kept_ids_per_run) * BUDGET / N_BUCKETS
    return float(((counts - expected) ** 2 / expected).sum())


def reservoir_sample(seed: int) -> np.ndarray:
    """The live ids BoundedReservoir's eviction policy keeps (the code fit/correct run),
    fed in CHUNKS; the ledger's hashing is skipped so 400 runs take milliseconds."""
    system = BoundedReservoir(budget=BUDGET, seed=seed)
    system._reset_live()
    start = 0
    for size in CHUNKS:
        system._admit(np.arange(start, start + size, dtype=np.int64))
        start += size
    return system.live_ids()


def test_reservoir_keeps_a_uniform_sample():
    samples = [reservoir_sample(derive_seed(1234, f"run {r}")) for r in range(N_RUNS)]
    assert all(len(s) == BUDGET and len(set(s.tolist())) == BUDGET for s in samples)
    assert chi_square(samples) < CHI2_CRITICAL_9DF_0001


def test_the_uniformity_test_rejects_biased_samplers():
    rng = np.random.default_rng(derive_seed(1234, "biased"))
    keep_first = [np.arange(BUDGET)] * N_RUNS
    keep_last = [np.arange(N_ITEMS - BUDGET, N_ITEMS)] * N_RUNS

    def replay(slot_of_t):  # fill slots 0..BUDGET-1, then item t overwrites slot_of_t (-1: dropped)
        slots = np.arange(BUDGET)
        for t in np.flatnonzero(slot_of_t >= 0):
            slots[slot_of_t[t]] = BUDGET + t
        return slots

    late = np.arange(BUDGET, N_ITEMS)
    # a classic bug: every new item overwrites a random slot (recency-biased)
    naive = [replay(rng.integers(BUDGET, size=len(late))) for _ in range(N_RUNS)]
    # off by BUDGET: replaces with probability BUDGET / (t + 1 + BUDGET), too few late items
    j = [np.floor(rng.random(len(late)) * (late + 1 + BUDGET)).astype(int) for _ in range(N_RUNS)]
    off = [replay(np.where(jj < BUDGET, jj, -1)) for jj in j]

    for biased in (keep_first, keep_last, naive, off):
        assert chi_square(biased) > CHI2_CRITICAL_9DF_0001


def test_reservoir_is_algorithm_r_over_seed_then_corrections():
    """End to end through fit/correct: the live set equals a plain Algorithm R reference
    fed the same uniform draws, whatever the batching."""
    data = items(300, seed=1)
    system = make_system("bounded_reservoir:budget=40", seed=5).fit(data[:120])
    for lo, hi in [(120, 121), (121, 180), (180, 181), (181, 300)]:
        system.correct(data[lo:hi])
    draws = np.random.default_rng(derive_seed(5, "bounded_reservoir")).random(300)
    slots = []
    for t in range(300):
        if t < 40:
            slots.append(t)
        else:
            j = int(np.floor(draws[t] * (t + 1)))
            if j < 40:
                slots[j] = t
    assert system.live_ids().tolist() == sorted(slots)
    one_by_one = make_system("bounded_reservoir:budget=40", seed=5).fit(data[:1])
    for i in range(1, 300):
        one_by_one.correct(data[i : i + 1])
    assert one_by_one.live_ids().tolist() == sorted(slots)
    other_seed = make_system("bounded_reservoir:budget=40", seed=6).fit(data)
    assert other_seed.live_ids().tolist() != sorted(slots)


# -- FIFO: the newest N ---------------------------------------------------------------------
def test_fifo_keeps_exactly_the_last_n_ids_and_labels():
    data = items(60, seed=2)
    system = make_system("bounded_fifo:budget=7:k=1").fit(data[:10])
    seen = 10
    for size in (1, 3, 12, 1, 20, 13):
        system.correct(data[seen : seen + size])
        seen += size
        live = system.live_ids()
        assert live.tolist() == list(range(seen - 7, seen))
        assert [system.ledger_[i].label for i in live] == list(data.labels[seen - 7 : seen])
        # through predict: each live item is its own nearest neighbour; evicted ones are gone
        predicted = system.predict(data[:seen])
        assert predicted[seen - 7 :] == list(data.labels[seen - 7 : seen])
        assert not set(predicted[: seen - 7]) & set(data.labels[: seen - 7])


@pytest.mark.parametrize(
    "spec", ["bounded_fifo:budget=5", "bounded_reservoir:budget=5", "bounded_reservoir_100", "bounded_fifo_100"]
)
def test_live_entries_never_exceed_the_budget(spec, monkeypatch):
    budget = make_system(spec).budget
    sizes = []
    real_add, real_remove = ExactIndex.add, ExactIndex.remove

    def add(self, vecs, ids):
        real_add(self, vecs, ids)
        sizes.append(len(self))

    def remove(self, ids):
        real_remove(self, ids)
        sizes.append(len(self))

    monkeypatch.setattr(ExactIndex, "add", add)
    monkeypatch.setattr(ExactIndex, "remove", remove)
    data = items(3 * budget + 17, seed=3)
    system = make_system(spec, seed=1).fit(data[: 2 * budget])  # the seed set alone overflows
    for lo in range(2 * budget, len(data), 7):
        system.correct(data[lo : lo + 7])
        assert len(system.index_) <= budget
    assert sizes and max(sizes) == budget
    fp = system.footprint()
    assert fp.entries == budget and fp.extra["evicted_entries"] == len(data) - budget
    assert fp.extra["ledger_entries"] == len(data)
    assert fp.bytes == budget * (4 * 8 + 8 + 32)


def test_budget_must_be_a_positive_integer():
    from ocrr.errors import OcrrError

    for bad in ("0", "-3", "1.5", "lots"):
        with pytest.raises(OcrrError, match="bounded_fifo: budget must be an integer ≥ 1, got "):
            make_system(f"bounded_fifo:budget={bad}")


# -- evicted entries: gone from retrieval, kept in the audit trail ------------------------------
@pytest.mark.parametrize("spec", ["bounded_fifo:budget=10:k=1", "bounded_reservoir:budget=10:k=1"])
def test_evicted_entries_are_not_retrievable_but_the_ledger_still_verifies(spec):
    data = items(80, seed=4)
    system = make_system(spec, seed=2).fit(data[:30])
    for i in range(30, 80):
        system.correct(data[i : i + 1])
    live = set(system.live_ids().tolist())
    evicted = sorted(set(range(80)) - live)
    assert len(live) == 10 and len(evicted) == 70
    predicted = system.predict(data)
    for i in range(80):  # k=1: an item is predicted as itself iff it is still searchable
        assert (predicted[i] == data.labels[i]) == (i in live)
    assert len(system.ledger_) == 80 and system.ledger_[evicted[0]].label == data.labels[evicted[0]]
    head = system.ledger_.head
    assert system.verify(expected_head=head).ok

    # tampering with an evicted entry (label, then vector) is still detected, at that entry
    victim = evicted[len(evicted) // 2]
    labels = system.ledger_._labels
    original = labels[victim]
    labels[victim] = "forged"
    result = system.verify()
    assert not result.ok and result.first_bad == victim
    labels[victim] = original
    system.ledger_._buf[victim, 0] += 0.25
    assert system.verify().first_bad == victim
    system.ledger_._buf[victim, 0] -= 0.25
    assert system.verify(expected_head=head).ok

    # so is smuggling an evicted entry back into retrieval, or dropping a live one
    system.index_.add(data.vecs[victim : victim + 1], np.array([victim]))
    assert not system.verify().ok
    system.index_.remove(np.array([victim]))
    assert system.verify().ok
    system.index_.remove(np.array([min(live)]))
    assert not system.verify().ok


# -- vote ablations, through predict on hand-built neighbours ---------------------------------------
DIM = 16
QUERY = np.eye(DIM, dtype=np.float32)[:1]
VARIANTS = ["substrate", "substrate_k1", "substrate_sumsim", "substrate_count_only", "substrate_no_recency"]


def at(sim: float, axis: int) -> np.ndarray:
    """A unit vector whose cosine with QUERY is exactly ``sim`` (float32), orthogonal to the others."""
    v = np.zeros(DIM, np.float32)
    v[0], v[axis] = sim, np.sqrt(1.0 - sim * sim)
    return v


def predict_with(variant: str, seeded, corrected=()):
    """A tiny substrate of the given (label, sim) entries, seed first then corrections, in order."""
    entries = list(seeded) + list(corrected)
    vecs = np.stack([at(s, 1 + i) for i, (_, s) in enumerate(entries)])
    labels = [label for label, _ in entries]
    system = make_system(variant).fit(Batch(vecs[: len(seeded)], None, labels[: len(seeded)]))
    if corrected:
        system.correct(Batch(vecs[len(seeded) :], None, labels[len(seeded) :]))
    return system.predict(Batch(QUERY))[0]


CASES = {
    # 1 strong match vs 4 mediocre: the band keeps only the strong one; summing lets 4 x 0.7 win
    "sumsim: one strong vs four mediocre": (
        [("alpha", 0.90), ("beta", 0.70), ("beta", 0.69), ("beta", 0.68), ("beta", 0.67)],
        (),
        {
            "substrate": "alpha",
            "substrate_k1": "alpha",
            "substrate_sumsim": "beta",
            "substrate_count_only": "alpha",
            "substrate_no_recency": "alpha",
        },
    ),
    # the single nearest neighbour against a 2-1 majority inside the band
    "k1: nearest neighbour vs majority": (
        [("beta", 0.90), ("alpha", 0.89), ("alpha", 0.88), ("gamma", 0.10), ("gamma", 0.05)],
        (),
        {
            "substrate": "alpha",
            "substrate_k1": "beta",
            "substrate_sumsim": "alpha",
            "substrate_count_only": "alpha",
            "substrate_no_recency": "alpha",
        },
    ),
    # 2-2 count in the band: max-sim gives beta; without it the tie falls to the label sorting first
    "count_only: count tie decided by max-sim": (
        [("beta", 0.90), ("alpha", 0.89), ("alpha", 0.88), ("beta", 0.86), ("gamma", 0.10)],
        (),
        {
            "substrate": "beta",
            "substrate_k1": "beta",
            "substrate_sumsim": "alpha",  # 1.77 vs 1.76
            "substrate_count_only": "alpha",
            "substrate_no_recency": "beta",
        },
    ),
    # 1-1 count and identical max-sim: the more recent entry (a later correction) decides
    "no_recency: identical max-sim decided by recency": (
        [("gamma", 0.10), ("gamma", 0.09), ("gamma", 0.08), ("alpha", 0.90)],
        [("beta", 0.90)],
        {
            "substrate": "beta",
            "substrate_k1": "beta",
            "substrate_sumsim": "beta",
            "substrate_count_only": "alpha",
            "substrate_no_recency": "alpha",
        },
    ),
    # the same tie with the ages swapped: recency, not sort order, decided above
    "recency mirrored": (
        [("gamma", 0.10), ("gamma", 0.09), ("gamma", 0.08), ("beta", 0.90)],
        [("alpha", 0.90)],
        {
            "substrate": "alpha",
            "substrate_k1": "alpha",
            "substrate_sumsim": "alpha",
            "substrate_count_only": "alpha",
            "substrate_no_recency": "alpha",
        },
    ),
    # a clear majority holding the top hit: no variant's rule matters
    "agreement: clear majority": (
        [("beta", 0.95), ("beta", 0.94), ("beta", 0.93), ("alpha", 0.50), ("alpha", 0.40)],
        (),
        {v: "beta" for v in VARIANTS},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_vote_ablations_differ_exactly_where_their_rule_differs(case):
    seeded, corrected, expected = CASES[case]
    got = {v: predict_with(v, seeded, corrected) for v in VARIANTS}
    assert got == expected


def test_each_ablation_has_a_case_that_separates_it_from_the_full_rule():
    for variant in VARIANTS[1:]:
        assert any(exp[variant] != exp["substrate"] for _, _, exp in CASES.values()), variant


def test_ablation_hyperparameters():
    def rule(name):
        return make_system(name).rule_

    assert rule("substrate_k1").k == 1
    assert rule("substrate_sumsim").margin is None and rule("substrate_sumsim").weighting == "sumsim"
    count_only = rule("substrate_count_only")
    assert not count_only.tiebreak_maxsim and not count_only.tiebreak_recency and count_only.margin == 0.05
    no_recency = rule("substrate_no_recency")
    assert no_recency.tiebreak_maxsim and not no_recency.tiebreak_recency
    assert make_system("bounded_reservoir_500:k=1").rule_.k == 1  # ablations compose with budgets


# -- `ocrr systems` ---------------------------------------------------------------------------
def test_systems_command_groups_aliases_and_survives_unbuildable_entries(capsys, monkeypatch):
    from ocrr.cli.main import main
    from ocrr.systems import REGISTRY
    from ocrr.systems.registry import Registered

    def needs_extra(**kwargs):
        raise ImportError("No module named 'peft'")

    monkeypatch.setitem(REGISTRY, "needs_peft", Registered("needs_peft", needs_extra, "parametric", "needs peft"))
    assert main(["systems", "--all"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    for name in (
        "substrate",
        "bounded_reservoir",
        "bounded_fifo",
        "substrate_k1",
        "substrate_sumsim",
        "substrate_count_only",
        "substrate_no_recency",
        "needs_peft",
    ):
        assert name in rows
    assert not any(r.startswith("bounded_reservoir_") or r.startswith("bounded_fifo_") for r in rows)
    assert "bounded_reservoir_100," in out and "bounded_reservoir:budget=N)" in out  # aliases on the base row
    assert "budget=1000" in out and "rest as substrate" in out
    assert "unavailable here: ImportError" in out and "peft" in out
