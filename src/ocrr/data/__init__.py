"""Datasets: built-in public sets, a synthetic generator, the demo, user files, Hugging Face datasets.

``load_dataset(name, ...)`` is the one entry point; every loader returns a
:class:`Dataset` whose splits keep their source order. The datasets known by name are in
``DATASETS`` (an ``ocrr.registry.Registry``); a package adds its own through the
``ocrr.datasets`` entry-point group: a loader ``loader(data_dir=None, **options) -> Dataset``
whose ``options`` attribute declares its options (a dict of ``ocrr.specs.Option``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ocrr.data.banking77 import load_banking77
from ocrr.data.clinc150 import load_clinc150
from ocrr.data.leyzer import LANGUAGES, load_leyzer
from ocrr.data.leyzer import LICENCE as LEYZER_LICENCE
from ocrr.data.locate import REMOTE_FILES, check_located
from ocrr.data.records import Dataset, Split
from ocrr.data.synthetic import MAX_DIM as SYNTHETIC_MAX_DIM
from ocrr.data.synthetic import check_synthetic, make_synthetic
from ocrr.errors import OcrrError
from ocrr.registry import Registry, load_target, summary_of
from ocrr.specs import Option, declared_options, format_spec, parse_spec, spec_name, validate


@dataclass(frozen=True)
class NamedDataset:
    """A dataset known by name: its loader (or its import path "module:function", imported when
    it loads), called with ``data_dir`` first when ``reads_data_dir``, then the options it declares
    (their defaults are the loader's own)."""

    loader: Callable[..., Dataset] | str
    options: Mapping[str, Option]
    summary: str
    reads_data_dir: bool = True
    # The rules between options (each alone is checked as declared), called with the given ones
    # before anything is read: one error naming the fix.
    check: Callable[..., None] | None = None

    def load(self, data_dir: str | os.PathLike | None, options: dict) -> Dataset:
        loader = self.loader if callable(self.loader) else load_target(self.loader)
        return loader(data_dir, **options) if self.reads_data_dir else loader(**options)


def _adopt(name: str, loader: object) -> NamedDataset:
    """A plug-in's loader(data_dir=None, **options), with the options it declares in ``options``."""
    if not callable(loader):
        raise OcrrError(f"it is a {type(loader).__name__}, not a loader function")
    return NamedDataset(loader, declared_options(loader), summary_of(loader))


_USE = (
    "your own file as csv:TRAIN[,TEST] or jsonl:TRAIN[,TEST], "
    "or a Hugging Face dataset as hf:FOLDER or hf:NAME[:CONFIG]"
)
DATASETS: Registry[NamedDataset] = Registry(
    "dataset", hint=lambda: f"Use one of {', '.join(DATASETS)}, {_USE}.", group="ocrr.datasets", adopt=_adopt
)
DATASETS.register("banking77", NamedDataset(load_banking77, {}, "Banking77: 77 online-banking intents"))
DATASETS.register(
    "clinc150",
    NamedDataset(
        load_clinc150,
        {"oos": Option(kind=bool, help="keep out-of-scope as class 151 ('oos'); false: drop its items")},
        "CLINC150: 150 intents over 10 domains, plus out-of-scope",
    ),
)
DATASETS.register(
    "leyzer",
    NamedDataset(
        load_leyzer,
        {
            "lang": Option(kind=str, choices=LANGUAGES, allow_none=True, help="one language's train and test files"),
            "source": Option(kind=str, choices=LANGUAGES, allow_none=True, help="a pair: the language systems fit on"),
            "target": Option(
                kind=str, choices=LANGUAGES, allow_none=True, help="a pair: the language the stream brings"
            ),
        },
        "Leyzer 0.1.0: virtual-assistant intents in English, Spanish and Polish",
    ),
)
DATASETS.register(
    "synthetic",
    NamedDataset(
        make_synthetic,
        {
            "n_classes": Option(kind=int, low=2, help="classes"),
            "dim": Option(kind=int, low=1, high=SYNTHETIC_MAX_DIM, help="vector dimension"),
            "n_train_per_class": Option(kind=int, low=1, help="training items per class"),
            "n_test_per_class": Option(kind=int, low=1, help="test items per class"),
            "sigma": Option(kind=float, low=0, help="Gaussian noise per dimension around unit centroids"),
            "seed": Option(kind=int, help="generator seed"),
        },
        "Gaussian clusters around unit centroids, as vectors (no encoder)",
        reads_data_dir=False,
        check=check_synthetic,  # the rows and values it would generate, bounded
    ),
)
# The demo is read with pandas, which the service (it imports this package) does not
# otherwise load: its loader is imported when it loads.
DATASETS.register(
    "demo", NamedDataset("ocrr.data.demo:load_demo", {}, "the bundled help-desk intent set", reads_data_dir=False)
)

# The options of the two sources that are not names (data_dir is separate), declared once;
# their defaults are the loaders' own (ocrr.data.tabular, ocrr.data.huggingface).
OPTIONS: dict[str, dict[str, Option]] = {
    "table": {
        "text_col": Option(kind=str, help="the text column"),
        "label_col": Option(kind=str, help="the label column"),
        "test_fraction": Option(kind=float, gt=0, lt=1, help="share of rows held out when there is no test file"),
        "seed": Option(kind=int, help="seed of that random split"),
        "name": Option(kind=str, allow_none=True, help="the dataset's name; none: the train file's stem"),
    },
    "hf": {
        "text_col": Option(kind=str, help="the text column"),
        "label_col": Option(kind=str, help="the label column (a ClassLabel gives its names)"),
        "train_split": Option(kind=str, help="the split to train on"),
        "test_split": Option(kind=str, help="the split to test on (e.g. validation)"),
        "name": Option(kind=str, allow_none=True, help="the dataset's name; none: the folder's or hub dataset's"),
    },
}
_HF_PREFIX = "hf:"
# Licence terms a user must read before using a dataset's results (a run prints them first);
# the others ask for attribution only, which their notes give.
LICENCE_TERMS: dict[str, str] = {"leyzer": LEYZER_LICENCE}
_TABLE_PREFIXES = {"csv:": "csv", "jsonl:": "jsonl"}
_TABLE_SUFFIXES = (".csv", ".jsonl", ".json")


def load_dataset(name: str, /, *, data_dir: str | os.PathLike | None = None, **options: Any) -> Dataset:
    """Load a dataset by name.

    ``name`` is one of :data:`DATASETS`, optionally with its options as a spec
    (``leyzer:lang=es-ES``), or user data as ``csv:TRAIN[,TEST]``,
    ``jsonl:TRAIN[,TEST]``, or a path (``TRAIN[,TEST]``) ending in .csv/.jsonl;
    or a Hugging Face dataset as ``hf:PATH`` (a saved DatasetDict) or ``hf:NAME[:CONFIG]``.
    ``data_dir`` is where to look for banking77/clinc150/leyzer files first (see
    :mod:`ocrr.data.locate`). ``options`` go to the loader: ``oos`` for
    clinc150; ``lang`` or ``source`` and ``target`` for leyzer; the generator's
    parameters for synthetic; ``text_col``, ``label_col``, ``test_fraction``,
    ``seed``, ``name`` for user files.
    """
    name, options = _spec_options(name, options)
    kind, fmt, paths = _checked(name, options)
    if kind in DATASETS:
        return DATASETS[kind].load(data_dir, options)
    if kind == "hf":  # imports the datasets library (an extra) only when asked for
        from ocrr.data.huggingface import load_huggingface

        return load_huggingface(paths[0], **options)
    # User tables are read with pandas, which the service (it imports this package) does not
    # otherwise load: imported when a table is read.
    from ocrr.data.tabular import load_table

    return load_table(paths[0], paths[1] if len(paths) > 1 else None, fmt=fmt, **options)


def check_dataset(name: str, /, *, data_dir: str | os.PathLike | None = None, **options: Any) -> None:
    """What ``load_dataset`` checks before it reads anything (the name, the options; a public
    dataset's data folder, and its files when downloads are off), without reading: one error
    naming the fix, or None."""
    name, options = _spec_options(name, options)
    kind, _, _ = _checked(name, options)
    if kind in REMOTE_FILES:  # the public datasets ocrr.data.locate finds
        check_located(kind, data_dir)


def check_dataset_spec(name: str, /, **options: Any) -> None:
    """The name and options ``check_dataset`` checks, not the data: what is wrong whatever
    files there are (a misspelt name, an unknown option)."""
    name, options = _spec_options(name, options)
    _checked(name, options)


def _checked(name: str, options: dict) -> tuple[str, str | None, list[str]]:
    """``_parse``'s (kind, table format, paths) of ``name``, its options validated for that kind."""
    kind, fmt, paths = _parse(name)
    if kind in DATASETS:
        named = DATASETS[kind]
        checked = validate(f"dataset {kind}", named.options, options)
        if named.check is not None:
            named.check(**checked)
    else:
        validate(f"dataset {'user files' if kind == 'table' else kind}", OPTIONS[kind], options)
    return kind, fmt, paths


def licence_terms(name: str) -> str:
    """The terms to show before a run on dataset ``name`` (a spec: 'leyzer:lang=es-ES'); '' for none."""
    return LICENCE_TERMS.get(spec_name(name), "")


def _spec_options(name: str, options: dict) -> tuple[str, dict]:
    """A built-in dataset named with options, 'leyzer:lang=es-ES', as (name, options); an option
    given both in the spec and apart must agree."""
    if ":" not in name or spec_name(name) not in DATASETS:
        return name, options
    base, given = parse_spec(name, "dataset", "leyzer:source=en-US:target=es-ES")
    for key, value in given.items():
        if key in options and options[key] != value:
            raise OcrrError(
                f"dataset {name!r} sets {key}={value} but it is also given as {key}={options[key]}; "
                f"give it once, e.g. {format_spec(base, {**options, **given})}."
            )
    return base, {**options, **given}


def _parse(name: str) -> tuple[str, str | None, list[str]]:
    """(loader kind, table format or None, table paths) for a dataset name."""
    if name in DATASETS:
        return name, None, []
    if name.lower().startswith(_HF_PREFIX) and name[len(_HF_PREFIX) :].strip():
        return "hf", None, [name[len(_HF_PREFIX) :].strip()]
    for prefix, fmt in _TABLE_PREFIXES.items():
        if name.lower().startswith(prefix):
            return "table", fmt, _table_paths(name[len(prefix) :], name)
    if name.lower().endswith(_TABLE_SUFFIXES):
        return "table", None, _table_paths(name, name)
    raise DATASETS.unknown(name)


def _table_paths(spec: str, name: str) -> list[str]:
    paths = [part.strip() for part in spec.split(",")]
    if not 1 <= len(paths) <= 2 or not all(paths):
        raise OcrrError(
            f"Cannot read dataset {name!r}: give one or two files, e.g. csv:train.csv or csv:train.csv,test.csv."
        )
    return paths


__all__ = ["DATASETS", "Dataset", "Split", "check_dataset", "check_dataset_spec", "licence_terms", "load_dataset"]
