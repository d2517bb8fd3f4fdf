"""The user's own labelled texts, from a CSV or JSON-lines file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ocrr.data.locate import sha256_of
from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.errors import OcrrError

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
_SHOW_ROWS = 10  # row numbers listed in an error before "and N more"


def load_table(
    train_path: str | os.PathLike,
    test_path: str | os.PathLike | None = None,
    text_col: str = "text",
    label_col: str = "label",
    test_fraction: float = 0.2,
    seed: int = 0,
    name: str | None = None,
    fmt: str | None = None,
) -> Dataset:
    """Load labelled texts from ``.csv`` or ``.jsonl`` files.

    With ``test_path`` the two files are the splits. Without it, a random
    ``test_fraction`` of the rows (``default_rng(seed).permutation``, not
    stratified) becomes the test split; both splits keep file order.
    ``fmt`` ("csv" or "jsonl") overrides the format read from the extension.
    ``name`` defaults to the train file's stem.
    """
    if text_col == label_col:
        raise OcrrError(
            f"--text-col and --label-col both name the column {text_col!r}: the texts and their labels must "
            "be two columns; name the text column with --text-col and the label column with --label-col"
        )
    train_path = Path(train_path)
    train_rows = _read_rows(train_path, text_col, label_col, fmt)
    files = {train_path: sha256_of(train_path)}
    if test_path is not None:
        test_path = Path(test_path)
        test_rows = _read_rows(test_path, text_col, label_col, fmt)
        files[test_path] = sha256_of(test_path)
    else:
        train_rows, test_rows = _random_split(train_rows, test_fraction, seed, train_path)

    labels = {label for _, label in train_rows} | {label for _, label in test_rows}
    if len(labels) < 2:
        found = ", ".join(repr(label) for label in sorted(labels))
        raise OcrrError(
            f"{train_path} has only {len(labels)} class ({found}) in column {label_col!r}; "
            f"a classifier needs at least 2. Add examples of other classes, or pick the right "
            f"column with --label-col."
        )
    return make_dataset(
        name or train_path.stem,
        train=_split(train_rows),
        test=_split(test_rows),
        files=_file_keys(files),
        notes=(
            f"User data from {', '.join(str(p) for p in files)} (text column {text_col!r}, label column {label_col!r})."
        ),
    )


def parse_jsonl(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of JSON-lines text."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as error:
            raise OcrrError(
                f"{source} line {number} is not valid JSON ({error.msg}). "
                'Write one JSON object per line, e.g. {"text": "...", "label": "..."}.'
            ) from error
        if not isinstance(obj, dict):
            raise OcrrError(
                f"{source} line {number} is a JSON {type(obj).__name__}, not an object. "
                'Write one JSON object per line, e.g. {"text": "...", "label": "..."}.'
            )
        rows.append((number, obj))
    return rows


def _read_rows(path: Path, text_col: str, label_col: str, fmt: str | None) -> list[tuple[str, str]]:
    """(text, label) pairs in file order, after checking columns and cells."""
    if path.is_dir():
        raise OcrrError(f"{path} is a folder; give the CSV or JSON-lines file of labelled texts in it.")
    if path.exists() and not path.is_file():  # a device, a pipe or a socket: "not found" would mislead
        raise OcrrError(
            f"{path} is not a regular file (a device, pipe or socket); give the CSV or JSON-lines file of "
            "labelled texts."
        )
    if not path.is_file():
        raise OcrrError(f"File not found: {path} (relative paths are taken from {Path.cwd()}). Check the path.")
    fmt = fmt or FORMATS.get(path.suffix.lower())
    if fmt not in ("csv", "jsonl"):
        raise OcrrError(
            f"Cannot read {path}: unknown extension {path.suffix!r}. "
            "Use a .csv file with a header row or a .jsonl file with one JSON object per line."
        )
    if fmt == "csv":
        records, where = _read_csv(path)
    else:
        records, where = _read_jsonl(path)
    if not records:
        raise OcrrError(f"{path} has no rows. Add labelled examples to it.")

    columns = list(dict.fromkeys(key for _, obj in records for key in obj))
    for col, option in ((text_col, "--text-col"), (label_col, "--label-col")):
        if col not in columns:
            raise OcrrError(
                f"{path} has no column {col!r}; columns found: {', '.join(map(repr, columns))}. "
                f"Name the right column with {option}."
            )

    pairs: list[tuple[str, str]] = []
    bad: dict[str, list[int]] = {text_col: [], label_col: []}
    for number, obj in records:
        text, label = _cell(obj.get(text_col)), _cell(obj.get(label_col))
        for col, value in ((text_col, text), (label_col, label)):
            if not value.strip():
                bad[col].append(number)
        pairs.append((text, label))
    for col, numbers in bad.items():
        if numbers:
            raise OcrrError(
                f"{path} has empty {col!r} cells at {where.format(_list_numbers(numbers))}. "
                "Fill them in or delete those rows."
            )
    return pairs


def _read_csv(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], str]:
    # keep_default_na=False + dtype=str: texts like "NA" or "null" stay strings.
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise OcrrError(f"Cannot parse {path} as CSV ({error}). Save it as UTF-8 CSV with a header row.") from error
    # Spreadsheet numbering: the header is row 1, so data row i is row i + 2.
    return [(i + 2, row) for i, row in enumerate(frame.to_dict("records"))], "rows {} (the header is row 1)"


def _read_jsonl(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], str]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        # A plain JSON array of objects is accepted too; number its items from 1.
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise OcrrError(f"{path} is not valid JSON ({error.msg}). Write one JSON object per line.") from error
        if not all(isinstance(item, dict) for item in items):
            raise OcrrError(f"{path} is a JSON array of non-objects. Write one JSON object per line.")
        return list(enumerate(items, start=1)), "items {} (counting from 1)"
    return parse_jsonl(text, str(path)), "lines {}"


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _list_numbers(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:_SHOW_ROWS]))
    more = len(numbers) - _SHOW_ROWS
    return shown + (f" and {more} more" if more > 0 else "")


def _random_split(
    rows: list[tuple[str, str]], test_fraction: float, seed: int, path: Path
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Not stratified: a seeded random subset becomes test; order is kept in both."""
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise OcrrError(
            f"test_fraction must be between 0 and 1, got {test_fraction!r}. Pass e.g. 0.2, or give a test file."
        )
    n_test = round(len(rows) * test_fraction)
    if n_test < 1 or n_test >= len(rows):
        raise OcrrError(
            f"{path} has {len(rows)} rows; a test fraction of {test_fraction} leaves "
            f"{n_test} for test and {len(rows) - n_test} for train. "
            "Add rows, change the test fraction, or give a separate test file."
        )
    in_test = np.zeros(len(rows), dtype=bool)
    in_test[np.random.default_rng(seed).permutation(len(rows))[:n_test]] = True
    train = [row for row, t in zip(rows, in_test) if not t]
    test = [row for row, t in zip(rows, in_test) if t]
    return train, test


def _split(rows: list[tuple[str, str]]) -> Split:
    return Split(labels=tuple(label for _, label in rows), texts=tuple(text for text, _ in rows))


def _file_keys(files: dict[Path, str]) -> dict[str, str]:
    """Key by file name; fall back to the given paths if two names clash."""
    names = [path.name for path in files]
    if len(set(names)) == len(names):
        return {path.name: sha for path, sha in files.items()}
    return {str(path): sha for path, sha in files.items()}
