"""Plug-ins from another package, found through entry points (ocrr.registry).

A tiny distribution is written and really installed (pip, offline, into a folder put on
sys.path): a system, a protocol, a dataset, an encoder, and one system whose module does not
exist. Each registry then lists and builds them like the built-ins; the broken one fails with
one message naming its package and the fix, and lists of the others still work.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.data import DATASETS, load_dataset
from ocrr.encoders import make_encoder
from ocrr.encoders.registry import ENCODERS
from ocrr.errors import OcrrError
from ocrr.protocols import PROTOCOLS, make_protocol
from ocrr.systems.registry import REGISTRY, make_system, options_of

PLUGIN = '''
"""A plug-in package for ocrr, as a third party would write one."""

import numpy as np

from ocrr.batch import Batch
from ocrr.data.synthetic import make_synthetic
from ocrr.protocols import HeldoutProtocol
from ocrr.specs import Option
from ocrr.systems import Footprint, System


class NearestSeen(System):
    """The label of the nearest of every item seen so far (seed and corrections)."""

    family = "third party"
    options = {"k": Option(kind=int, low=1, help="neighbours consulted (the nearest one answers)")}

    def __init__(self, k=1, labels=None, seed=0, name="myplug"):
        self.k, self.labels, self.seed, self.name = k, labels, seed, name

    def fit(self, seed: Batch):
        self.vecs_, self.seen_ = np.asarray(seed.vecs, float), list(seed.labels)
        return self

    def predict(self, batch: Batch):
        if len(batch) == 0 or len(self.seen_) == 0:
            return [None] * len(batch)
        return [self.seen_[j] for j in (np.asarray(batch.vecs) @ self.vecs_.T).argmax(axis=1)]

    def correct(self, batch: Batch):
        self.vecs_ = np.vstack([self.vecs_, batch.vecs])
        self.seen_ += list(batch.labels)

    def footprint(self):
        return Footprint(entries=len(self.seen_))


class EveryTenth(HeldoutProtocol):
    """Held-out classes, evaluated every 10 items."""

    name = "every_tenth"


def load_tiny(data_dir=None, n_classes=4):
    """Four well-separated Gaussian classes, as vectors."""
    return make_synthetic(n_classes=n_classes, dim=8, n_train_per_class=10, n_test_per_class=10, sigma=0.05)


load_tiny.options = {"n_classes": Option(kind=int, low=2, help="classes")}


class CountEncoder:
    """Letter counts of a text, as a vector."""

    options = {"dim": Option(26, int, low=1, help="letters counted")}

    def __init__(self, dim):
        self.dim = dim

    def encode(self, texts, progress=None):
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z" and ord(ch) - 97 < self.dim:
                    out[i, ord(ch) - 97] += 1
        return out
'''

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "ocrr-testplug"
version = "0.1"

[tool.setuptools]
packages = ["ocrr_testplug"]

[project.entry-points."ocrr.systems"]
myplug = "ocrr_testplug:NearestSeen"
brokenplug = "ocrr_testplug.missing:Nothing"

[project.entry-points."ocrr.protocols"]
every_tenth = "ocrr_testplug:EveryTenth"

[project.entry-points."ocrr.datasets"]
tiny = "ocrr_testplug:load_tiny"

[project.entry-points."ocrr.encoders"]
letters = "ocrr_testplug:CountEncoder"
"""

REGISTRIES = (REGISTRY, PROTOCOLS, DATASETS, ENCODERS)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The plug-in package, built and installed offline into a folder of its own."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "src" / "ocrr_testplug").mkdir(parents=True)
    (root / "src" / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (root / "src" / "ocrr_testplug" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    site = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--target", str(site), str(root / "src")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return site


@pytest.fixture
def plugins(installed, monkeypatch):
    """The installed package on the path, each registry made to look for plug-ins again."""
    monkeypatch.syspath_prepend(str(installed))
    for registry in REGISTRIES:
        registry.refresh_plugins()
    yield
    monkeypatch.undo()
    sys.modules.pop("ocrr_testplug", None)
    for registry in REGISTRIES:
        registry.refresh_plugins()


def test_a_plugin_system_is_listed_validated_and_built(plugins, capsys):
    assert REGISTRY["myplug"].family == "third party"
    assert main(["systems"]) == 0
    listing = capsys.readouterr().out
    assert "myplug" in listing and "The label of the nearest of every item seen so far" in listing
    assert set(options_of("myplug")) == {"k"}
    assert make_system("myplug:k=3").k == 3
    with pytest.raises(OcrrError, match="system myplug: k must be an integer ≥ 1, got 0"):
        make_system("myplug:k=0")


def test_a_plugin_system_and_dataset_run(plugins, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--dataset", "tiny", "--heldout", "2", "--systems", "myplug,substrate", "--seeds", "0", "--quiet"]
    args += ["--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    summary = (out / "summary.csv").read_text()
    assert "myplug" in summary and "substrate" in summary


def test_plugin_protocol_dataset_and_encoder(plugins):
    assert make_protocol("every_tenth:every=10").name == "every_tenth"
    assert len(load_dataset("tiny:n_classes=3").train.labels) == 30
    with pytest.raises(OcrrError, match="dataset tiny: n_classes must be an integer ≥ 2, got 1"):
        load_dataset("tiny:n_classes=1")
    vecs = make_encoder("letters:dim=3").encode(["abc", "cab a"])
    assert np.array_equal(vecs, [[1, 1, 1], [2, 1, 1]])
    with pytest.raises(OcrrError, match="encoder letters: dim must be an integer ≥ 1"):
        make_encoder("letters:dim=0")


def test_a_broken_plugin_names_its_package_and_the_fix_and_breaks_nothing_else(plugins, capsys):
    with pytest.raises(OcrrError) as caught:
        make_system("brokenplug")
    message = str(caught.value)
    assert "system plug-in 'brokenplug'" in message and "ocrr_testplug.missing:Nothing" in message
    assert "ocrr-testplug" in message and "pip uninstall ocrr-testplug" in message
    assert "brokenplug" not in REGISTRY and "myplug" in REGISTRY
    assert main(["systems"]) == 0  # listing the others still works, and says what did not load
    listing = capsys.readouterr()
    assert "myplug" in listing.out and message in listing.err


def test_without_the_package_its_names_are_unknown(installed):
    for registry in REGISTRIES:
        registry.refresh_plugins()
    assert "myplug" not in REGISTRY and "tiny" not in DATASETS
    with pytest.raises(OcrrError, match="unknown system 'myplug'.*Run 'ocrr systems' to list them"):
        make_system("myplug")
