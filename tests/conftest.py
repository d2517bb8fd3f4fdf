"""Shared fixtures: small datasets the tests make, and an isolated user cache."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ocrr.checks.data import clustered_splits
from ocrr.data.locate import REMOTE_FILES
from ocrr.data.records import Split, make_dataset
from ocrr.utils.paths import cache_root

# The real user cache, captured before tests isolate it: real-data tests reuse its embeddings
# (a fresh clone's first run encodes the real datasets once and keeps them there).
USER_CACHE = cache_root()

REAL_DATASETS = ("banking77", "clinc150")


def _real_data_dir() -> str | None:
    """Where the real Banking77 and CLINC150 are: $OCRR_DATA_DIR, else the user cache when a
    download (e.g. `ocrr embed --dataset banking77` online) put both there; else None."""
    if os.environ.get("OCRR_DATA_DIR"):
        return os.environ["OCRR_DATA_DIR"]
    cached = USER_CACHE / "data"
    found = all((cached / name / file).is_file() for name in REAL_DATASETS for file in REMOTE_FILES[name])
    return str(cached) if found else None


REAL_DATA_DIR = _real_data_dir()
NO_REAL_DATA = (
    "needs the real datasets: set OCRR_DATA_DIR to a folder holding Banking77 / CLINC150 "
    "(banking77/ and clinc150/), see docs/getting-started.md"
)
# The marks of a test module that reads the real datasets (pytestmark = REAL_DATA_MARKS).
REAL_DATA_MARKS = [pytest.mark.real_data, pytest.mark.skipif(REAL_DATA_DIR is None, reason=NO_REAL_DATA)]


def needs_real_data(test):
    """Mark one test that reads the real datasets: without them it is skipped, saying how to get them."""
    for mark in reversed(REAL_DATA_MARKS):
        test = mark(test)
    return test


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty user cache and no network downloads."""
    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("OCRR_OFFLINE", "1")


@pytest.fixture
def user_cache():
    """The real user cache, for tests that should share its embeddings across runs."""
    return USER_CACHE


def python_output(code: str) -> str:
    """What a fresh Python prints running ``code`` (which must succeed): what a module
    loads can only be seen in a process that has loaded nothing yet."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def clustered_dataset(n_classes=12, dim=16, n_train=30, n_test=10, noise=0.05, seed=0, name="toy"):
    """Well-separated clusters with texts, so both vector and text paths can be exercised."""
    train, test = clustered_splits(n_classes, dim, (n_train, n_test), noise, seed)
    return make_dataset(name, Split(*train), Split(*test))


@pytest.fixture
def toy():
    return clustered_dataset()
