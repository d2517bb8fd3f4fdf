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
