"""Leyzer: the loader on tiny files in the upstream layout, its two forms (one language, a
source/target pair), the dataset spec, the pinned download, and the real copies when
OCRR_DATA_DIR holds them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ocrr.data import load_dataset, locate
from ocrr.data.leyzer import LANGUAGES, file_name
from ocrr.data.locate import REMOTE_FILES, sha256_of
from ocrr.errors import OcrrError

ROWS = {  # (domain, intent, utterance, bio); SendMessage is an intent of two domains, as upstream
    "en-US": [
        ("Airconditioner", "TurnOn", "turn on the air conditioning", "o o o b-x i-x"),
        ("Slack", "SendMessage", 'send "hi" on slack', "o o o o"),
        ("Twitter", "SendMessage", "tweet hello", "o o"),
    ],
    "es-ES": [
        ("Airconditioner", "TurnOn", "enciende el aire acondicionado", "o o b-x i-x"),
        ("Slack", "SendMessage", "envía hola por slack", "o o o o"),
    ],
    "pl-PL": [("Airconditioner", "TurnOn", "włącz klimatyzację", "o b-x")],
}


def write_leyzer(folder: Path) -> Path:
    """Every train and test file of the three languages, tab-separated with the upstream header."""
    folder.mkdir(parents=True, exist_ok=True)
    for language, rows in ROWS.items():
        for split, part in (("train", rows), ("test", rows[:1])):
            lines = ["domain\tintent\tutterance\tbio"] + ["\t".join(row) for row in part]
            (folder / file_name(split, language)).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    for var in ("OCRR_DATA_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)

    def refuse(url, dest):
        raise AssertionError(f"test tried to download {url}")

    monkeypatch.setattr(locate, "fetch", refuse)


def test_one_language(tmp_path):
    write_leyzer(tmp_path / "leyzer")
    ds = load_dataset("leyzer", data_dir=tmp_path, lang="es-ES")
    assert ds.name == "leyzer-es-ES"
    assert ds.train.texts == ("enciende el aire acondicionado", "envía hola por slack")
    assert ds.train.labels == ("TurnOn", "SendMessage") and ds.train.languages == ("es-ES", "es-ES")
    assert ds.test.labels == ("TurnOn",)
    assert set(ds.files) == {file_name("train", "es-ES"), file_name("test", "es-ES")}
    assert "CC BY-NC-ND 4.0" in ds.notes
    # English by default; quotes are text, not CSV quoting
    english = load_dataset("leyzer", data_dir=tmp_path)
    assert english.name == "leyzer-en-US" and english.train.texts[1] == 'send "hi" on slack'
    assert english.domains == {"TurnOn": "Airconditioner", "SendMessage": "Slack/Twitter"}


def test_a_source_target_pair_tags_every_item_with_its_language(tmp_path):
    write_leyzer(tmp_path)  # files straight in the folder also work
    ds = load_dataset("leyzer", data_dir=tmp_path, source="en-US", target="pl-PL")
    assert ds.name == "leyzer-en-US-to-pl-PL"
    assert ds.train.languages == ("en-US",) * 3 + ("pl-PL",)
    assert ds.train.texts[-1] == "włącz klimatyzację"
    assert ds.test.languages == ("en-US", "pl-PL") and ds.labels == ("SendMessage", "TurnOn")
    assert len(ds.files) == 4


def test_the_dataset_spec_sets_the_same_options(tmp_path):
    write_leyzer(tmp_path / "leyzer")
    spec = load_dataset("leyzer:source=en-US:target=es-ES", data_dir=tmp_path)
    options = load_dataset("leyzer", data_dir=tmp_path, source="en-US", target="es-ES")
    assert spec == options
    assert load_dataset("leyzer:lang=pl-PL", data_dir=tmp_path, lang="pl-PL").name == "leyzer-pl-PL"
    with pytest.raises(OcrrError, match=r"sets lang=es-ES but it is also given as lang=pl-PL; give it once"):
        load_dataset("leyzer:lang=es-ES", data_dir=tmp_path, lang="pl-PL")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("leyzer:lang=fr-FR", r"dataset leyzer: lang must be one of en-US, es-ES, pl-PL or none, got 'fr-FR'"),
        ("leyzer:source=en-US", r"give either lang=L \(one language\) or both source=L1 and target=L2"),
        ("leyzer:source=es-ES:target=es-ES", r"two different languages"),
        ("leyzer:lang=es-ES:target=pl-PL", r"give either lang=L"),
        ("leyzer:language=es-ES", r"dataset leyzer has no option language\. Did you mean lang\?"),
    ],
)
def test_bad_options_name_the_fix(tmp_path, spec, message):
    write_leyzer(tmp_path / "leyzer")
    with pytest.raises(OcrrError, match=message):
        load_dataset(spec, data_dir=tmp_path)


def test_a_file_that_is_not_leyzer_names_the_fix(tmp_path):
    folder = write_leyzer(tmp_path / "leyzer")
    (folder / file_name("train", "en-US")).write_text("text,label\nhello,greet\n", encoding="utf-8")
    with pytest.raises(OcrrError, match=r"is not a Leyzer file: expected the columns domain, intent, utterance"):
        load_dataset("leyzer", data_dir=tmp_path)


def test_missing_files_are_downloaded_from_the_pinned_commit(tmp_path, monkeypatch):
    remote = REMOTE_FILES["leyzer"]
    assert set(remote) == {file_name(s, lang) for s in ("train", "test") for lang in LANGUAGES}
    for name, file in remote.items():
        assert file.url.endswith(f"/615ccf1398c7e32b49e089d45da824d01179c50d/corpora/0.1.0/{name}")
    monkeypatch.setenv("OCRR_OFFLINE", "1")
    with pytest.raises(OcrrError) as error:
        load_dataset("leyzer", data_dir=tmp_path)
    assert "615ccf1398c7e32b49e089d45da824d01179c50d" in str(error.value) and "DIR/leyzer/" in str(error.value)


# --- the real copies (only with OCRR_DATA_DIR holding leyzer/) ---------------------------------


def real_leyzer_dir() -> str | None:
    folder = os.environ.get("OCRR_DATA_DIR")  # read at import, before the fixture clears it
    if folder and all((Path(folder) / "leyzer" / name).is_file() for name in REMOTE_FILES["leyzer"]):
        return folder
    return None


REAL = real_leyzer_dir()
needs_leyzer = pytest.mark.skipif(
    REAL is None, reason="needs the real Leyzer 0.1.0: set OCRR_DATA_DIR to a folder holding leyzer/"
)


@needs_leyzer
def test_the_real_files_match_the_pinned_checksums_and_sizes():
    for name, file in REMOTE_FILES["leyzer"].items():
        assert sha256_of(Path(REAL) / "leyzer" / name) == file.sha256, name
    sizes = {lang: load_dataset(f"leyzer:lang={lang}", data_dir=REAL) for lang in LANGUAGES}
    assert [(len(d.train), len(d.test)) for d in sizes.values()] == [(2503, 1011), (4491, 1006), (6367, 991)]
    en, es = (set(sizes[lang].train.labels) for lang in ("en-US", "es-ES"))
    assert len(en & es) == 107
