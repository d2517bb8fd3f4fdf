"""Leyzer 0.1.0 (Sowański and Janicki, 2020): virtual-assistant intents in English, Spanish and Polish.

Files ``leyzer-{train,test}-{en-US,es-ES,pl-PL}-0.1.0.tsv`` (cartesinus/leyzer, corpora/0.1.0),
tab-separated with columns ``domain, intent, utterance, bio``; the label is the intent, the text
the utterance (the slot tags in ``bio`` are not used; the dev files neither). Utterances come
from grammars, so those of one intent are close paraphrases, and a few slot placeholders were
left unfilled upstream (``CALENDAR.SLOOT.LOCATION``): kept as they are.

Two forms:

* one language, ``leyzer:lang=es-ES``: that language's train and test files;
* a pair, ``leyzer:source=en-US:target=es-ES``: train = the source train items, then the
  target's; test likewise. Every item carries its language (``Split.languages``), which the
  ``language_shift`` protocol reads to fit on one language and stream the other.

Licence CC BY-NC-ND 4.0: research use only, and no modified copies may be distributed; ocrr
never bundles the files, it reads a copy you hold or downloads the upstream commit.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from ocrr.data.locate import locate
from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.errors import OcrrError

LANGUAGES = ("en-US", "es-ES", "pl-PL")
COLUMNS = ("domain", "intent", "utterance", "bio")
LICENCE = (
    "Leyzer is licensed CC BY-NC-ND 4.0: non-commercial research use only, and no modified copies "
    "may be shared. ocrr reads your copy or the upstream files; it never ships them."
)


def file_name(split: str, language: str) -> str:
    """The upstream file of one split and language: 'leyzer-train-es-ES-0.1.0.tsv'."""
    return f"leyzer-{split}-{language}-0.1.0.tsv"


def load_leyzer(
    data_dir: str | os.PathLike | None = None,
    lang: str | None = None,
    source: str | None = None,
    target: str | None = None,
) -> Dataset:
    """One language (``lang``, default en-US) or a source/target pair; see the module doc."""
    if source is None and target is None:
        languages = [lang or "en-US"]
        name = f"leyzer-{languages[0]}"
    elif lang is not None or source is None or target is None or source == target:
        raise OcrrError(
            "dataset leyzer: give either lang=L (one language) or both source=L1 and target=L2, two "
            f"different languages of {', '.join(LANGUAGES)}; e.g. leyzer:source=en-US:target=es-ES."
        )
    else:
        languages = [source, target]
        name = f"leyzer-{source}-to-{target}"
    unknown = [language for language in languages if language not in LANGUAGES]
    if unknown:
        raise OcrrError(f"dataset leyzer has no language {unknown[0]!r}; it has {', '.join(LANGUAGES)}.")
    found = locate("leyzer", data_dir)
    splits = {}
    domains: dict[str, set[str]] = {}
    for split in ("train", "test"):
        rows = [(language, row) for language in languages for row in _read(found.paths[file_name(split, language)])]
        for _, (domain, intent, _text) in rows:
            domains.setdefault(intent, set()).add(domain)
        splits[split] = Split(
            labels=tuple(row[1] for _, row in rows),
            texts=tuple(row[2] for _, row in rows),
            languages=tuple(language for language, _ in rows),
        )
    read = ", ".join(file_name(s, lang) for lang in languages for s in ("train", "test"))
    pair = "" if len(languages) == 1 else " Train and test: the source language's items, then the target's."
    notes = f"Leyzer 0.1.0 (cartesinus/leyzer @ 615ccf13): {read}.{pair} {LICENCE}"
    return make_dataset(
        name,
        train=splits["train"],
        test=splits["test"],
        # SendMessage is an intent of two domains (Slack, Twitter): its domain names both
        domains={intent: "/".join(sorted(names)) for intent, names in domains.items()},
        files={file_name(s, lang): found.sha256[file_name(s, lang)] for lang in languages for s in ("train", "test")},
        notes=notes,
    )


def _read(path: Path) -> list[tuple[str, str, str]]:
    """(domain, intent, utterance) of every row, in file order."""
    # QUOTE_NONE: an utterance's quote marks are text, never field delimiters
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, [])
        if tuple(header[:3]) != COLUMNS[:3]:
            raise OcrrError(
                f"{path} is not a Leyzer file: expected the columns {', '.join(COLUMNS)}, found "
                f"{', '.join(header) or 'none'}. Point --data-dir or OCRR_DATA_DIR at the files of "
                "cartesinus/leyzer corpora/0.1.0."
            )
        rows = []
        for line, row in enumerate(reader, start=2):
            if len(row) < 3 or not row[1] or not row[2]:
                raise OcrrError(
                    f"{path} line {line} has no intent or utterance; it is not an original Leyzer 0.1.0 "
                    "file. Replace it with the upstream copy (cartesinus/leyzer, corpora/0.1.0)."
                )
            rows.append((row[0], row[1], row[2]))
    return rows
