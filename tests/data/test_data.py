"""Dataset loaders, file look-up and downloads, on tiny files in the real formats.

No test touches the network: ``locate.fetch`` is replaced for every test, and
the real Banking77/CLINC150 copies are read only by the ``real_data`` test.
"""

from __future__ import annotations

import csv
import hashlib
import json
import urllib.error
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import REAL_DATA_DIR, needs_real_data

from ocrr.data import DATASETS, Dataset, Split, check_dataset, load_dataset, locate
from ocrr.data.banking77 import load_banking77
from ocrr.data.clinc150 import load_clinc150
from ocrr.data.demo import load_demo
from ocrr.data.locate import RemoteFile, cache_dir
from ocrr.data.synthetic import MAX_ROWS, MAX_VALUES, make_synthetic
from ocrr.data.tabular import load_table
from ocrr.errors import OcrrError

# Read before the autouse fixture clears it / replaces it for the other tests.
REAL_FETCH = locate.fetch


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No user env leaks in, the cache is private, and downloads fail loudly."""
    for var in ("OCRR_DATA_DIR", "OCRR_OFFLINE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path / "ocrr-cache"))

    def no_network(url, dest):
        raise AssertionError(f"test tried to download {url}")

    monkeypatch.setattr(locate, "fetch", no_network)


# --- writers for tiny files in the real formats ------------------------------

BANKING_TRAIN = [
    ("I am still waiting on my card?", "card_arrival"),
    ('What\'s the "exchange rate", please?', "exchange_rate"),
    ("NA", "age_limit"),  # must stay the string "NA", not NaN
    ("my card, it never came", "card_arrival"),
]
BANKING_TEST = [("null", "exchange_rate"), ("How old must I be?", "age_limit")]


def write_banking(folder: Path, train=BANKING_TRAIN, test=BANKING_TEST) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.csv", train), ("test.csv", test)):
        with open(folder / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "category"])
            writer.writerows(rows)
    return folder


CLINC = {
    "train": [["set an alarm", "alarm"], ["what is my balance", "balance"], ["wake me at 7", "alarm"]],
    "oos_train": [["how tall is everest", "oos"]],
    "val": [["val item", "alarm"]],
    "oos_val": [["val oos", "oos"]],
    "test": [["balance please", "balance"], ["alarm for noon", "alarm"]],
    "oos_test": [["who won the game", "oos"], ["sing a song", "oos"]],
}
CLINC_DOMAINS = {"utility": ["alarm"], "banking": ["balance"]}


def write_clinc(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data_oos_plus.json").write_text(json.dumps(CLINC), encoding="utf-8")
    (folder / "domains.json").write_text(json.dumps(CLINC_DOMAINS), encoding="utf-8")
    return folder


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- Banking77 ----------------------------------------------------------------


def test_banking77_keeps_file_order_sorts_labels_and_records_sha(tmp_path):
    folder = write_banking(tmp_path / "data" / "banking77")
    ds = load_banking77(tmp_path / "data")

    assert isinstance(ds, Dataset) and ds.name == "banking77"
    assert ds.train.texts == tuple(t for t, _ in BANKING_TRAIN)
    assert ds.train.labels == tuple(c for _, c in BANKING_TRAIN)
    assert ds.test.texts == ("null", "How old must I be?")
    assert ds.labels == ("age_limit", "card_arrival", "exchange_rate")
    assert ds.files == {"train.csv": sha(folder / "train.csv"), "test.csv": sha(folder / "test.csv")}
    assert ds.has_text and ds.train.vecs is None


def test_banking77_accepts_flat_layout(tmp_path):
    write_banking(tmp_path / "flat")
    ds = load_banking77(tmp_path / "flat")
    assert len(ds.train) == len(BANKING_TRAIN) and len(ds.test) == len(BANKING_TEST)


def test_banking77_wrong_columns_is_a_clear_error(tmp_path):
    folder = tmp_path / "banking77"
    folder.mkdir()
    (folder / "train.csv").write_text("sentence,intent\nhi,greet\n", encoding="utf-8")
    (folder / "test.csv").write_text("sentence,intent\nhi,greet\n", encoding="utf-8")
    with pytest.raises(OcrrError, match="expected columns text,category, found sentence,intent"):
        load_banking77(tmp_path)


# --- CLINC150 -----------------------------------------------------------------


def test_clinc150_plus_keeps_oos_as_a_class(tmp_path):
    write_clinc(tmp_path / "clinc150")
    ds = load_clinc150(tmp_path)

    assert ds.name == "clinc150"
    # train + oos_train, then test + oos_test, each in file order; val unused.
    assert ds.train.texts == ("set an alarm", "what is my balance", "wake me at 7", "how tall is everest")
    assert ds.train.labels == ("alarm", "balance", "alarm", "oos")
    assert ds.test.texts == ("balance please", "alarm for noon", "who won the game", "sing a song")
    assert ds.labels == ("alarm", "balance", "oos")
    assert ds.domains == {"alarm": "utility", "balance": "banking", "oos": "oos"}
    assert set(ds.files) == {"data_oos_plus.json", "domains.json"}


def test_clinc150_can_drop_oos(tmp_path):
    write_clinc(tmp_path)  # flat layout
    ds = load_clinc150(tmp_path, oos=False)

    assert ds.train.labels == ("alarm", "balance", "alarm")
    assert ds.test.texts == ("balance please", "alarm for noon")
    assert ds.labels == ("alarm", "balance")
    assert "oos" not in ds.domains


def test_clinc150_oos_option_must_be_a_bool(tmp_path):
    write_clinc(tmp_path)
    with pytest.raises(OcrrError, match="oos must be True or False"):
        load_clinc150(tmp_path, oos="false")


# --- where files are found ----------------------------------------------------


def test_lookup_order_data_dir_then_env_then_cache(tmp_path, monkeypatch):
    explicit = write_banking(tmp_path / "explicit" / "banking77", train=[("from explicit", "a")])
    env = write_banking(tmp_path / "env" / "banking77", train=[("from env", "a")])
    write_banking(cache_dir() / "banking77", train=[("from cache", "a")])
    monkeypatch.setenv("OCRR_DATA_DIR", str(env.parent))

    found = locate.locate("banking77", explicit.parent)
    assert found.source == "data_dir" and found.paths["train.csv"] == explicit / "train.csv"
    assert load_banking77(explicit.parent).train.texts == ("from explicit",)

    assert locate.locate("banking77").source == "OCRR_DATA_DIR"
    assert load_banking77().train.texts == ("from env",)

    monkeypatch.delenv("OCRR_DATA_DIR")
    assert locate.locate("banking77").source == "cache"
    assert load_banking77().train.texts == ("from cache",)


def test_a_folder_without_the_dataset_is_passed_over(tmp_path):
    write_clinc(tmp_path / "only-clinc" / "clinc150")
    write_banking(cache_dir() / "banking77", train=[("from cache", "a")])
    found = locate.locate("banking77", tmp_path / "only-clinc")
    assert found.source == "cache"


def test_a_folder_must_hold_all_files_in_one_place(tmp_path):
    # train.csv nested, test.csv flat: neither layout is complete.
    write_banking(tmp_path / "mixed" / "banking77")
    (tmp_path / "mixed" / "banking77" / "test.csv").rename(tmp_path / "mixed" / "test.csv")
    write_banking(cache_dir() / "banking77")
    assert locate.locate("banking77", tmp_path / "mixed").source == "cache"


@pytest.mark.parametrize("via_env", [False, True])
def test_missing_data_folder_is_an_error(tmp_path, monkeypatch, via_env):
    missing = tmp_path / "no-such-dir"
    if via_env:
        monkeypatch.setenv("OCRR_DATA_DIR", str(missing))
        with pytest.raises(OcrrError, match="OCRR_DATA_DIR does not exist"):
            load_banking77()
    else:
        with pytest.raises(OcrrError, match="--data-dir does not exist"):
            load_banking77(missing)


@pytest.mark.parametrize("via_env", [False, True])
def test_a_data_folder_that_is_a_file_is_called_one(tmp_path, monkeypatch, via_env):
    """--data-dir /etc/passwd said "does not exist"."""
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    option = "OCRR_DATA_DIR" if via_env else "--data-dir"
    if via_env:
        monkeypatch.setenv("OCRR_DATA_DIR", str(afile))
    for attempt in (
        lambda: load_banking77(None if via_env else afile),
        lambda: check_dataset("banking77", data_dir=None if via_env else afile),
    ):
        with pytest.raises(OcrrError, match=f"given by {option} is a file, not a folder: .*afile. Give the folder"):
            attempt()


def test_check_dataset_refuses_what_locating_the_files_would(tmp_path, monkeypatch):
    """What a sweep's dry run checks: the data folder, and the files when downloads are off."""
    with pytest.raises(OcrrError, match="given by --data-dir does not exist"):
        check_dataset("clinc150", data_dir=tmp_path / "nowhere")
    check_dataset("clinc150")  # not found anywhere, but a run could download them
    monkeypatch.setenv("OCRR_OFFLINE", "1")
    with pytest.raises(OcrrError, match="The clinc150 files were not found and could not be downloaded"):
        check_dataset("clinc150", data_dir=tmp_path)
    write_banking(tmp_path / "banking77")
    check_dataset("banking77", data_dir=tmp_path)  # found: nothing to download
    assert not cache_dir().exists()  # nothing read, nothing made


def test_cache_dir_precedence(monkeypatch, tmp_path):
    assert cache_dir() == tmp_path / "ocrr-cache" / "data"
    monkeypatch.delenv("OCRR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "ocrr" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "ocrr" / "data"


# --- downloads (fetch replaced; never the network) -----------------------------

FAKE_TRAIN = b"text,category\nhello there,greeting\nbye now,farewell\n"
FAKE_TEST = b"text,category\nhi,greeting\n"


def fake_upstream(monkeypatch, bodies: dict[str, bytes], *, pin_sha: bool = True) -> list[str]:
    """Serve ``bodies`` (file name -> bytes) for banking77; return the URLs fetched."""
    remote = locate.REMOTE_FILES["banking77"]
    by_url = {remote[name].url: body for name, body in bodies.items()}
    if pin_sha:
        for name, body in bodies.items():
            pinned = RemoteFile(remote[name].url, hashlib.sha256(body).hexdigest())
            monkeypatch.setitem(remote, name, pinned)
    fetched: list[str] = []

    def fetch(url, dest):
        fetched.append(url)
        Path(dest).write_bytes(by_url[url])

    monkeypatch.setattr(locate, "fetch", fetch)
    return fetched


def test_download_verifies_and_fills_the_cache(monkeypatch):
    fetched = fake_upstream(monkeypatch, {"train.csv": FAKE_TRAIN, "test.csv": FAKE_TEST})
    ds = load_banking77()

    assert ds.train.texts == ("hello there", "bye now") and ds.test.labels == ("greeting",)
    assert (cache_dir() / "banking77" / "train.csv").read_bytes() == FAKE_TRAIN
    assert sorted(p.name for p in (cache_dir() / "banking77").iterdir()) == ["test.csv", "train.csv"]
    assert len(fetched) == 2
    assert ds.files["train.csv"] == hashlib.sha256(FAKE_TRAIN).hexdigest()

    load_banking77()  # now served from the cache
    assert len(fetched) == 2


def test_download_only_fetches_files_missing_from_the_cache(monkeypatch):
    write_banking(cache_dir() / "banking77")
    (cache_dir() / "banking77" / "test.csv").unlink()
    fetched = fake_upstream(monkeypatch, {"test.csv": FAKE_TEST})
    ds = load_banking77()
    assert fetched == [locate.REMOTE_FILES["banking77"]["test.csv"].url]
    assert ds.test.texts == ("hi",) and ds.train.texts[0] == BANKING_TRAIN[0][0]


def test_sha_mismatch_raises_and_leaves_nothing_in_the_cache(monkeypatch):
    fake_upstream(monkeypatch, {"train.csv": b"tampered", "test.csv": FAKE_TEST}, pin_sha=False)
    with pytest.raises(OcrrError) as error:
        load_banking77()
    message = str(error.value)
    assert "sha256" in message and locate.REMOTE_FILES["banking77"]["train.csv"].url in message
    assert "--data-dir" in message and "OCRR_DATA_DIR" in message
    leftovers = [p for p in cache_dir().rglob("*") if p.is_file()] if cache_dir().exists() else []
    assert leftovers == []


def test_offline_gives_one_error_naming_urls_and_both_fixes(monkeypatch):
    calls = []

    def offline(url, dest):
        calls.append(url)
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(locate, "fetch", offline)
    with pytest.raises(OcrrError) as error:
        load_clinc150()
    message = str(error.value)
    for remote in locate.REMOTE_FILES["clinc150"].values():
        assert remote.url in message
    assert "--data-dir DIR" in message and "OCRR_DATA_DIR=DIR" in message
    assert "DIR/clinc150/data_oos_plus.json" in message  # the expected layout
    assert str(cache_dir() / "clinc150") in message
    assert "no route to host" in message
    assert len(calls) == 1  # gives up at the first failure instead of timing out per file
    assert not any(p.is_file() for p in (cache_dir() / "clinc150").iterdir())


def test_ocrr_offline_forbids_downloads(monkeypatch):
    monkeypatch.setenv("OCRR_OFFLINE", "1")  # the autouse fetch would fail the test if called
    with pytest.raises(OcrrError, match="OCRR_OFFLINE=1") as error:
        load_banking77()
    assert locate.REMOTE_FILES["banking77"]["train.csv"].url in str(error.value)


def test_real_fetch_copies_a_url_to_a_file(tmp_path):
    # The un-mocked downloader, exercised on a file:// URL instead of the network.
    source = tmp_path / "source.bin"
    source.write_bytes(b"\x00payload\xff" * 1000)
    dest = tmp_path / "dest.bin"
    REAL_FETCH(source.as_uri(), dest)
    assert dest.read_bytes() == source.read_bytes()


# --- synthetic ----------------------------------------------------------------


def test_synthetic_shapes_labels_and_unit_norms():
    ds = make_synthetic(n_classes=12, dim=16, n_train_per_class=5, n_test_per_class=3, sigma=0.2, seed=1)

    assert ds.name == "synthetic" and not ds.has_text and ds.train.texts is None
    assert ds.train.vecs.shape == (60, 16) and ds.test.vecs.shape == (36, 16)
    assert ds.train.vecs.dtype == np.float32
    assert ds.labels == tuple(f"c{k:03d}" for k in range(12))
    # class order within each split: class 0's items first
    assert ds.train.labels == tuple(f"c{k:03d}" for k in range(12) for _ in range(5))
    for split in (ds.train, ds.test):
        np.testing.assert_allclose(np.linalg.norm(split.vecs, axis=1), 1.0, atol=1e-5)


def test_synthetic_is_deterministic_per_seed():
    a, b, c = make_synthetic(seed=3), make_synthetic(seed=3), make_synthetic(seed=4)
    np.testing.assert_array_equal(a.train.vecs, b.train.vecs)
    np.testing.assert_array_equal(a.test.vecs, b.test.vecs)
    assert not np.allclose(a.train.vecs, c.train.vecs)


def test_synthetic_label_padding_keeps_sorted_order_numeric():
    ds = make_synthetic(n_classes=1001, dim=4, n_train_per_class=1, n_test_per_class=1)
    assert ds.labels[0] == "c0000" and ds.labels[-1] == "c1000"
    assert list(ds.train.labels) == list(ds.labels)


def test_synthetic_small_sigma_items_sit_next_to_their_class():
    ds = make_synthetic(n_classes=10, dim=32, sigma=0.01, seed=0)
    train_labels = np.array(ds.train.labels)
    means = np.stack([ds.train.vecs[train_labels == label].mean(axis=0) for label in ds.labels])
    predicted = np.array(ds.labels)[np.argmax(ds.test.vecs @ means.T, axis=1)]
    assert (predicted == np.array(ds.test.labels)).all()


@pytest.mark.parametrize(
    "bad",
    [
        {"n_classes": 1},
        {"dim": 0},
        {"dim": 100_000_000},
        {"n_train_per_class": 2.5},
        {"sigma": -0.1},
        {"seed": 0, "sigma": "x"},
    ],
)
def test_synthetic_rejects_bad_options(bad):
    with pytest.raises(OcrrError, match="synthetic option"):
        make_synthetic(**bad)


@pytest.mark.parametrize(
    "sizes, bound, fix",
    [
        ({"n_classes": 10**9}, f"{MAX_ROWS:,} it generates at most", "Pass a smaller n_classes"),
        ({"n_classes": 2, "n_train_per_class": 10**12}, f"{MAX_ROWS:,} it generates at most", "n_train_per_class"),
        ({"n_classes": 2, "n_test_per_class": 10**12}, f"{MAX_ROWS:,} it generates at most", "n_test_per_class"),
        (
            {"n_classes": 10**5, "dim": 1 << 16, "n_train_per_class": 1, "n_test_per_class": 1},
            f"{MAX_VALUES:,} it generates at most",
            "Pass a smaller dim",
        ),
    ],
)
def test_synthetic_refuses_more_rows_or_values_than_it_generates_at_most(sizes, bound, fix):
    """Refused before anything is drawn: the sizes are far past what memory holds."""
    with pytest.raises(OcrrError, match="synthetic options give") as refused:
        make_synthetic(**sizes)
    assert bound in str(refused.value) and fix in str(refused.value)
    with pytest.raises(OcrrError, match=bound):
        check_dataset("synthetic", **sizes)  # the door `ocrr run` and `ocrr sweep` go through


def test_synthetic_bounds_count_train_and_test_and_the_defaults_at_the_door():
    """``check_dataset`` (and ``load_dataset`` first of all) refuses, without drawing anything,
    a dataset one row past the bound, counting the per-class sizes not given at their defaults."""
    at_most = MAX_ROWS // 100
    check_dataset("synthetic", n_classes=at_most, n_train_per_class=80, n_test_per_class=20)  # exactly the bound
    for over in (
        {"n_classes": at_most, "n_train_per_class": 80, "n_test_per_class": 21},
        {"n_classes": at_most + 1, "n_train_per_class": 80, "n_test_per_class": 20},
        {"n_classes": MAX_ROWS // 70 + 1},  # 50 train + 20 test per class by default
    ):
        with pytest.raises(OcrrError, match=f"more than the {MAX_ROWS:,} it generates at most"):
            check_dataset("synthetic", **over)
    with pytest.raises(OcrrError, match=f"more than the {MAX_ROWS:,} it generates at most"):
        check_dataset(f"synthetic:n_classes={MAX_ROWS // 70 + 1}")  # given in the spec
    widest = {"dim": 1 << 16, "n_train_per_class": 100, "n_test_per_class": 28}  # 128 rows per class
    check_dataset("synthetic", n_classes=MAX_VALUES // (1 << 16) // 128, **widest)  # exactly the bound
    with pytest.raises(OcrrError, match=f"values, more than the {MAX_VALUES:,} it generates at most"):
        check_dataset("synthetic", n_classes=MAX_VALUES // (1 << 16) // 128 + 1, **widest)


# --- user tables ----------------------------------------------------------------


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_table_csv_with_test_file(tmp_path):
    train = write_csv(tmp_path / "mine.csv", ["text", "label"], [["reset password", "auth"], ["NA", "billing"]])
    test = write_csv(tmp_path / "mine_test.csv", ["text", "label"], [["refund", "billing"]])
    ds = load_table(train, test)

    assert ds.name == "mine"
    assert ds.train.texts == ("reset password", "NA") and ds.train.labels == ("auth", "billing")
    assert ds.test.texts == ("refund",)
    assert ds.labels == ("auth", "billing")
    assert ds.files == {"mine.csv": sha(train), "mine_test.csv": sha(test)}


def test_table_jsonl_with_custom_columns_and_name(tmp_path):
    rows = [{"q": "where is my order", "intent": "shipping", "id": 1}, {"q": "cancel it", "intent": 7}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    test = write_jsonl(tmp_path / "test.jsonl", [{"q": "track parcel", "intent": "shipping"}])
    ds = load_table(train, test, text_col="q", label_col="intent", name="shop")

    assert ds.name == "shop"
    assert ds.train.labels == ("shipping", "7")  # labels are strings whatever the JSON type
    assert ds.labels == ("7", "shipping")


def test_table_same_file_names_in_two_folders_keep_both_hashes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    train = write_csv(tmp_path / "a" / "data.csv", ["text", "label"], [["x", "p"], ["y", "q"]])
    test = write_csv(tmp_path / "b" / "data.csv", ["text", "label"], [["z", "p"]])
    assert load_table(train, test).files == {str(train): sha(train), str(test): sha(test)}


def test_table_random_split_is_seeded_and_keeps_file_order(tmp_path):
    rows = [{"text": f"item {i}", "label": f"l{i % 3}"} for i in range(20)]
    path = write_jsonl(tmp_path / "all.jsonl", rows)
    ds = load_table(path, test_fraction=0.25, seed=5)

    assert len(ds.test) == 5 and len(ds.train) == 15
    index = lambda texts: [int(t.split()[1]) for t in texts]  # noqa: E731
    assert index(ds.train.texts) == sorted(index(ds.train.texts))
    assert index(ds.test.texts) == sorted(index(ds.test.texts))
    assert sorted(index(ds.train.texts) + index(ds.test.texts)) == list(range(20))
    # the test set is exactly default_rng(seed).permutation's first 5 rows
    assert index(ds.test.texts) == sorted(np.random.default_rng(5).permutation(20)[:5].tolist())
    assert load_table(path, test_fraction=0.25, seed=5).test.texts == ds.test.texts
    assert load_table(path, test_fraction=0.25, seed=6).test.texts != ds.test.texts


def test_table_reads_a_json_array_too(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"text": "a", "label": "x"}, {"text": "b", "label": "y"}]), encoding="utf-8")
    ds = load_table(path, test_fraction=0.5)
    assert len(ds.train) == 1 and len(ds.test) == 1 and ds.labels == ("x", "y")


def test_table_missing_file(tmp_path):
    with pytest.raises(OcrrError, match="File not found: .*nope.csv"):
        load_table(tmp_path / "nope.csv")
    with pytest.raises(OcrrError, match="is a folder; give the CSV or JSON-lines file"):
        load_table(tmp_path)
    for dataset in ("jsonl:/dev/null", "csv:/dev/null"):  # said "File not found"
        with pytest.raises(OcrrError, match=r"/dev/null is not a regular file \(a device, pipe or socket\); give"):
            load_dataset(dataset)


def test_table_unknown_extension(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("text,label\na,b\n", encoding="utf-8")
    with pytest.raises(OcrrError, match=r"unknown extension '\.txt'.*\.csv.*\.jsonl"):
        load_table(path)


def test_table_missing_column_lists_columns_and_option(tmp_path):
    path = write_csv(tmp_path / "d.csv", ["utterance", "label"], [["a", "x"], ["b", "y"]])
    with pytest.raises(OcrrError) as error:
        load_table(path)
    message = str(error.value)
    assert "no column 'text'" in message and "'utterance', 'label'" in message
    assert message.endswith("--text-col.")
    with pytest.raises(OcrrError, match="no column 'intent'.*--label-col"):
        load_table(path, text_col="utterance", label_col="intent")


def test_table_empty_cells_give_row_numbers(tmp_path):
    csv_path = write_csv(tmp_path / "d.csv", ["text", "label"], [["a", "x"], ["", "y"], ["c", "x"], ["  ", "y"]])
    with pytest.raises(OcrrError, match=r"empty 'text' cells at rows 3, 5 \(the header is row 1\)"):
        load_table(csv_path)

    rows = [{"text": "a", "label": "x"}, {"text": "b", "label": ""}, {"text": "c", "label": None}, {"text": "d"}]
    jsonl_path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(OcrrError, match="empty 'label' cells at lines 2, 3, 4"):
        load_table(jsonl_path)


def test_table_needs_two_classes(tmp_path):
    path = write_csv(tmp_path / "d.csv", ["text", "label"], [["a", "x"], ["b", "x"], ["c", "x"]])
    with pytest.raises(OcrrError, match="only 1 class \\('x'\\).*at least 2"):
        load_table(path)


def test_table_bad_json_line_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(OcrrError, match="line 2 is not valid JSON"):
        load_table(path)


@pytest.mark.parametrize("fraction", [0.0, 1.0, 0.01])
def test_table_split_fraction_must_leave_rows_on_both_sides(tmp_path, fraction):
    path = write_csv(tmp_path / "d.csv", ["text", "label"], [["a", "x"], ["b", "y"], ["c", "x"]])
    with pytest.raises(OcrrError, match="test.fraction|test file"):
        load_table(path, test_fraction=fraction)


# --- demo ---------------------------------------------------------------------


def test_demo_loads_twenty_intents():
    assert resources.files("ocrr.data").joinpath("demo/helpdesk.jsonl").is_file()  # package data, in every install
    ds = load_demo()
    assert ds.name == "demo" and ds.has_text
    assert len(ds.labels) == 20
    assert len(ds.train) > 0 and len(ds.test) > 0
    assert set(ds.test.labels) <= set(ds.train.labels)  # every test intent was taught
    assert "bundled" in ds.notes and "written for this project" in ds.notes
    assert list(ds.files) == ["helpdesk.jsonl"]


# --- load_dataset -------------------------------------------------------------


def test_load_dataset_dispatches_builtins(tmp_path):
    write_banking(tmp_path / "banking77")
    write_clinc(tmp_path / "clinc150")
    assert load_dataset("banking77", data_dir=tmp_path).name == "banking77"
    assert load_dataset("clinc150", data_dir=tmp_path, oos=False).labels == ("alarm", "balance")
    ds = load_dataset("synthetic", n_classes=3, dim=8, n_train_per_class=2, n_test_per_class=1)
    assert ds.train.vecs.shape == (6, 8)
    assert list(DATASETS) == ["banking77", "clinc150", "leyzer", "synthetic", "demo"]
    assert Split is ds.train.__class__


def test_load_dataset_user_files(tmp_path):
    train = write_csv(tmp_path / "tr.csv", ["text", "label"], [["a", "x"], ["b", "y"]])
    test = write_csv(tmp_path / "te.csv", ["text", "label"], [["c", "x"]])
    ds = load_dataset(f"csv:{train},{test}")
    assert ds.train.texts == ("a", "b") and ds.test.texts == ("c",)

    # The prefix sets the format, whatever the extension says.
    odd = write_jsonl(tmp_path / "rows.txt", [{"t": "a", "l": "x"}, {"t": "b", "l": "y"}, {"t": "c", "l": "x"}])
    ds = load_dataset(f"jsonl:{odd}", text_col="t", label_col="l", test_fraction=0.34, seed=0)
    assert len(ds.train) == 2 and len(ds.test) == 1

    jsonl = write_jsonl(tmp_path / "plain.jsonl", [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}])
    assert load_dataset(str(jsonl), test_fraction=0.5).name == "plain"


def test_load_dataset_unknown_name_lists_valid_names():
    with pytest.raises(OcrrError) as error:
        load_dataset("banking78")
    message = str(error.value)
    for name in DATASETS:
        assert name in message
    assert "csv:TRAIN[,TEST]" in message


def test_load_dataset_rejects_unknown_options():
    with pytest.raises(OcrrError, match="dataset banking77 has no option oos. Its options: none."):
        load_dataset("banking77", oos=False)
    with pytest.raises(OcrrError, match="dataset synthetic has no option n_class. Did you mean n_classes?"):
        load_dataset("synthetic", n_class=3)


# --- the real files (only with OCRR_DATA_DIR) ---------------------------------


@needs_real_data
def test_real_banking77_and_clinc150():
    banking = load_dataset("banking77", data_dir=REAL_DATA_DIR)
    assert (len(banking.train), len(banking.test), len(banking.labels)) == (10003, 3080, 77)
    assert all(isinstance(t, str) and t for t in banking.train.texts + banking.test.texts)
    expected = {name: f.sha256 for name, f in locate.REMOTE_FILES["banking77"].items()}
    assert banking.files == expected  # the embedded download hashes match these copies

    clinc = load_dataset("clinc150", data_dir=REAL_DATA_DIR)
    assert (len(clinc.train), len(clinc.test), len(clinc.labels)) == (15250, 5500, 151)
    assert clinc.train.labels[-250:] == ("oos",) * 250 and clinc.test.labels[-1000:] == ("oos",) * 1000
    assert len(set(clinc.domains.values()) - {"oos"}) == 10 and set(clinc.domains) == set(clinc.labels)
    assert clinc.files == {name: f.sha256 for name, f in locate.REMOTE_FILES["clinc150"].items()}

    in_scope = load_dataset("clinc150", data_dir=REAL_DATA_DIR, oos=False)
    assert (len(in_scope.train), len(in_scope.test), len(in_scope.labels)) == (15000, 4500, 150)


def test_user_files_take_a_name_option(tmp_path):
    """`--data-option name=X` names user data (the loader's own `name`, not load_dataset's)."""
    rows = "text,label\nhello there,greet\nhi,greet\nbye now,leave\nsee you,leave\n"
    (tmp_path / "a.csv").write_text(rows)
    (tmp_path / "b.csv").write_text(rows)
    data = load_dataset(f"csv:{tmp_path / 'a.csv'},{tmp_path / 'b.csv'}", name="helpdesk")
    assert data.name == "helpdesk"
    assert sorted(set(data.train.labels)) == ["greet", "leave"]


def test_table_refuses_one_column_for_both_text_and_label(tmp_path):
    """--text-col label --label-col label would learn to echo each label: refused, naming both options."""
    path = write_csv(tmp_path / "d.csv", ["text", "label"], [["a", "x"], ["b", "y"]])
    with pytest.raises(OcrrError, match=r"--text-col and --label-col both name the column 'label'"):
        load_table(path, text_col="label", label_col="label")
