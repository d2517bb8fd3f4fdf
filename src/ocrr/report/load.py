"""Read results for a report: a sweep folder, an ``ocrr run`` folder, or a results file.

Whatever the source, the report works on one tidy per-checkpoint table: protocol, dataset,
encoder, policy, seed, system, step, corrections, the protocol's metric columns (held-out:
acc_novel, acc_original), and the run-level footprint columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from ocrr.engine.results import RUN_FOLDER_KEYS
from ocrr.engine.sweep import load_results
from ocrr.errors import OcrrError
from ocrr.protocols import PROTOCOLS
from ocrr.protocols.summary import FOOTPRINT_COLUMNS

BASE_COLUMNS = RUN_FOLDER_KEYS + ["step", "corrections"]
# sweep columns besides the cell keys that tell variants of one dataset apart (the held-out
# option columns serve results tables written before protocols had protocol_options)
VARIANT_COLUMNS = ["data_options", "protocol_options", "n_heldout", "eval_cap", "every"]


@dataclass
class Loaded:
    per_checkpoint: pd.DataFrame
    source: str  # "sweep", "run" or "file"
    path: Path


def load_results_any(path: str | Path) -> Loaded:
    path = Path(path)
    if not path.exists():
        raise OcrrError(
            f"{str(path)!r} does not exist. Give a sweep folder (ocrr sweep --out), "
            "an ocrr run folder, or a results .parquet/.csv file."
        )
    if path.is_dir():
        if (path / "tasks").is_dir():
            return Loaded(_normalise(load_results(path), path), "sweep", path)
        if (path / "results.parquet").exists():
            fix = f"copy it again from where the sweep ran, or run that sweep again (ocrr sweep ... --out {path})"
            return Loaded(_normalise(_read_parquet(path / "results.parquet", fix), path), "sweep", path)
        if (path / "per_checkpoint.csv").exists():
            return Loaded(_from_run(path), "run", path)
        raise OcrrError(
            f"{str(path)!r} holds no results: expected tasks/ or results.parquet (from ocrr sweep) "
            "or per_checkpoint.csv (from ocrr run). Point ocrr report at one of those folders."
        )
    if path.suffix in (".parquet", ".csv"):
        read = _read_parquet if path.suffix == ".parquet" else _read_csv
        return Loaded(_normalise(read(path, RESULTS_FILE_FIX), path), "file", path)
    raise OcrrError(f"{str(path)!r}: ocrr report reads a folder, a .parquet or a .csv file.")


# What to do about a results file given by itself that cannot be read
RESULTS_FILE_FIX = "give a table ocrr wrote: a sweep's results.parquet or results.csv, or a run's per_checkpoint.csv"


def _run_file_fix(folder: Path) -> str:
    return f"ocrr run wrote it: run the same command again with --out {folder} to write the folder anew"


def _read_parquet(path: Path, fix: str) -> pd.DataFrame:
    """A Parquet table, or one error naming the file, why it cannot be read, and ``fix``."""
    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError, ValueError) as err:  # empty, cut short, not Parquet at all
        reason = str(err).removeprefix(f"Could not open Parquet input source '{path}': ").rstrip(".")
        raise OcrrError(f"{str(path)!r} cannot be read as a Parquet table ({reason}); {fix}.") from None


def _read_csv(path: Path, fix: str) -> pd.DataFrame:
    """A CSV table, or one error naming the file, why it cannot be read, and ``fix``."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise OcrrError(f"{str(path)!r} is empty: it holds no table; {fix}.") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as err:
        reason = str(err).strip().rstrip(".") or type(err).__name__
        raise OcrrError(f"{str(path)!r} cannot be read as a CSV table ({reason}); {fix}.") from None


def _run_protocol(config: Path) -> str:
    """The protocol an ``ocrr run`` folder's config.json names (one per run folder)."""
    fix = _run_file_fix(config.parent)
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise OcrrError(f"{str(config)!r} cannot be read as JSON ({err}); {fix}.") from None
    protocol = data.get("protocol", {}) if isinstance(data, dict) else None
    name = protocol.get("name", "heldout") if isinstance(protocol, dict) else None
    if not isinstance(name, str):
        raise OcrrError(f"{str(config)!r} does not name the run's protocol (protocol.name); {fix}.")
    return name


def _from_run(folder: Path) -> pd.DataFrame:
    per = _read_csv(folder / "per_checkpoint.csv", _run_file_fix(folder))
    config = folder / "config.json"
    if config.exists():  # the run's protocol: one per run folder
        per["protocol"] = _run_protocol(config)
    fp_path = folder / "footprints.csv"
    if fp_path.exists():
        fp = _read_csv(fp_path, _run_file_fix(folder))
        keys = RUN_FOLDER_KEYS
        per = per.merge(fp[keys + [c for c in FOOTPRINT_COLUMNS if c in fp.columns]], on=keys, how="left")
    return _normalise(per, folder)


def _normalise(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    missing = [c for c in BASE_COLUMNS if c not in df.columns]
    if missing:
        raise OcrrError(
            f"{str(path)!r} lacks the column(s) {', '.join(missing)}; it is not an ocrr results table. "
            "Use the results.parquet of a sweep or the per_checkpoint.csv of a run."
        )
    if not len(df):
        raise OcrrError(f"{str(path)!r} holds no finished runs yet. Run (or resume) the sweep first.")
    df = df.copy()
    if "protocol" not in df.columns:  # tables written before protocols were named
        df["protocol"] = "heldout"
    unknown = sorted(set(df["protocol"]) - set(PROTOCOLS))
    if unknown:
        raise OcrrError(
            f"{str(path)!r} holds results of the protocol(s) {', '.join(unknown)}, which are not "
            "registered here. Import the module that registers them before building the report."
        )
    for name, group in df.groupby("protocol"):
        missing = [m for m in PROTOCOLS[name].metrics if m not in group.columns or group[m].isna().all()]
        if missing:
            raise OcrrError(
                f"{str(path)!r}: the {name} results lack the column(s) {', '.join(missing)}; it is not "
                "a complete ocrr results table. Use the results.parquet of a sweep or an ocrr run folder."
            )
    for col in FOOTPRINT_COLUMNS:
        df[col] = df[col].fillna(0).astype("int64") if col in df.columns else 0
    df["dataset"] = _dataset_labels(df)
    df = df.drop_duplicates(subset=["protocol", "dataset", "encoder", "policy", "system", "seed", "step"], keep="last")
    return df.reset_index(drop=True)


def _dataset_labels(df: pd.DataFrame) -> pd.Series:
    """The dataset name, plus the differing protocol/loader options when one dataset was
    run under several (so two variants never share a table)."""
    cols = [c for c in VARIANT_COLUMNS if c in df.columns]
    if "protocol_options" in cols:  # its keys are expanded below; the option columns repeat them
        cols = ["data_options", "protocol_options"]
    labels = df["dataset"].astype(str).copy()
    if not cols:
        return labels
    json_cols = [c for c in ("data_options", "protocol_options") if c in cols]

    def merged(variant) -> dict:
        return {k: v for c in json_cols for k, v in json.loads(variant[c]).items()}

    for name, group in df.groupby("dataset", sort=False):
        variants = group[cols].drop_duplicates()
        if len(variants) < 2:
            continue
        varying = [c for c in cols if c not in json_cols and variants[c].nunique() > 1]
        options = [merged(v) for _, v in variants.iterrows()]
        option_keys = sorted({k for o in options for k in o if len({json.dumps(x.get(k)) for x in options}) > 1})
        for _, variant in variants.iterrows():
            mask = (df["dataset"] == name) & (df[cols] == variant[cols].values).all(axis=1)
            parts = [f"{k}={merged(variant).get(k)}" for k in option_keys]
            parts += [f"{c}={variant[c]}" for c in varying]
            labels[mask] = f"{name} [{', '.join(parts)}]"
    return labels


def load_predictions(loaded: Loaded) -> pd.DataFrame | None:
    """The per-item stream log next to the results (a sweep's or a run's predictions.parquet), if any."""
    path = loaded.path if loaded.path.is_dir() else loaded.path.parent
    file = path / "predictions.parquet"
    fix = "delete it to draw the report without the pictures of the stream, or write it anew by running again"
    return _read_parquet(file, fix) if file.exists() else None


def first_run_predictions(predictions: pd.DataFrame | None, rows: pd.DataFrame) -> pd.DataFrame | None:
    """The stream log of the first run (lowest seed, first system) of a report cell."""
    if predictions is None or not len(rows):
        return None
    first = rows.sort_values(["seed", "system"], kind="mergesort").iloc[0]
    if "task_id" in predictions.columns and "task_id" in rows.columns:
        got = predictions[predictions["task_id"] == first["task_id"]]
    else:
        keys = [k for k in ("encoder", "policy", "seed", "system") if k in predictions.columns]
        got = predictions[(predictions[keys] == first[keys].values).all(axis=1)]
    return got if len(got) else None
