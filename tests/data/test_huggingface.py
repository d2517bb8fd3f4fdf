"""Hugging Face datasets: ``--dataset hf:PATH`` on a folder ``DatasetDict.save_to_disk`` wrote
(built here, offline), and the hub form's errors when the hub cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ocrr.cli.main import main
from ocrr.data import load_dataset
from ocrr.encoders.cache import texts_sha256
from ocrr.errors import OcrrError

datasets = pytest.importorskip("datasets", reason="pip install -e '.[hf]' (the hf extra)")

TOPICS = {
    "refund": "I want my money back for order {}",
    "late": "my parcel {} has not arrived yet",
    "login": "cannot sign in to account {}",
    "invoice": "please send invoice number {}",
}


def _rows(start: int, n: int) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    for label, template in TOPICS.items():
        texts += [template.format(i) for i in range(start, start + n)]
        labels += [label] * n
    return texts, labels


def save_dict(path, *, class_label=True, splits=("train", "test"), text_col="text", label_col="label", offset=0):
    """A small intent DatasetDict saved with save_to_disk; labels as a ClassLabel or as strings."""
    names = sorted(TOPICS)
    features = datasets.Features(
        {
            text_col: datasets.Value("string"),
            label_col: datasets.ClassLabel(names=names) if class_label else datasets.Value("string"),
        }
    )
    parts = {}
    for split, (start, n) in zip(splits, ((offset, 12), (offset + 100, 4), (offset + 200, 3))):
        texts, labels = _rows(start, n)
        values = [names.index(label) for label in labels] if class_label else labels
        parts[split] = datasets.Dataset.from_dict({text_col: texts, label_col: values}, features=features)
    datasets.DatasetDict(parts).save_to_disk(str(path))
    return path


def run_cli(*args) -> int:
    return main([str(a) for a in args])


def vectors_for(dataset, path) -> None:
    """Deterministic vectors for a dataset (one cluster per label): runs without an encoder."""
    names = sorted(set(dataset.train.labels))
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(len(names), 16))

    def block(labels):
        return np.stack([centres[names.index(x)] + 0.05 * rng.normal(size=16) for x in labels]).astype(np.float32)

    np.savez(path, train=block(dataset.train.labels), test=block(dataset.test.labels))


def test_local_folder_class_labels_read_as_names(tmp_path):
    ds = load_dataset(f"hf:{save_dict(tmp_path / 'tickets')}")
    assert ds.name == "tickets"
    assert len(ds.train) == 48 and len(ds.test) == 16
    assert ds.labels == ("invoice", "late", "login", "refund")
    assert ds.train.texts[0] == "I want my money back for order 0" and ds.train.labels[0] == "refund"


def test_local_folder_string_labels(tmp_path):
    ds = load_dataset(f"hf:{save_dict(tmp_path / 'd', class_label=False)}")
    assert ds.train.labels[:2] == ("refund", "refund") and ds.labels == ("invoice", "late", "login", "refund")


def test_column_options_and_split_options(tmp_path):
    path = save_dict(tmp_path / "d", splits=("train", "validation"), text_col="utterance", label_col="intent")
    ds = load_dataset(f"hf:{path}", text_col="utterance", label_col="intent", test_split="validation")
    assert len(ds.test) == 16 and ds.test.labels[0] == "refund"


def test_files_record_a_content_hash_per_split(tmp_path):
    """Two folders with other texts get other identities (and other embedding-cache keys)."""
    one = load_dataset(f"hf:{save_dict(tmp_path / 'a')}")
    two = load_dataset(f"hf:{save_dict(tmp_path / 'b', offset=1000)}")
    again = load_dataset(f"hf:{save_dict(tmp_path / 'c', class_label=False)}")
    assert set(one.files) == {"a[train]", "a[test]"}
    assert one.files["a[train]"] != two.files["b[train]"]
    assert one.files["a[train]"] == again.files["c[train]"]  # the same rows, saved another way
    key = texts_sha256
    assert key([*one.train.texts, *one.test.texts]) != key([*two.train.texts, *two.test.texts])


def test_run_end_to_end_through_the_cli(tmp_path):
    path = save_dict(tmp_path / "tickets")
    vectors_for(load_dataset(f"hf:{path}"), tmp_path / "vecs.npz")
    out = tmp_path / "r"
    code = run_cli(
        "run",
        "--dataset",
        f"hf:{path}",
        "--encoder",
        f"precomputed:{tmp_path / 'vecs.npz'}",
        "--systems",
        "substrate",
        "--heldout",
        "2",
        "--every",
        "5",
        "--seeds",
        "0",
        "--jobs",
        "1",
        "--quiet",
        "--out",
        out,
    )
    assert code == 0
    per = pd.read_csv(out / "per_checkpoint.csv")
    assert per["acc_novel"].iloc[-1] == 1.0
    config = json.loads((out / "config.json").read_text())
    assert f"hf:{path}" in json.dumps(config) and "tickets[train]" in json.dumps(config)


def test_run_with_renamed_columns_and_splits_through_the_cli(tmp_path):
    path = save_dict(tmp_path / "d", splits=("train", "validation"), text_col="utterance", label_col="intent")
    dataset = load_dataset(f"hf:{path}", text_col="utterance", label_col="intent", test_split="validation")
    vectors_for(dataset, tmp_path / "vecs.npz")
    args = ["--text-col", "utterance", "--label-col", "intent", "--data-option", "test_split=validation"]
    out = tmp_path / "r"
    code = run_cli(
        "run",
        "--dataset",
        f"hf:{path}",
        *args,
        "--encoder",
        f"precomputed:{tmp_path / 'vecs.npz'}",
        "--systems",
        "substrate",
        "--heldout",
        "2",
        "--seeds",
        "0",
        "--jobs",
        "1",
        "--quiet",
        "--out",
        out,
    )
    assert code == 0 and (out / "summary.csv").is_file()


def expect_error(spec: str, *fragments: str, **options) -> str:
    with pytest.raises(OcrrError) as caught:
        load_dataset(spec, **options)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "Traceback" not in message
    return message


def test_datasets_not_installed_names_the_extra(tmp_path, monkeypatch):
    path = save_dict(tmp_path / "d")
    monkeypatch.setitem(sys.modules, "datasets", None)  # what `import datasets` meets when it is absent
    expect_error(f"hf:{path}", "pip install -e '.[hf]'")


def test_no_such_local_folder(tmp_path):
    expect_error(f"hf:{tmp_path / 'missing'}", "No folder", str(tmp_path / "missing"), "save_to_disk")


def test_folder_that_is_not_a_saved_dataset(tmp_path):
    (tmp_path / "plain").mkdir()
    expect_error(f"hf:{tmp_path / 'plain'}", "not a dataset folder", "save_to_disk")


def test_a_single_saved_split_is_refused(tmp_path):
    datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["x", "y"]}).save_to_disk(str(tmp_path / "one"))
    expect_error(f"hf:{tmp_path / 'one'}", "one split", "DatasetDict")


def test_missing_split_lists_the_splits_and_the_option(tmp_path):
    path = save_dict(tmp_path / "d", splits=("train", "validation"))
    message = expect_error(f"hf:{path}", "no split 'test'", "'train', 'validation'", "test_split=validation")
    assert "--data-option" in message


def test_missing_column_lists_the_columns(tmp_path):
    path = save_dict(tmp_path / "d", text_col="utterance", label_col="intent")
    expect_error(f"hf:{path}", "no column 'text'", "'utterance', 'intent'", "--text-col")
    expect_error(f"hf:{path}", "no column 'label'", "--label-col", text_col="utterance")


def test_unlabelled_rows_are_named(tmp_path):
    """GLUE-style test splits mark missing labels with -1."""
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["a", "b"])})
    train = datasets.Dataset.from_dict({"text": ["x", "y", "z"], "label": [0, 1, 0]}, features=features)
    test = datasets.Dataset.from_dict({"text": ["u", "v"], "label": [-1, 1]}, features=features)
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "d"))
    expect_error(f"hf:{tmp_path / 'd'}", "test split", "no label", "row 0")


def test_a_non_text_column_is_refused(tmp_path):
    data = {"text": [1, 2, 3, 4], "label": ["a", "b", "a", "b"]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(data) for s in ("train", "test")}).save_to_disk(
        str(tmp_path / "d")
    )
    expect_error(f"hf:{tmp_path / 'd'}", "'text'", "not text", "--text-col")


def test_a_multi_label_column_is_refused(tmp_path):
    data = {"text": ["a", "b"], "label": [["x"], ["x", "y"]]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(data) for s in ("train", "test")}).save_to_disk(
        str(tmp_path / "d")
    )
    expect_error(f"hf:{tmp_path / 'd'}", "'label'", "not one label per row", "--label-col")


def test_unknown_option_is_refused(tmp_path):
    expect_error(f"hf:{save_dict(tmp_path / 'd')}", "has no option test_fraction", test_fraction=0.2)


def test_hub_refused_under_ocrr_offline():
    expect_error("hf:someone/intents", "OCRR_OFFLINE=1", "hf:PATH", "save_to_disk")


@pytest.mark.parametrize("value, off", [("1", True), ("on", True), ("0", False), ("off", False), ("", False)])
def test_ocrr_offline_is_on_or_off_and_nothing_else(value, off, monkeypatch):
    """A value that is neither (a typo) is refused, not read as "online": it would download."""
    from ocrr.data.locate import offline

    monkeypatch.setenv("OCRR_OFFLINE", value)
    assert offline() is off
    monkeypatch.setenv("OCRR_OFFLINE", "maybe")
    with pytest.raises(OcrrError, match="OCRR_OFFLINE='maybe' is neither on nor off: set it to 1"):
        offline()
    expect_error("hf:someone/intents", "OCRR_OFFLINE='maybe' is neither on nor off")


def test_hub_offline_says_so_and_points_at_a_local_folder(tmp_path):
    """HF_HUB_OFFLINE=1 is read when the hub library loads: a fresh ``ocrr`` process, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "OCRR_OFFLINE"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "run", "--dataset", "hf:someone/intents:plus", "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "HF_HUB_OFFLINE" in done.stderr and "hf:PATH" in done.stderr and "someone/intents" in done.stderr
