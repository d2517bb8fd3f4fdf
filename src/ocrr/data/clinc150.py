"""CLINC150 (Larson et al., 2019): 150 intents in 10 domains plus out-of-scope."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ocrr.data.locate import locate
from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.errors import OcrrError

OOS = "oos"


def load_clinc150(data_dir: str | os.PathLike | None = None, oos: bool = True) -> Dataset:
    """Load CLINC150's "plus" configuration (``data_oos_plus.json``).

    train = ``train`` + ``oos_train``, test = ``test`` + ``oos_test``, in that
    order. With ``oos=True`` out-of-scope is one more class, "oos" (151 classes);
    with ``oos=False`` its items are dropped (150 classes). The validation
    splits are not used.
    """
    if not isinstance(oos, bool):
        raise OcrrError(f"clinc150 option oos must be True or False, got {oos!r}. Pass oos=True or oos=False.")
    found = locate("clinc150", data_dir)
    data = _read_json(found.paths["data_oos_plus.json"])
    for key in ("train", "oos_train", "test", "oos_test"):
        if not isinstance(data, dict) or key not in data:
            raise OcrrError(
                f"{found.paths['data_oos_plus.json']} has no {key!r} list; it is not CLINC150's "
                "data_oos_plus.json. Point --data-dir or OCRR_DATA_DIR at the files from clinc/oos-eval/data."
            )
    train = _split(data["train"] + data["oos_train"], oos)
    test = _split(data["test"] + data["oos_test"], oos)

    # domains.json maps domain -> [intent, ...]; a Dataset wants intent -> domain.
    by_domain = _read_json(found.paths["domains.json"])
    domains = {intent: domain for domain, intents in by_domain.items() for intent in intents}
    if oos:
        domains[OOS] = OOS
    present = set(train.labels) | set(test.labels)
    domains = {label: domain for label, domain in domains.items() if label in present}

    kept = "kept as class 151 ('oos')" if oos else "dropped (150 classes)"
    notes = (
        "CLINC150 (Larson et al., 2019; clinc/oos-eval, CC BY 3.0), 'plus' configuration: "
        f"train = train + oos_train, test = test + oos_test; out-of-scope items {kept}."
    )
    return make_dataset("clinc150", train=train, test=test, domains=domains, files=dict(found.sha256), notes=notes)


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise OcrrError(
            f"{path} is not valid JSON ({error}). Replace it with the original file from clinc/oos-eval."
        ) from error


def _split(items: list[list[str]], oos: bool) -> Split:
    # Each item is a [text, intent] pair.
    pairs = [(text, label) for text, label in items if oos or label != OOS]
    return Split(labels=tuple(p[1] for p in pairs), texts=tuple(p[0] for p in pairs))
