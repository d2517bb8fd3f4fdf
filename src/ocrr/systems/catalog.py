"""The built-in systems and their one-line descriptions (what `ocrr systems` lists)."""

from ocrr.systems.knn import StaticKNN
from ocrr.systems.linear import OnlineLinear, StaticLinear
from ocrr.systems.registry import register
from ocrr.systems.substrate import Substrate

register("substrate", Substrate, "retrieval",
         "hash-chained append-only ledger, k=5 cosine neighbours, margin-band (0.05) majority vote")
register("static_knn", StaticKNN, "strawman", "the substrate's vote over the seed set only; never updated")
register("static_linear", StaticLinear, "strawman", "softmax head over the known classes, trained once")
register("online_linear", OnlineLinear, "strawman",
         "softmax head over all classes, one SGD step (lr 0.05) per correction")

# -- bounded substrates (paper 4.4) and vote-rule ablations (paper 5.6) ------------------
from ocrr.systems.bounded import BUDGETS, BoundedFIFO, BoundedReservoir  # noqa: E402

register("bounded_reservoir", BoundedReservoir, "retrieval",
         "substrate searching at most `budget` entries, a uniform sample (Vitter's Algorithm R) of seed "
         "+ corrections; the full ledger is kept for audit")
register("bounded_fifo", BoundedFIFO, "retrieval",
         "substrate searching only the newest `budget` entries (seed included); the full ledger is kept for audit")
for _factory, _base in ((BoundedReservoir, "bounded_reservoir"), (BoundedFIFO, "bounded_fifo")):
    for _n in BUDGETS:  # the paper's names: an alias per budget of the storage sweep
        register(f"{_base}_{_n}", _factory, "retrieval", f"{_base} with budget={_n}", budget=_n)
register("substrate_k1", Substrate, "ablation", "substrate with k=1: the nearest entry's label, no vote", k=1)
register("substrate_sumsim", Substrate, "ablation",
         "substrate voting by summed similarity over all k neighbours (no margin band)",
         margin=None, weighting="sumsim")
register("substrate_count_only", Substrate, "ablation",
         "substrate's band count only; ties go to the label that sorts first (no max-sim, no recency)",
         tiebreak_maxsim=False, tiebreak_recency=False)
register("substrate_no_recency", Substrate, "ablation",
         "substrate without the recency tie-break (max-sim ties go to the label that sorts first)",
         tiebreak_recency=False)
