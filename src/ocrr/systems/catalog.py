"""The built-in systems and their one-line descriptions (what `ocrr systems` lists).

Each entry names its factory by import path ("module:Class" under ocrr.systems), loaded
when the system is first built: listing or building the substrate never imports torch.
``ocrr.systems`` imports this module, which registers each one with the registry's one
``register`` (ocrr.systems.registry); this module imports no system.
"""

from __future__ import annotations

from collections.abc import Mapping

from ocrr.systems.registry import register

BUDGETS = (100, 500, 1000, 5000)  # the paper's storage sweep (Appendix B): one alias per budget

register(
    "substrate",
    "substrate.core:Substrate",
    "retrieval",
    "hash-chained append-only ledger, k=5 cosine neighbours, margin-band (0.05) majority vote",
)
register(
    "static_knn", "substrate.static:StaticKNN", "strawman", "the substrate's vote over the seed set only; never updated"
)
register("static_linear", "heads.linear:StaticLinear", "strawman", "softmax head over the known classes, trained once")
register(
    "online_linear",
    "heads.linear:OnlineLinear",
    "strawman",
    "softmax head over all classes, one SGD step (lr 0.05) per correction",
)

# -- bounded substrates (paper 4.4) and vote-rule ablations (paper 5.6) ------------------

register(
    "bounded_reservoir",
    "substrate.bounded:BoundedReservoir",
    "retrieval",
    "substrate searching at most `budget` entries, a uniform sample (Vitter's Algorithm R) of seed "
    "+ corrections; the full ledger is kept for audit",
    in_all=False,
)
register(
    "bounded_fifo",
    "substrate.bounded:BoundedFIFO",
    "retrieval",
    "substrate searching only the newest `budget` entries (seed included); the full ledger is kept for audit",
    in_all=False,
)
for _factory, _base in (
    ("substrate.bounded:BoundedReservoir", "bounded_reservoir"),
    ("substrate.bounded:BoundedFIFO", "bounded_fifo"),
):
    for _n in BUDGETS:  # the paper's names: an alias per budget of the storage sweep
        register(f"{_base}_{_n}", _factory, "retrieval", f"{_base} with budget={_n}", budget=_n)
register(
    "substrate_k1",
    "substrate.core:Substrate",
    "ablation",
    "substrate with k=1: the nearest entry's label, no vote",
    k=1,
)
register(
    "substrate_sumsim",
    "substrate.core:Substrate",
    "ablation",
    "substrate voting by summed similarity over all k neighbours (no margin band)",
    margin=None,
    weighting="sumsim",
)
register(
    "substrate_count_only",
    "substrate.core:Substrate",
    "ablation",
    "substrate's band count only; ties go to the label that sorts first (no max-sim, no recency)",
    tiebreak_maxsim=False,
    tiebreak_recency=False,
)
register(
    "substrate_no_recency",
    "substrate.core:Substrate",
    "ablation",
    "substrate without the recency tie-break (max-sim ties go to the label that sorts first)",
    tiebreak_recency=False,
)

# -- noisy feedback: not in `--systems all` (the paper's systems) -------------

register(
    "robust_substrate",
    "substrate.robust:RobustSubstrate",
    "retrieval",
    "substrate whose corrections vote half until an entry of the same label is among their 5 nearest "
    "(the band anchored at the best corroborated neighbour)",
    in_all=False,
)

# -- continual learning, retrieval/parametric hybrid, online-ML library (paper 4.2) ------

register(
    "ewc",
    "heads.continual:EWC",
    "continual",
    "online_linear + Fisher-weighted L2 penalty to the seed head (lambda 1000, Fisher on 2000 seed items)",
)
register(
    "a_gem",
    "heads.continual:AGEM",
    "continual",
    "online_linear + 1000-item seed reservoir; each step projected off the memory-batch (64) gradient",
)
register(
    "lwf",
    "heads.continual:LwF",
    "continual",
    "online_linear + distillation to a frozen seed-head teacher (KL at T=2, lambda 1)",
)
register(
    "knn_lm",
    "hybrid.knn_lm:KNNLM",
    "hybrid",
    "frozen seed head interpolated (0.5) with a growing cosine k-NN datastore (k=5, softmax at tau 0.1)",
)
register(
    "river_logreg",
    "river.classifiers:RiverLogReg",
    "online-ml",
    "river one-vs-rest LogisticRegression, SGD 0.01, one pass over 3000 seed items (paper config)",
)
register(
    "river_softmax",
    "river.classifiers:RiverSoftmax",
    "online-ml",
    "river SoftmaxRegression, SGD 0.01, one pass over 3000 seed items (fair river baseline)",
)
register(
    "river_ovr_balanced",
    "river.classifiers:RiverOvRBalanced",
    "online-ml",
    "river_logreg whose new-class models first replay the 3000 stored seed items as negatives",
)

# -- LoRA fine-tuning of a transformer encoder (paper 4.5, 5.5); needs the extra ocrr[lora] --

register(
    "lora",
    "heads.lora:LoRA",
    "fine-tuning",
    "reads text: packaged MiniLM (mean-pooled) + LoRA r=8/alpha 16 on query+value of every block + head "
    "over all classes; seed: 2 epochs AdamW 1e-3, batch 32; one SGD step (lr 5e-4) per correction",
    in_all=False,
)
register(
    "lora_deberta",
    "heads.lora:LoRA",
    "fine-tuning",
    "the paper's lora: microsoft/deberta-v3-large ([CLS] pooling, query_proj+value_proj); needs the model "
    "from the Hugging Face hub or its cache, and realistically a GPU (lora_deberta:device=cuda)",
    model="microsoft/deberta-v3-large",
    pooling="cls",
    in_all=False,
)


# -- continual model refinement (CMR, Lin et al. 2022): a head refined on each episode's errors --
# Not in `--systems all` (the OCRR paper's systems): the cmr protocol and its sweep preset name them.

for _name, _factory, _summary in (
    ("cmr_frozen", "heads.refine:FrozenUpstream", "FrozenUpstream: the upstream softmax head, never refined"),
    (
        "cft",
        "heads.refine:RefiningHead",
        "continual fine-tuning of the upstream head on the revealed errors: 5 epochs of AdamW "
        "(lr 1e-2, batch 16, clip 1.0) per correct() call",
    ),
    ("online_l2", "heads.refine:OnlineL2Reg", "cft + lambda (0.01) * ||theta - theta_{t-1}||^2"),
    (
        "online_ewc",
        "heads.refine:OnlineEWC",
        "cft + online EWC (Schwarz et al. 2018): running Fisher of the errors (gamma 0.9), lambda 1",
    ),
    (
        "er",
        "replay.cmr:ExperienceReplay",
        "cft + bi-memory experience replay: 32 items, half upstream, half past errors, every "
        "call, mixed with the errors",
    ),
    (
        "mir",
        "replay.cmr:MIRReplay",
        "er choosing, of 256 candidates per memory, the items a virtual cft update hurts most",
    ),
    (
        "max_loss",
        "replay.cmr:MaxLossReplay",
        "er choosing, of 256 candidates per memory, the items with the largest loss after a virtual cft update",
    ),
    ("mir_l2", "replay.cmr:MIRWithL2", "mir trained with the online_l2 penalty (lambda 0.01)"),
    (
        "offline_refining",
        "replay.cmr:OfflineRefining",
        "upper reference: f_0 retrained after each call on every error so far "
        "plus as many upstream items (slow under the held-out protocol)",
    ),
):
    register(_name, _factory, "cmr refinement", _summary, in_all=False)


# -- online continual learning as EvalOCL measures it (Hammoud et al. 2023); the ocl protocol --
# Not in `--systems all`: the ocl protocol's README section names them.

register(
    "blind",
    "blind:BlindClassifier",
    "strawman",
    "never reads the input: the mode of the last k (1) revealed labels, the newest label winning ties",
    in_all=False,
)

_defaults: Mapping[str, object]  # (the loops below bake in values of several types)
for _name, _summary, _defaults in (
    (
        "er_uniform",
        "ER (replay only): store everything; per incoming batch `budget` (1) AdamW (lr 1e-2) updates on 16 items "
        "drawn uniformly from the store; linear head (head=mlp: two layers)",
        {},
    ),
    ("er_fifo", "er_uniform drawing the 16 newest items", {"sampler": "fifo"}),
    ("er_mixed", "er_uniform drawing half the newest items, half uniformly", {"sampler": "mixed"}),
    ("fc_only", "FC-only: er_uniform with the linear head only (over frozen embeddings, er_uniform itself)", {}),
    ("overadapt", "OverAdapt: FC-only with FIFO sampling (er_fifo with the linear head)", {"sampler": "fifo"}),
    (
        "cosine_fc",
        "CosineFC: er_uniform whose output layer is sigma * cos(x, w_c), sigma learned, no bias",
        {"cosine": True},
    ),
):
    register(_name, "replay.ocl:OclReplay", "online continual learning", _summary, in_all=False, **_defaults)
register(
    "acm",
    "replay.ocl:NearestNeighbour",
    "online continual learning",
    "ACM: 1-nearest-neighbour (cosine) over every item given so far",
    in_all=False,
)

# -- beyond the substrate: episodic ledger + a head consolidated from it ------------

register(
    "consolidating",
    "hybrid.consolidating:ConsolidatingMemory",
    "hybrid",
    "substrate ledger + vote for instant fixes; a softmax head re-fitted from the ledger every 10 corrections "
    "(50 AdamW steps, half corrections); vote where an unconsolidated entry is in the band, else the mixture "
    "0.5 head + 0.5 vote",
    in_all=False,
)

register(
    "mbpa",
    "hybrid.mbpa:MbPAPlusPlus",
    "hybrid",
    "MbPA++ on embeddings: memory of seed + every correction, one SGD step (lr 0.05) per correction plus "
    "replay of 32 memories every 10, local adaptation on the 32 nearest memories (30 steps, lr 0.5, "
    "lambda 1e-3) per query",
    in_all=False,
)
for _name, _summary, _defaults in (  # ablations: which part carries the gain (vote only: the substrate)
    (
        "consolidating_head",
        "consolidating answering with the head alone (no vote, no instant fix)",
        {"combine": "head"},
    ),
    (
        "consolidating_fresh",
        "consolidating: the vote where an unconsolidated entry is in its band, else the head alone (no mixture)",
        {"combine": "fresh"},
    ),
    ("consolidating_r50", "consolidating re-fitting every 50 corrections instead of 10", {"refit_every": 50}),
    (
        "consolidating_bg",
        "consolidating with each re-fit off the correction path (a background thread; the "
        "same heads, each answering one interval later)",
        {"background": True},
    ),
):
    register(_name, "hybrid.consolidating:ConsolidatingMemory", "ablation", _summary, in_all=False, **_defaults)

register(
    "llm_icl",
    "llm.icl:LLMICL",
    "llm",
    "substrate ledger; the k=4 nearest corrections as examples in a prompt, the packaged SmolLM2-135M-Instruct "
    "scoring each retrieved label by log-likelihood (prior + contextual calibration); needs the extra ocrr[llm]",
    in_all=False,
)
