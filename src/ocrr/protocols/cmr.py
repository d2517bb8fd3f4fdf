"""Continual model refinement (CMR, Lin et al. 2022) on intent classification over embeddings.

Clusters come from a label -> cluster map (``ocrr.protocols.clusters``). The upstream
clusters V0 (``upstream=a,b,...``; default a seeded half) give the seed set (their training
items) and the UKR set; the other clusters V1..VN are out of distribution (OOD).

The stream is Algorithm 1 of the paper, episode t = 1..T (``sample_stream``):
b_u = floor(b * alpha^(t-1)) items from V0, b_o = b - b_u, floor(b_o * gamma) from the major
cluster c_t, the rest from the union of the other OOD clusters. c_1 is uniform; before each
later episode, with probability 1 - beta, c_t is drawn uniformly among the *other* clusters.
Items are drawn without replacement within an episode from the full training pools (never
depleted), so an item can recur in a later episode. The stream depends only on the dataset,
the clusters, the options and (split, stream): never on the run seed, which is the systems'
own randomness (and the policy's). Test items never enter a stream. With ``streams=S`` a
run's stream is ``seed mod S`` instead of ``stream``, so ``--seeds 0 .. 3S-1`` runs S streams
with 3 seeds each in one cell, and the tables' mean ± std is over streams × seeds.

Evaluation, after episodes 0, eval_every, 2 * eval_every, ... and T, on f_t (after its update):

* ``acc_efr``: EFR(t) = Acc(f_t, E_t), E_t = the *revealed* errors of episode t, i.e. those
  the system was corrected with (oracle policy: every error of the episode). No revealed
  error: not measured (NaN, left out of the mean).
* ``acc_ukr``: a fixed sample (cap ukr_cap) of V0's test items.
* ``acc_kg``: H, a fixed sample (cap kg_cap per cluster) of the OOD clusters' test items.
* ``acc_okr``: OKR(t) = Acc(f_t, Q_<t), on a fixed-seed sample (cap okr_cap) of the stream
  positions of episodes 1..t-1 (an item that recurs in the stream can be drawn more than once).
* ``online_accuracy``: CSR, the accuracy of the stream predictions of episodes 1..t, each
  made by the state at its episode's start (the paper's 1 - |E_<t+1| / |Q_<t+1|).
* ``acc_stream``: after the last episode only, f_T on every stream item in hindsight. It is
  the CSR^(T) of an offline reference (OfflineRefining, which only exists after the stream),
  as in the paper's Table 1; for the online methods it is reported beside their CSR.

UKR and KG samples depend only on the dataset and the clusters, so every stream shares them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.clusters import item_clusters
from ocrr.protocols.scenario import Scenario, crc, every_n, rows_of
from ocrr.protocols.summary import CELL_KEYS, RUN_KEYS, add_footprints, add_online_accuracy
from ocrr.specs import spec_name

# Table 1 of the paper: (key, header) of the mean and the final columns
AVG = (("efr", "EFR̄"), ("ukr", "UKR̄"), ("okr", "OKR̄"), ("csr", "CSR̄"), ("kg", "KḠ"), ("oec", "OEC̄"))
FINAL = (("ukr", "UKR^(T)"), ("okr", "OKR^(T)"), ("csr", "CSR^(T)"), ("kg", "KG^(T)"), ("oec", "OEC^(T)"))
SOURCE = {"efr": "acc_efr", "ukr": "acc_ukr", "okr": "acc_okr", "csr": "online_accuracy", "kg": "acc_kg"}
OEC_PARTS = ("ukr", "okr", "csr", "kg")
EPS = 1e-9  # floor(x + EPS): exact integers computed in floating point stay exact
# Reference methods that only exist after the stream (f_0 -> f_T): no averages, CSR^(T) in hindsight
OFFLINE_REFERENCES = ("offline_refining",)


def episode_counts(t: int, b: int, alpha: float, gamma: float) -> tuple[int, int, int]:
    """(upstream, major, other) item counts of episode t (1-based), Algorithm 1."""
    b_u = math.floor(b * alpha ** (t - 1) + EPS)
    b_o = b - b_u
    major = math.floor(b_o * gamma + EPS)
    return b_u, major, b_o - major


def sample_stream(
    upstream: np.ndarray,
    pools: list[np.ndarray],
    T: int,
    b: int,
    alpha: float,
    beta: float,
    gamma: float,
    rng: np.random.Generator,
    names: list[str] | None = None,
):
    """Algorithm 1. ``upstream``: V0's item ids; ``pools[k]``: OOD cluster k's item ids.
    Returns (items, source, majors): per stream position the item id and its cluster
    (0 = V0, k + 1 = OOD cluster k), per episode the major cluster k."""
    n = len(pools)
    names = names or [f"V{k + 1}" for k in range(n)]
    items, source, majors = [], [], []
    major = int(rng.integers(n))
    for t in range(1, T + 1):
        if t > 1 and rng.random() < 1.0 - beta:
            other = int(rng.integers(n - 1))
            major = other if other < major else other + 1
        majors.append(major)
        b_u, b_major, b_other = episode_counts(t, b, alpha, gamma)
        rest = [k for k in range(n) if k != major]
        rest_items = np.concatenate([pools[k] for k in rest])
        rest_source = np.concatenate([np.full(len(pools[k]), k + 1) for k in rest])
        for pool, src, k, what in (
            (upstream, np.zeros(len(upstream), int), b_u, "the upstream clusters"),
            (pools[major], np.full(len(pools[major]), major + 1), b_major, f"the major cluster {names[major]}"),
            (rest_items, rest_source, b_other, f"the clusters other than {names[major]}"),
        ):
            if k > len(pool):
                raise OcrrError(
                    f"protocol cmr: episode {t} needs {k} items from {what}, which hold only "
                    f"{len(pool)} training items; lower cmr:b (now {b}) or use fewer, larger clusters."
                )
            pick = rng.choice(len(pool), size=k, replace=False)
            items.append(pool[pick])
            source.append(src[pick])
    return np.concatenate(items).astype(int), np.concatenate(source).astype(int), majors


def _cap(idx: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    return idx[np.sort(rng.choice(len(idx), size=cap, replace=False))] if len(idx) > cap else idx


class CmrProtocol(Protocol):
    """CMR (Lin et al. 2022): refine on each episode's errors from a shifting mixture of OOD
    clusters; EFR, UKR, OKR, CSR, KG and their OEC, mean over the stream and final."""

    name = "cmr"
    summary_text = "continual model refinement (Lin et al. 2022): non-stationary OOD episodes, EFR/UKR/OKR/CSR/KG"
    options = {
        "T": Option(100, int, low=1, help="episodes"),
        "b": Option(64, int, low=1, help="items per episode"),
        "alpha": Option(0.9, float, low=0.0, high=1.0, help="decay of the upstream share"),
        "beta": Option(0.5, float, low=0.0, high=1.0, help="probability of keeping the major cluster"),
        "gamma": Option(0.8, float, low=0.0, high=1.0, help="major cluster's share of the OOD items"),
        "clusters": Option(
            "auto", str, help="auto, domains, kmeans, drift (within-class clusters) or a .json/.csv label->cluster file"
        ),
        "n_clusters": Option(10, int, low=3, help="k-means clusters (clusters=kmeans)"),
        "upstream": Option(None, str, allow_none=True, help="comma-separated upstream clusters; none: a seeded half"),
        "split": Option("test", str, choices=("val", "test"), help="val or test: which family of streams"),
        "stream": Option(0, int, low=0, help="stream index within the split"),
        "streams": Option(
            None, int, low=1, allow_none=True, help="cycle runs over this many streams: stream = run seed mod streams"
        ),
        "ukr_cap": Option(512, int, low=1, help="cap on the UKR set"),
        "kg_cap": Option(256, int, low=1, help="cap on the KG set, per OOD cluster"),
        "okr_cap": Option(512, int, low=1, help="cap on the OKR sample"),
        "eval_every": Option(10, int, low=1, help="evaluate every N episodes (and after the last)"),
    }
    metrics = ("acc_efr", "acc_ukr", "acc_okr", "acc_kg")

    def scenario(self, dataset, train_vecs, test_vecs, seed):
        return cmr_scenario(dataset, train_vecs, test_vecs, seed, self.values)

    # -- results -----------------------------------------------------------------------------

    def per_run(self, per_checkpoint: pd.DataFrame) -> pd.DataFrame:
        """One row per run: X̄ (mean over the evaluations after episodes >= 1 where X was
        measured) and X^(T) (after the last episode) for EFR, UKR, OKR, CSR, KG and OEC."""
        keys = RUN_KEYS + _setting_keys(per_checkpoint)
        rows = []
        for key, run in per_checkpoint.sort_values("step", kind="mergesort").groupby(keys, sort=True):
            after = run[run["episode"] >= 1]
            last = run.iloc[-1]
            row = dict(zip(keys, key), step=int(last["step"]), corrections=int(last["corrections"]))
            for x, col in SOURCE.items():
                values = after[col].to_numpy(float) if col in after.columns else np.array([np.nan])
                row[f"{x}_avg"] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
                row[f"{x}_final"] = float(last[col]) if col in run.columns else math.nan
            row["stream_final"] = float(last["acc_stream"]) if "acc_stream" in run.columns else math.nan
            if spec_name(str(row["system"])) in OFFLINE_REFERENCES:
                for x in SOURCE:
                    row[f"{x}_avg"] = math.nan
                row["csr_final"] = row["stream_final"]
            for form in ("avg", "final"):
                row[f"oec_{form}"] = float(np.mean([row[f"{x}_{form}"] for x in OEC_PARTS]))
            rows.append(row)
        return pd.DataFrame(rows)

    def summarise(self, per_checkpoint, footprints=None):
        """Per (dataset, encoder, policy, system): mean and population std over runs of every
        X̄ and X^(T); ``n_seeds`` counts the runs."""
        runs = self.per_run(per_checkpoint)
        values = [c for c in runs.columns if c.endswith(("_avg", "_final"))]
        keys = CELL_KEYS + _setting_keys(runs)
        rows = []
        for key, cell in runs.groupby(keys, sort=False):
            row = dict(zip(keys, key), n_seeds=len(cell))
            for c in values:
                v = cell[c].to_numpy(float)
                ok = v[np.isfinite(v)]
                row[f"{c}_mean"] = float(ok.mean()) if len(ok) else math.nan
                row[f"{c}_std"] = float(ok.std()) if len(ok) else math.nan
            row["corrections_mean"] = float(cell["corrections"].mean())
            rows.append(row)
        return add_online_accuracy(add_footprints(pd.DataFrame(rows), footprints), per_checkpoint)

    def summary_columns(self):
        cols = [f"{x}_avg" for x, _ in AVG] + [f"{x}_final" for x, _ in FINAL] + ["efr_final", "stream_final"]
        return CELL_KEYS + ["n_seeds"] + [f"{c}_{s}" for c in cols for s in ("mean", "std")]

    def table(self, summary):
        header = ["system"] + [h for _, h in AVG] + [h for _, h in FINAL] + ["corrections"]
        rows = []
        for _, r in summary.iterrows():
            n = int(r["n_seeds"])
            cells = [_pct(r[f"{x}_avg_mean"], r[f"{x}_avg_std"], n) for x, _ in AVG]
            cells += [_pct(r[f"{x}_final_mean"], r[f"{x}_final_std"], n) for x, _ in FINAL]
            rows.append([r["system"], *cells, f"{r['corrections_mean']:.0f}"])
        note = (
            "The paper's Table 1 (%): mean ± std (population) over runs (streams × seeds). Every metric is "
            "measured on f_t, the model after its update on episode t. X̄: mean over the evaluations after "
            "episodes 1..T where X was measured; X^(T): after the last episode. EFR on the revealed errors of "
            "the episode (episodes without one left out); UKR on upstream test items; OKR on a sample of the "
            "earlier episodes' stream items; CSR: accuracy of the stream predictions so far, each made before "
            "the update; KG on the OOD clusters' test items. OEC = mean(UKR, OKR, CSR, KG); EFR not in OEC. "
            "offline_refining (f_0 -> f_T, the upper reference) exists only after the stream: its averages are "
            "'–' and its CSR^(T) is f_T on the whole stream in hindsight, as in the paper."
        )
        return header, rows, note


def _pct(mean: float, std: float, n: int) -> str:
    if not np.isfinite(mean):
        return "–"
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if n > 1 else f"{100 * mean:.2f}"


def choose_upstream(names: list[str], upstream: str | None, dataset_name: str) -> list[str]:
    """The upstream clusters: the ones named, or a seeded choice of half (floor) of them."""
    if upstream is None:
        rng = np.random.default_rng(np.random.SeedSequence([crc("cmr-upstream"), crc(dataset_name), len(names)]))
        return sorted(names[i] for i in rng.choice(len(names), size=len(names) // 2, replace=False))
    chosen = [c.strip() for c in str(upstream).split(",") if c.strip()]
    unknown = [c for c in chosen if c not in names]
    if unknown or not chosen:
        raise OcrrError(
            f"protocol cmr: upstream={upstream!r} names no cluster or unknown ones "
            f"({', '.join(unknown)}). Clusters: {', '.join(names)}."
        )
    return sorted(set(chosen))


def stream_seed(dataset_name: str, split: str, stream: int) -> list[int]:
    return [crc("cmr-stream"), crc(dataset_name), crc(split), stream]


def cmr_scenario(dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, seed: int, values: dict) -> Scenario:
    v = values
    names, train_c, test_c = item_clusters(dataset, train_vecs, test_vecs, v["clusters"], v["n_clusters"])
    upstream = choose_upstream(names, v["upstream"], dataset.name)
    ood = [c for c in names if c not in upstream]
    if len(ood) < 2:
        raise OcrrError(
            f"protocol cmr: {len(ood)} OOD cluster(s) left ({', '.join(ood) or 'none'}); it needs at "
            f"least 2. Name fewer upstream clusters (cmr:upstream=...) or use more clusters."
        )
    v0_train = np.flatnonzero(np.isin(train_c, upstream))
    pools = [np.flatnonzero(train_c == c) for c in ood]
    index = v["stream"] if v["streams"] is None else seed % v["streams"]
    ints = stream_seed(dataset.name, v["split"], index)
    items, source, majors = sample_stream(
        v0_train,
        pools,
        v["T"],
        v["b"],
        v["alpha"],
        v["beta"],
        v["gamma"],
        np.random.default_rng(np.random.SeedSequence(ints)),
        ood,
    )
    cluster = [str(train_c[i]) for i in items]
    role = np.where(source == 0, "upstream", "other")
    bounds = np.arange(0, v["T"] * v["b"] + 1, v["b"])
    major_of_item = np.repeat(np.asarray(majors), v["b"]) + 1
    role[(source != 0) & (source == major_of_item)] = "major"

    rng = np.random.default_rng(np.random.SeedSequence([crc("cmr-eval"), crc(dataset.name)]))
    ukr = _cap(np.flatnonzero(np.isin(test_c, upstream)), v["ukr_cap"], rng)
    kg = np.concatenate([_cap(np.flatnonzero(test_c == c), v["kg_cap"], rng) for c in ood])
    stream = rows_of(dataset.train, train_vecs, items)
    okr_cap = v["okr_cap"]

    def dynamic(so_far) -> dict[str, Batch]:
        """EFR on the last episode's revealed errors; OKR on a fixed-seed sample of Q_<t."""
        revealed = [i for i in so_far.last_episode() if so_far.corrected[i]]
        t = so_far.episode
        earlier = int(so_far.episode_bounds[t - 1]) if t >= 1 else 0
        okr_rng = np.random.default_rng(np.random.SeedSequence([crc("cmr-okr"), *ints, t]))
        okr = _cap(np.arange(earlier), okr_cap, okr_rng)
        sets = {"efr": stream[np.asarray(revealed, int)], "okr": stream[okr]}
        if t == v["T"]:  # f_T on the whole stream in hindsight: the offline reference's CSR^(T)
            sets["stream"] = stream
        return sets

    return Scenario(
        protocol="cmr",
        seed_value=seed,
        labels=dataset.labels,
        seed_set=rows_of(dataset.train, train_vecs, v0_train),
        stream=stream,
        eval_sets={"ukr": rows_of(dataset.test, test_vecs, ukr), "kg": rows_of(dataset.test, test_vecs, kg)},
        eval_after=every_n(v["T"], v["eval_every"]),
        episode_bounds=bounds,
        dynamic_eval_sets=dynamic,
        stream_columns={"cluster": cluster, "role": role.tolist()},
        info={
            "stream": index,
            "upstream": upstream,
            "ood": ood,
            "majors": [ood[k] for k in majors],
            "stream_seed": ints,
            "n_ukr": len(ukr),
            "n_kg": len(kg),
        },
    )


def stream_shares(predictions: pd.DataFrame) -> pd.DataFrame:
    """Cluster shares per episode (the paper's Figure 3) from a run's prediction log (one
    run: columns episode, cluster, role): rows episodes, columns clusters (upstream as V0)."""
    p = predictions.assign(cluster=np.where(predictions["role"] == "upstream", "V0", predictions["cluster"]))
    return pd.crosstab(p["episode"], p["cluster"], normalize="index")


def _setting_keys(frame) -> list[str]:
    """Stream settings and data options, when a frame carries them: runs of two settings
    (say beta=0.1 and beta=0.9 in one folder) are never averaged together."""
    return [c for c in ("data_options", "protocol_options") if c in frame.columns]
