"""The distribution: one version everywhere, and a wheel that carries what ocrr needs to run."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ocrr

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_in_the_package_the_metadata_and_the_citation():
    from importlib.metadata import version

    cff = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    cited = re.search(r'^version: "([^"]+)"$', cff, re.MULTILINE)
    assert cited is not None, "CITATION.cff has no version line"
    assert cited.group(1) == ocrr.__version__
    assert version("ocrr") == ocrr.__version__


def test_the_project_files_a_user_looks_for_exist():
    for name in ("LICENSE", "README.md", "CHANGELOG.md", "CONTRIBUTING.md", "CITATION.cff"):
        assert (ROOT / name).is_file(), name
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert f"## [{ocrr.__version__}]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("build", reason="pip install build (it is in the test extra)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = out.glob("ocrr-*.whl")
    return found


def test_the_wheel_carries_the_demo_data_the_service_page_the_licence_and_the_type_marker(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert wheel.name.startswith(f"ocrr-{ocrr.__version__}-py3-none-any")
    for needed in ("ocrr/data/demo/helpdesk.jsonl", "ocrr/service/page.html", "ocrr/py.typed", "ocrr/cli/main.py"):
        assert needed in names, needed
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)


def test_the_installed_wheel_runs_the_demo(wheel, tmp_path):
    """The wheel's own files (not this checkout) run `ocrr run --dataset demo` to the end."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OCRR_DATA_DIR", "PYTHONPATH")}
    env.update(PYTHONPATH=str(site), HF_HUB_OFFLINE="1")
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "run", "--dataset", "demo", "--systems", "substrate", "--seeds", "0"]
        + ["--out", str(out), "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    probe = subprocess.run(
        [sys.executable, "-c", "import ocrr; print(ocrr.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert probe.stdout.strip().startswith(str(site)), "the run must use the wheel's files, not the checkout"
    with open(out / "summary.csv", newline="", encoding="utf-8") as f:
        (row,) = csv.DictReader(f)
    assert (row["dataset"], row["system"], row["n_seeds"]) == ("demo", "substrate", "1")
    assert 0.5 < float(row["final_novel_mean"]) <= 1.0  # the substrate learns the demo's held-out classes
