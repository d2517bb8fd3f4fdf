"""Options checked at the door: a bad value of ``ocrr scale``, ``calibrate-shift``, ``run`` or
``sweep`` (or a cache folder that is a file) is one error line naming the fix and exit 2, before
any work and with nothing written, not a traceback or a run that is silently wrong."""

from __future__ import annotations

import pytest

from ocrr.cli.main import main
from ocrr.data.locate import cache_dir
from ocrr.errors import OcrrError
from ocrr.systems import make_system
from ocrr.systems.substrate.core import MAX_K

# a tiny synthetic dataset: each run takes a fraction of a second
TINY_DATA = [
    *("--dataset", "synthetic", "--data-option", "n_classes=14", "--data-option", "dim=16"),
    *("--data-option", "n_train_per_class=10", "--data-option", "n_test_per_class=4", "--quiet", "--jobs", "1"),
]
TINY_RUN = [*TINY_DATA, "--systems", "static_knn"]
# a tiny scale study, in this process (a bad value that got through would fail or finish here)
TINY_SCALE = ["scale", "--scales", "1000", "--classes", "4", "--dim", "8", "--queries", "10", "--no-isolate"]
SUBSPACE = ["--family", "subspace", "--intrinsic-dim", "4"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty working folder: whatever a command wrongly writes lands here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(capsys, *args: str) -> str:
    """Run ``ocrr *args``, which must be refused: exit 2 and one error line, nothing on stdout."""
    assert main(list(args)) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: "), captured.err
    assert len(captured.err.splitlines()) == 1 and captured.out == "", captured
    return captured.err


# -- ocrr scale ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (["--sigma", "nan"], "--sigma must be a finite number >= 0"),
        (["--sigma", "inf"], "--sigma must be a finite number >= 0"),
        ([*SUBSPACE, "--ambient", "nan"], "--ambient must be a finite number >= 0"),
        ([*SUBSPACE, "--ambient", "-1"], "--ambient must be a finite number >= 0"),
        (["--exact-max-gb", "-1"], "--exact-max-gb must be a finite number > 0"),
        (["--exact-max-gb", "nan"], "--exact-max-gb must be a finite number > 0"),
        (["--hnsw-m", "0"], "--hnsw-m >= 2"),
        (["--hnsw-m", "1"], "--hnsw-m >= 2"),
        (["--ef-search", "0"], "--ef-search >= 1"),
        (["--ef-construction", "0"], "--ef-construction >= 1"),
        (["--seed", "-1"], "--seed must be a whole number >= 0"),
    ],
)
def test_scale_refuses_a_value_out_of_range_before_any_work(bad, named, folder, capsys):
    err = refused(capsys, *TINY_SCALE, *bad, "--out", "scale")
    assert named in err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("scales", "named"),
    [
        ("inf", "write whole numbers"),
        ("nan", "write whole numbers"),
        ("1500.5", "write whole numbers"),  # was cut to 1500
        ("1e30", "more than the 1,000,000,000 the study measures at most"),
        ("1000000001", "more than the 1,000,000,000 the study measures at most"),
    ],
)
def test_scale_refuses_scales_that_are_not_whole_bounded_entry_counts(scales, named, folder, capsys):
    """--scales inf was an OverflowError; 1e30 one inside numpy, after the study had started."""
    err = refused(capsys, "scale", "--scales", scales, "--classes", "2", "--dim", "4", "--no-isolate", "--out", "s")
    assert f"--scales '{scales}'" in err and named in err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([], "--backends hnsw has none, so it would time nothing. Add one, e.g. --backends ivf_pq"),
        (["--backends", "ivf_pq", "--exact", "yes"], "but --exact yes holds them in memory at every scale"),
        (["--backends", "ivf_pq"], "but --exact auto holds them in memory at every scale"),
    ],
)
def test_scale_refuses_cold_queries_that_would_time_nothing(extra, named, folder, capsys):
    err = refused(capsys, *TINY_SCALE, "--cold-queries", *extra, "--out", "scale")
    assert named in err and "drop --cold-queries" in err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--real", "--scales", "1000"], "so --scales (of the synthetic study) would be ignored. Drop it"),
        (["--real", "--scales", "1000", "--classes", "4"], "so --scales, --classes (of the synthetic study)"),
        (["--scales", "1000", "--data-dir", "data"], "--data-dir is where --real finds Banking77 and CLINC150"),
    ],
)
def test_scale_refuses_options_the_chosen_study_ignores(extra, named, folder, capsys):
    assert named in refused(capsys, "scale", *extra, "--out", "scale")
    assert list(folder.iterdir()) == []


def test_scale_exact_max_gb_names_the_way_to_never_hold_the_vectors(folder, capsys):
    assert "--exact no" in refused(capsys, *TINY_SCALE, "--exact-max-gb", "0", "--out", "scale")


# -- ocrr calibrate-shift -----------------------------------------------------------------------


def test_calibrate_shift_refuses_a_negative_seed(folder, capsys):
    err = refused(capsys, "calibrate-shift", "--dataset", "synthetic", "--k-max", "4", "--seeds", "0", "-1")
    assert "--seeds must be whole numbers >= 0" in err and "got 0 -1" in err


# -- ocrr run -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["run", *TINY_RUN, "--seeds", "0"],
        ["scale", "--scales", "1000"],
        ["calibrate-shift", "--dataset", "synthetic"],
        ["sweep", "--datasets", "synthetic", "--systems", "substrate", "--dry-run"],
        ["report", "results"],
        ["ledger", "export", "l.db"],
    ],
)
@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_output_is_refused_and_nothing_written(command, out, folder, capsys):
    """'' reads as '.' when taken as a path: the results would land in the current folder."""
    with pytest.raises(SystemExit) as usage:
        main([*command, "--out", out])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "argument --out" in err and "is empty, which would write into the current folder" in err
    assert list(folder.iterdir()) == []


def test_run_names_its_own_seeds_option(folder, capsys):
    err = refused(capsys, "run", *TINY_RUN, "--seeds", "0", "-1")
    assert err.startswith("error: ocrr run --seeds must be whole numbers >= 0"), err
    assert "sweep:" not in err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_seed_past_int64_is_refused_before_any_run(command, folder, capsys):
    """A seed >= 2**63 ran every run, then failed writing the int64 seed column: all lost."""
    data = TINY_RUN if command == "run" else [a.replace("--dataset", "--datasets") for a in TINY_RUN]
    for seed in ("9223372036854775808", "18446744073709551616"):
        err = refused(capsys, command, *data, "--seeds", "0", seed, "--out", "out")
        assert "seeds must be whole numbers >= 0 and <= 9223372036854775807" in err and seed in err
        assert list(folder.iterdir()) == []


def test_a_sweep_config_seed_past_int64_is_refused_by_the_dry_run_too(folder, capsys):
    (folder / "grid.toml").write_text(
        'datasets = ["synthetic"]\nsystems = ["static_knn"]\nseeds = [0, 18446744073709551616]\n'
    )
    for dry in ([], ["--dry-run"]):
        err = refused(capsys, "sweep", "--config", "grid.toml", "--out", "out", *dry)
        assert "seeds must be whole numbers >= 0 and <= 9223372036854775807" in err
    assert sorted(p.name for p in folder.iterdir()) == ["grid.toml"]


def test_the_largest_seed_runs(folder, capsys):
    assert main(["run", *TINY_RUN, "--seeds", "9223372036854775807", "--out", "out"]) == 0
    assert "9223372036854775807" in (folder / "out" / "per_checkpoint.csv").read_text()


def test_run_names_its_own_flags_for_another_protocols_options(folder, capsys):
    err = refused(capsys, "run", *TINY_RUN, "--seeds", "0", "--protocol", "ocl", "--heldout", "1", "--every", "5")
    assert err.startswith("error: ocrr run --heldout --every: they set options of the heldout protocol, which ")
    assert "--protocol ocl does not run" in err and "'ocrr protocols ocl' lists them" in err
    assert "sweep" not in err and list(folder.iterdir()) == []


def test_run_refuses_a_substrate_k_beyond_its_bound(folder, capsys):
    huge = "99999999999999999999"
    err = refused(capsys, "run", *TINY_DATA, "--systems", f"substrate:k={huge}", "--seeds", "0")
    assert f"system substrate: k must be an integer in [1, {MAX_K}], got {huge}." in err
    assert list(folder.iterdir()) == []
    assert make_system(f"substrate:k={MAX_K}").k == MAX_K  # the bound itself is allowed


def test_run_refuses_a_synthetic_dataset_past_the_rows_it_generates_at_most(folder, capsys):
    argv = ["run", "--dataset", "synthetic", "--data-option", "n_classes=1000000000", "--systems", "static_knn"]
    err = refused(capsys, *argv, "--seeds", "0", "--quiet", "--jobs", "1")
    assert "= 70,000,000,000 rows, more than the 10,000,000 it generates at most" in err
    assert "Pass a smaller n_classes, n_train_per_class or n_test_per_class" in err
    assert list(folder.iterdir()) == []


def test_the_substrate_listing_shows_the_k_bound(capsys):
    assert main(["systems", "substrate"]) == 0
    out = capsys.readouterr().out
    assert f"an integer in [1, {MAX_K}]" in out and "neighbours retrieved per query" in out


@pytest.mark.parametrize("under", [False, True])
def test_run_refuses_a_cache_folder_that_is_a_file(under, folder, capsys, monkeypatch):
    (folder / "afile").write_text("not a folder\n")
    monkeypatch.setenv("OCRR_CACHE_DIR", str(folder / "afile" / "sub" if under else folder / "afile"))
    err = refused(capsys, "run", *TINY_RUN, "--seeds", "0", "--out", "results")
    assert "OCRR_CACHE_DIR=" in err and "point OCRR_CACHE_DIR at a folder" in err
    assert sorted(p.name for p in folder.iterdir()) == ["afile"]
    with pytest.raises(OcrrError, match="point OCRR_CACHE_DIR at a folder"):
        cache_dir()  # the dataset look-up says the same
    for command in (
        ["sweep", "--datasets", "synthetic", "--systems", "substrate"],
        ["embed", "--dataset", "synthetic"],
    ):
        assert "point OCRR_CACHE_DIR at a folder" in refused(capsys, *command)


# -- ocrr sweep --config ------------------------------------------------------------------------


def test_sweep_refuses_a_config_that_is_a_folder(folder, capsys):
    (folder / "x.toml").mkdir()
    err = refused(capsys, "sweep", "--config", "x.toml")
    assert "x.toml" in err and "is a folder" in err and ".toml or .json file" in err


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("out = 5", 'out must be text, e.g. out = "results/sweep1"; got 5'),
        ("data_dir = 5", 'data_dir must be text, e.g. data_dir = "/data/ocrr"; got 5'),
        ("address = 6379", "address must be text"),
        ('out = ""', "out is empty"),  # the command line refuses --out '' too; this fell back to the default
        ('out = "  "', "out is empty"),
    ],
)
def test_sweep_refuses_a_config_setting_of_the_wrong_type_at_load(setting, named, folder, capsys):
    """out = 5 and data_dir = 5 were TypeErrors deep in the run (data_dir only in the real run)."""
    (folder / "grid.toml").write_text(f'datasets = ["banking77"]\nsystems = ["static_knn"]\nseeds = [0]\n{setting}\n')
    for dry in ([], ["--dry-run"]):
        err = refused(capsys, "sweep", "--config", "grid.toml", *dry)
        assert "sweep config 'grid.toml': " + named in err
    assert sorted(p.name for p in folder.iterdir()) == ["grid.toml"]


def test_sweep_refuses_a_config_that_is_not_utf8(folder, capsys):
    (folder / "bad.toml").write_bytes(b"seeds = [0]\n# caf\xe9\n")
    err = refused(capsys, "sweep", "--config", "bad.toml")
    assert "bad.toml" in err and "not UTF-8" in err and "Save it as UTF-8" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--jobs", "0"], "--jobs 0: give a whole number of workers >= 1"),
        (["--executor", "bogus"], "unknown executor 'bogus'"),
        (["--datasets", "bogus"], "unknown dataset 'bogus'"),
        (["--data-option", "dim=0"], "dataset synthetic: dim must be an integer in [1, 65536], got 0"),
        (["--data-option", "n_classes=1000000"], "= 70,000,000 rows, more than the 10,000,000 it generates at most"),
    ],
)
def test_a_dry_run_refuses_what_the_run_would(extra, message, folder, capsys):
    """--dry-run listed '1 to run' for a sweep the run then refused."""
    base = ["sweep", "--datasets", "synthetic", "--systems", "substrate", "--seeds", "0", "--dry-run"]
    assert message in refused(capsys, *base, "--out", str(folder / "s"), *extra)
    assert list(folder.iterdir()) == []
