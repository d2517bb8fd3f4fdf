"""Banking77 (PolyAI): 77 fine-grained banking intents, 10003 train / 3080 test."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from ocrr.data.locate import locate
from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.errors import OcrrError

NOTES = (
    "Banking77 (Casanueva et al., 2020; PolyAI-LDN/task-specific-datasets, CC BY 4.0): "
    "77 banking intents, train.csv and test.csv in file order."
)


def load_banking77(data_dir: str | os.PathLike | None = None) -> Dataset:
    """Load Banking77's train/test CSVs (columns ``text,category``) in file order."""
    found = locate("banking77", data_dir)
    return make_dataset(
        "banking77",
        train=_read_split(found.paths["train.csv"]),
        test=_read_split(found.paths["test.csv"]),
        files=dict(found.sha256),
        notes=NOTES,
    )


def _read_split(path: Path) -> Split:
    # The csv module keeps every cell a string: no NaN for texts like "null".
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "text" not in columns or "category" not in columns:
            raise OcrrError(
                f"{path} is not a Banking77 file: expected columns text,category, "
                f"found {','.join(columns) or 'none'}. "
                "Point --data-dir or OCRR_DATA_DIR at the original banking_data files."
            )
        rows = [(row["text"], row["category"]) for row in reader]
    return Split(labels=tuple(r[1] for r in rows), texts=tuple(r[0] for r in rows))
