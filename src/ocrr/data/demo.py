"""The bundled demo: a small help-desk intent set that ships with the package."""

from __future__ import annotations

import hashlib
from importlib import resources

from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.data.tabular import parse_jsonl
from ocrr.errors import OcrrError

RESOURCE = "demo/helpdesk.jsonl"
NOTES = (
    "Demo: a small bundled help-desk intent set (20 intents) written for this project, "
    "so ocrr runs with no download. Not a research dataset; use it to try the tool."
)


def load_demo() -> Dataset:
    """Load ``ocrr/data/demo/helpdesk.jsonl``: lines of {"text", "label", "split"}."""
    # importlib.resources works from a wheel, a zip or a source checkout alike.
    resource = resources.files("ocrr.data").joinpath(RESOURCE)
    if not resource.is_file():
        raise OcrrError(
            f"The bundled demo data ({RESOURCE}) is missing from this ocrr installation. "
            "Reinstall ocrr (pip install --force-reinstall ocrr), or use --dataset synthetic."
        )
    raw = resource.read_bytes()
    source = f"ocrr/data/{RESOURCE}"
    rows: dict[str, list[tuple[str, str]]] = {"train": [], "test": []}
    for number, obj in parse_jsonl(raw.decode("utf-8"), source):
        split = obj.get("split")
        if split not in rows or not obj.get("text") or not obj.get("label"):
            raise OcrrError(
                f'{source} line {number} needs non-empty "text" and "label" and a "split" '
                f'of "train" or "test", got {obj!r}. Reinstall ocrr, or fix the file if you are developing it.'
            )
        rows[split].append((str(obj["text"]), str(obj["label"])))
    return make_dataset(
        "demo",
        train=_split(rows["train"]),
        test=_split(rows["test"]),
        files={"helpdesk.jsonl": hashlib.sha256(raw).hexdigest()},
        notes=NOTES,
    )


def _split(rows: list[tuple[str, str]]) -> Split:
    return Split(labels=tuple(label for _, label in rows), texts=tuple(text for text, _ in rows))
