"""Hugging Face datasets: ``hf:PATH`` (a folder ``DatasetDict.save_to_disk`` wrote) or
``hf:NAME[:CONFIG]`` (a dataset on the hub), read with the ``datasets`` library.

A spec that names an existing folder is that folder; one that looks like a path
(``/``, ``.``, ``~``) but is not a folder is an error; anything else is a hub name.
Labels come from a ``ClassLabel``'s names, else from the column's values as strings.
Each split's identity in ``Dataset.files`` is a sha256 of its texts and labels, so two
datasets that hold other rows never look alike, whatever their names.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ocrr.data.locate import offline
from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.errors import OcrrError

_SHOW_ROWS = 10  # row numbers listed in an error before "and N more"
# owner/name or name, as the hub spells repository ids
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_TEXT_TYPES = ("string", "large_string")
_OFFLINE_FIX = "Save it with DatasetDict.save_to_disk(PATH) where the hub is reachable, then give --dataset hf:PATH"


def load_huggingface(
    spec: str,
    text_col: str = "text",
    label_col: str = "label",
    train_split: str = "train",
    test_split: str = "test",
    name: str | None = None,
) -> Dataset:
    """Load ``spec`` (what follows ``hf:``): a saved folder, else a hub name; see the module doc."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        parts, source, default_name = _from_disk(folder, spec), spec, folder.resolve().name
    elif spec.startswith(("/", ".", "~")) or not _HUB_NAME.match(spec.split(":", 1)[0]):
        raise OcrrError(
            f"No folder {spec} (relative paths are taken from {Path.cwd()}). Give the folder "
            "DatasetDict.save_to_disk wrote, or a hub dataset as hf:NAME[:CONFIG]."
        )
    else:
        hub_name, _, config = spec.partition(":")
        parts, source = _from_hub(hub_name, config or None), f"{spec} (Hugging Face hub)"
        default_name = hub_name.rsplit("/", 1)[-1] + (f"-{config}" if config else "")

    splits = {}
    for role, split in (("train", train_split), ("test", test_split)):
        if split not in parts:
            found = ", ".join(map(repr, parts))
            other = next((s for s in parts if s not in (train_split, test_split)), "NAME")
            raise OcrrError(
                f"{source} has no split {split!r}; its splits: {found}. "
                f"Name the {role} split with --data-option {role}_split={other}."
            )
        splits[split] = _split(parts[split], split, source, text_col, label_col)
    train, test = splits[train_split], splits[test_split]

    labels = set(train.labels) | set(test.labels)
    if len(labels) < 2:
        raise OcrrError(
            f"{source} has only {len(labels)} class in column {label_col!r}; a classifier needs at least 2. "
            "Pick the right column with --label-col."
        )
    dataset_name = name or default_name
    return make_dataset(
        dataset_name,
        train=train,
        test=test,
        files={f"{dataset_name}[{split}]": _content_sha256(part) for split, part in splits.items()},
        notes=(
            f"Hugging Face dataset {source} (splits {train_split!r} and {test_split!r}, "
            f"text column {text_col!r}, label column {label_col!r})."
        ),
    )


def _datasets_library() -> Any:
    try:
        import datasets
    except ImportError as error:
        raise OcrrError(
            "Reading hf: datasets needs the Hugging Face datasets library: pip install -e '.[hf]'."
        ) from error
    return datasets


def _from_disk(folder: Path, spec: str) -> dict[str, Any]:
    datasets = _datasets_library()
    try:
        loaded = datasets.load_from_disk(str(folder))
    except FileNotFoundError as error:
        raise OcrrError(
            f"{spec} is not a dataset folder ({error}). Give the folder DatasetDict.save_to_disk wrote."
        ) from error
    if isinstance(loaded, datasets.Dataset):
        raise OcrrError(
            f"{spec} holds one split (Dataset.save_to_disk); ocrr needs a train and a test split. "
            'Save a DatasetDict instead: DatasetDict({"train": ..., "test": ...}).save_to_disk(FOLDER).'
        )
    return dict(loaded)


def _from_hub(hub_name: str, config: str | None) -> dict[str, Any]:
    spec = hub_name + (f":{config}" if config else "")
    if offline():
        raise OcrrError(
            f"hf:{spec} is no local folder, so it names a Hugging Face hub dataset, and downloads are "
            "disabled by OCRR_OFFLINE=1. "
            f"{_OFFLINE_FIX}, or unset OCRR_OFFLINE (HF_HUB_OFFLINE=1 then reads the hub's local cache)."
        )
    datasets = _datasets_library()
    try:
        loaded = datasets.load_dataset(hub_name, config)
    except ConnectionError as error:
        why = "HF_HUB_OFFLINE is set" if datasets.config.HF_HUB_OFFLINE else "no network"
        raise OcrrError(
            f"Cannot reach hf:{spec} on the Hugging Face hub ({why}; {error}), and there is no local folder "
            f"{spec}. {_OFFLINE_FIX}."
        ) from error
    except datasets.exceptions.DatasetNotFoundError as error:
        raise OcrrError(
            f"No dataset {hub_name} on the Hugging Face hub, and no local folder {spec} ({error}). "
            "Check the name (owner/name), log in with 'hf auth login' for a gated dataset, or give hf:PATH."
        ) from error
    except (OSError, ValueError) as error:  # e.g. a config the dataset lacks: the library lists them
        raise OcrrError(
            f"Cannot load hf:{spec} from the Hugging Face hub: {error} Give it as hf:NAME:CONFIG."
        ) from error
    return dict(loaded)


def _split(part: Any, split: str, source: str, text_col: str, label_col: str) -> Split:
    """(texts, labels) of one split after checking its columns and cells."""
    features = part.features
    for col, option in ((text_col, "--text-col"), (label_col, "--label-col")):
        if col not in features:
            raise OcrrError(
                f"{source} ({split} split) has no column {col!r}; columns found: "
                f"{', '.join(map(repr, features))}. Name the right column with {option}."
            )
    if getattr(features[text_col], "dtype", None) not in _TEXT_TYPES:
        raise OcrrError(
            f"{source} column {text_col!r} holds {features[text_col]}, not text. Name the text column with --text-col."
        )
    texts = [text or "" for text in part[text_col]]
    labels = _labels(part[label_col], features[label_col], source, split, label_col)
    empty = [row for row, text in enumerate(texts) if not text.strip()]
    if empty:
        raise OcrrError(
            f"{source} has empty {text_col!r} texts in its {split} split at {_rows(empty)} (counting from 0). "
            "Fill them in or filter those rows out."
        )
    return Split(labels=tuple(labels), texts=tuple(texts))


def _labels(values: Sequence[Any], feature: Any, source: str, split: str, label_col: str) -> list[str]:
    """Label names: a ClassLabel's names, else the values as strings; None, -1 or "" is no label."""
    names = getattr(feature, "names", None)
    if names is not None:
        labels = [names[v] if v is not None and 0 <= v < len(names) else "" for v in values]
    elif getattr(feature, "dtype", None) is None:
        raise OcrrError(
            f"{source} column {label_col!r} holds {feature}, not one label per row. "
            "Name the label column with --label-col."
        )
    else:
        labels = ["" if v is None else str(v) for v in values]
    missing = [row for row, label in enumerate(labels) if not label.strip()]
    if missing:
        raise OcrrError(
            f"{source}: the {split} split has no label in column {label_col!r} at {_rows(missing)} (counting from 0; "
            "-1 marks an unlabelled row). Use a split with labels, e.g. --data-option test_split=validation."
        )
    return labels


def _rows(rows: list[int]) -> str:
    shown = ", ".join(map(str, rows[:_SHOW_ROWS]))
    more = len(rows) - _SHOW_ROWS
    return ("row " if len(rows) == 1 else "rows ") + shown + (f" and {more} more" if more > 0 else "")


def _content_sha256(split: Split) -> str:
    """sha256 over every (text, label) pair, length-prefixed UTF-8, in order."""
    digest = hashlib.sha256()
    assert split.texts is not None  # built from texts above
    for text, label in zip(split.texts, split.labels):
        for value in (text, label):
            raw = value.encode("utf-8")
            digest.update(len(raw).to_bytes(8, "little"))
            digest.update(raw)
    return digest.hexdigest()
