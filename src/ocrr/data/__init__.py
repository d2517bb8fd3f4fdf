"""Datasets: built-in public sets, a synthetic generator, the demo, and user files.

``load_dataset(name, ...)`` is the one entry point; every loader returns a
:class:`Dataset` whose splits keep their source order.
"""

from __future__ import annotations

import os
from typing import Any

from ocrr.data.records import Dataset, Split
from ocrr.errors import OcrrError

DATASETS: tuple[str, ...] = ("banking77", "clinc150", "synthetic", "demo")

# Options each loader accepts through load_dataset (data_dir is separate).
_OPTIONS: dict[str, tuple[str, ...]] = {
    "banking77": (),
    "clinc150": ("oos",),
    "synthetic": ("n_classes", "dim", "n_train_per_class", "n_test_per_class", "sigma", "seed"),
    "demo": (),
    "table": ("text_col", "label_col", "test_fraction", "seed", "name"),
}
_TABLE_PREFIXES = {"csv:": "csv", "jsonl:": "jsonl"}
_TABLE_SUFFIXES = (".csv", ".jsonl", ".json")


def load_dataset(name: str, *, data_dir: str | os.PathLike | None = None, **options: Any) -> Dataset:
    """Load a dataset by name.

    ``name`` is one of :data:`DATASETS`, or user data as ``csv:TRAIN[,TEST]``,
    ``jsonl:TRAIN[,TEST]``, or a path (``TRAIN[,TEST]``) ending in .csv/.jsonl.
    ``data_dir`` is where to look for banking77/clinc150 files first (see
    :mod:`ocrr.data.locate`). ``options`` go to the loader: ``oos`` for
    clinc150; the generator's parameters for synthetic; ``text_col``,
    ``label_col``, ``test_fraction``, ``seed``, ``name`` for user files.
    """
    kind, fmt, paths = _parse(name)
    _check_options(kind, options)
    if kind == "banking77":
        from ocrr.data.banking77 import load_banking77

        return load_banking77(data_dir)
    if kind == "clinc150":
        from ocrr.data.clinc150 import load_clinc150

        return load_clinc150(data_dir, **options)
    if kind == "synthetic":
        from ocrr.data.synthetic import make_synthetic

        return make_synthetic(**options)
    if kind == "demo":
        from ocrr.data.demo import load_demo

        return load_demo()
    from ocrr.data.tabular import load_table

    return load_table(paths[0], paths[1] if len(paths) > 1 else None, fmt=fmt, **options)


def _parse(name: str) -> tuple[str, str | None, list[str]]:
    """(loader kind, table format or None, table paths) for a dataset name."""
    if name in DATASETS:
        return name, None, []
    for prefix, fmt in _TABLE_PREFIXES.items():
        if name.lower().startswith(prefix):
            return "table", fmt, _table_paths(name[len(prefix) :], name)
    if name.lower().endswith(_TABLE_SUFFIXES):
        return "table", None, _table_paths(name, name)
    raise OcrrError(
        f"Unknown dataset {name!r}. Use one of {', '.join(DATASETS)}, "
        "or your own file as csv:TRAIN[,TEST] or jsonl:TRAIN[,TEST]."
    )


def _table_paths(spec: str, name: str) -> list[str]:
    paths = [part.strip() for part in spec.split(",")]
    if not 1 <= len(paths) <= 2 or not all(paths):
        raise OcrrError(
            f"Cannot read dataset {name!r}: give one or two files, e.g. csv:train.csv or csv:train.csv,test.csv."
        )
    return paths


def _check_options(kind: str, options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(_OPTIONS[kind]))
    if unknown:
        allowed = ", ".join(_OPTIONS[kind]) or "none"
        label = "user files" if kind == "table" else kind
        raise OcrrError(f"Unknown option(s) for {label}: {', '.join(unknown)}. Options it takes: {allowed}.")


__all__ = ["DATASETS", "Dataset", "Split", "load_dataset"]
