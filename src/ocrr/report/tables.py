"""Report tables: the paper's Table 1 per (dataset, policy) cell and the storage Pareto table.

Both are computed from the tidy per-checkpoint table alone (ocrr.protocols.summary), so a report
can always be rebuilt from files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ocrr.protocols import HeldoutProtocol
from ocrr.protocols.summary import (
    CELL_KEYS,
    FOOTPRINT_BYTES,
    FOOTPRINT_COLUMNS,
    FOOTPRINT_ENTRIES,
    FOOTPRINT_PARAMS,
    RUN_KEYS,
    fmt_acc,
)
from ocrr.specs import spec_name

# The paper's row order (Table 1, then the ablations); other systems follow alphabetically.
SYSTEM_ORDER = (
    ["substrate"]
    + [f"bounded_reservoir_{n}" for n in (5000, 1000, 500, 100)]
    + [f"bounded_fifo_{n}" for n in (5000, 1000, 500, 100)]
    + [
        "substrate_count_only",
        "substrate_no_recency",
        "substrate_k1",
        "substrate_sumsim",
        "knn_lm",
        "online_linear",
        "a_gem",
        "ewc",
        "lwf",
        "river_logreg",
        "river_softmax",
        "lora_deberta",
        "static_knn",
        "static_linear",
    ]
    # the CMR paper's Table 1 order
    + ["cmr_frozen", "cft", "online_l2", "online_ewc", "er", "max_loss", "mir", "mir_l2", "offline_refining"]
)
POLICY_ORDER = ["oracle", "random50", "random10"]


def _rank(spec: str) -> tuple:
    base = spec_name(spec)
    return (SYSTEM_ORDER.index(base) if base in SYSTEM_ORDER else len(SYSTEM_ORDER), base, spec)


def order_systems(systems) -> list[str]:
    return sorted(dict.fromkeys(systems), key=_rank)


@dataclass(frozen=True)
class Cell:
    dataset: str
    encoder: str
    policy: str
    protocol: str = "heldout"

    @property
    def title(self) -> str:
        # "dataset": the data carried its own vectors (synthetic), no encoder to name
        text = f"{self.dataset} · {self.policy}" + ("" if self.encoder == "dataset" else f" · {self.encoder}")
        return text if self.protocol == "heldout" else f"{self.protocol} · {text}"

    @property
    def slug(self) -> str:
        text = f"{self.dataset}-{self.policy}-{self.encoder}"
        text = text if self.protocol == "heldout" else f"{self.protocol}-{text}"
        return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text).strip("_")[:120]


def cells(per_checkpoint: pd.DataFrame) -> list[Cell]:
    keys = per_checkpoint[["dataset", "encoder", "policy", "protocol"]].drop_duplicates()
    out = [Cell(str(d), str(e), str(p), str(pr)) for d, e, p, pr in keys.itertuples(index=False)]
    policy_rank = lambda p: (POLICY_ORDER.index(p) if p in POLICY_ORDER else len(POLICY_ORDER), p)  # noqa: E731
    return sorted(out, key=lambda c: (c.protocol != "heldout", c.protocol, c.dataset, c.encoder, policy_rank(c.policy)))


def cell_rows(per_checkpoint: pd.DataFrame, cell: Cell) -> pd.DataFrame:
    df = per_checkpoint
    return df[
        (df["dataset"] == cell.dataset)
        & (df["encoder"] == cell.encoder)
        & (df["policy"] == cell.policy)
        & (df["protocol"] == cell.protocol)
    ]


def cell_summary(rows: pd.DataFrame, protocol=None) -> pd.DataFrame:
    """The protocol's summary of one cell (mean/std over seeds; the held-out protocol's is
    Table 1), systems in the paper's order."""
    protocol = protocol or HeldoutProtocol()
    footprints = rows.groupby(RUN_KEYS, sort=True)[FOOTPRINT_COLUMNS].max().reset_index()
    summary = protocol.summarise(rows, footprints)
    order = order_systems(summary["system"])
    return summary.set_index("system").loc[order].reset_index()[summary.columns]


def seeds_text(rows: pd.DataFrame) -> str:
    text = ", ".join(str(s) for s in sorted(rows["seed"].unique()))
    per_system = rows.groupby("system")["seed"].nunique()
    if per_system.nunique() > 1:  # e.g. two sweeps merged: say so rather than imply n everywhere
        text += f" (systems ran {per_system.min()} to {per_system.max()} of them; no ± means one seed)"
    return text


def fmt_bytes(n: float) -> str:
    if not n:
        return "–"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def pareto_flags(storage: list[float], score: list[float]) -> list[bool]:
    """True where no other point has no more storage and a higher score (ties: first kept)."""
    order = sorted(range(len(storage)), key=lambda i: (storage[i], -score[i] if not math.isnan(score[i]) else 1))
    flags, best = [False] * len(storage), -math.inf
    for i in order:
        if not math.isnan(score[i]) and score[i] > best:
            flags[i], best = True, score[i]
    return flags


def storage_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Systems by memory footprint (bytes at the end of the stream), with the Pareto frontier
    of memory vs final novel accuracy (paper 4.4 / Figure 1)."""
    df = summary[summary[FOOTPRINT_BYTES].fillna(0) > 0].copy()
    df = df.sort_values([FOOTPRINT_BYTES, "final_novel_mean"], ascending=[True, False], kind="mergesort")
    df["pareto_novel"] = pareto_flags(df[FOOTPRINT_BYTES].tolist(), df["final_novel_mean"].tolist())
    df["pareto_original"] = pareto_flags(df[FOOTPRINT_BYTES].tolist(), df["final_original_mean"].tolist())
    cols = CELL_KEYS + ["n_seeds"] + FOOTPRINT_COLUMNS
    cols += [
        "final_novel_mean",
        "final_novel_std",
        "final_original_mean",
        "final_original_std",
        "pareto_novel",
        "pareto_original",
    ]
    return df[cols].reset_index(drop=True)


STORAGE_HEADER = [
    "system",
    "entries",
    "params",
    "memory",
    "final novel",
    "final original",
    "Pareto (novel)",
    "Pareto (original)",
]


def storage_rows(storage: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in storage.iterrows():
        n = int(r["n_seeds"])
        rows.append(
            [
                r["system"],
                f"{int(r[FOOTPRINT_ENTRIES]):,}" if r[FOOTPRINT_ENTRIES] else "–",
                f"{int(r[FOOTPRINT_PARAMS]):,}" if r[FOOTPRINT_PARAMS] else "–",
                fmt_bytes(r[FOOTPRINT_BYTES]),
                fmt_acc(r["final_novel_mean"], r["final_novel_std"], n),
                fmt_acc(r["final_original_mean"], r["final_original_std"], n),
                "yes" if r["pareto_novel"] else "",
                "yes" if r["pareto_original"] else "",
            ]
        )
    return rows
