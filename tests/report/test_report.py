"""ocrr report: tables, figures and report.html from a results table."""

import base64
import re

import numpy as np
import pandas as pd
import pytest

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.report import build_report
from ocrr.report.figures import aligned_curves
from ocrr.report.load import load_results_any
from ocrr.report.tables import cells, pareto_flags

# name: (final novel per seed, final original, corrections per step, entries, params, bytes)
SYSTEMS = {
    "substrate": ([0.9, 0.86], 0.95, 3, 9000, 0, 15_000_000),
    "bounded_reservoir_100": ([0.5, 0.4], 0.5, 4, 100, 0, 160_000),
    "online_linear": ([0.3, 0.2], 0.93, 20, 0, 30_000, 120_000),
    "static_knn": ([0.0, 0.0], 0.96, 25, 9000, 0, 14_000_000),
}


def results_table(policies=("oracle", "random10")) -> pd.DataFrame:
    """Made-up runs with known numbers: seed 1's stream is shorter than seed 0's."""
    rows = []
    for policy in policies:
        for system, (finals, orig, per_step, entries, params, nbytes) in SYSTEMS.items():
            for seed, final in enumerate(finals):
                n_steps = 6 if seed == 0 else 4
                for i in range(n_steps + 1):
                    rows.append(
                        dict(
                            task_id=f"{policy}-{system}-{seed}",
                            dataset="banking77",
                            data_options="{}",
                            encoder="minilm",
                            n_heldout=10,
                            eval_cap=400,
                            every=50,
                            policy=policy,
                            system=system,
                            seed=seed,
                            step=50 * i,
                            corrections=per_step * i,
                            acc_novel=round(final * i / n_steps, 4),
                            acc_original=orig,
                            footprint_entries=entries,
                            footprint_params=params,
                            footprint_bytes=nbytes,
                        )
                    )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    results_table().to_parquet(folder / "results.parquet", index=False)
    return build_report(folder)


def test_table1_per_dataset_and_policy_in_the_papers_form(report):
    md = (report.out / "tables.md").read_text()
    for policy in ("oracle", "random10"):
        assert f"## Table 1 — banking77 · {policy} · minilm · seeds 0, 1" in md
    assert "| system | buffer | final novel | final original | →10% | →50% | →70% |" in md
    # substrate: finals 0.9 and 0.86 -> 0.880 ± 0.020 (population std); 70 % reached at step 4 of 6 / 4 of 4
    # seed 0 reaches 50 % / 70 % after 12 / 15 corrections, seed 1 after 9 / 12: means 10.5 and 13.5
    assert "| substrate | 9,000 entries | 0.880 ± 0.020 | 0.950 ± 0.000 | 3 | 10 | 14 |" in md
    # bounded_reservoir_100 reaches 50 % in one seed of two, 70 % in none
    row = next(line for line in md.splitlines() if line.startswith("| bounded_reservoir_100 |"))
    assert row.endswith("| 6 | 24 (1/2) | never |")
    assert "| static_knn | 9,000 entries | 0.000 ± 0.000 | 0.960 ± 0.000 | never | never | never |" in md
    # rows in the paper's order
    first = md.split("| system | buffer |")[1].split("\n\n")[0].splitlines()[2:]
    assert [line.split("|")[1].strip() for line in first] == [
        "substrate",
        "bounded_reservoir_100",
        "online_linear",
        "static_knn",
    ]


def test_storage_pareto_table(report):
    md = (report.out / "tables.md").read_text()
    assert "## Storage Pareto — banking77 · oracle · minilm" in md
    storage = pd.read_csv(report.out / "storage.csv")
    oracle = storage[storage["policy"] == "oracle"].set_index("system")
    # smallest memory first; static_knn (14 MB, novel 0) is dominated by bounded_reservoir_100
    assert list(oracle.index) == ["online_linear", "bounded_reservoir_100", "static_knn", "substrate"]
    assert oracle["pareto_novel"].to_dict() == {
        "online_linear": True,
        "bounded_reservoir_100": True,
        "static_knn": False,
        "substrate": True,
    }


def test_every_figure_is_written_and_not_empty(report):
    files = sorted(p.name for p in (report.out / "figures").iterdir())
    expected = sorted(
        f"banking77-{policy}-minilm_{kind}.{ext}"
        for policy in ("oracle", "random10")
        for kind in ("recovery", "scatter", "storage")
        for ext in ("png", "svg")
    )
    assert files == expected
    for path in report.figures:
        assert path.stat().st_size > 5000, path
    assert all(
        (report.out / "figures" / name).read_bytes()[:4] == b"\x89PNG" for name in expected if name.endswith("png")
    )


def test_report_html_holds_every_table_and_figure_self_contained(report):
    page = report.html.read_text()
    for title in report.tables:
        assert f"<h3>{title}</h3>" in page
    assert page.count("<table>") == len(report.tables) == 4
    embedded = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)
    svgs = [p for p in report.figures if p.suffix == ".svg"]
    assert len(embedded) == len(svgs) == 6
    assert {base64.b64decode(e) for e in embedded} == {p.read_bytes() for p in svgs}
    assert "http://" not in page.replace("http://www.w3.org", "") and "<link" not in page and "<script" not in page


def test_report_is_reproducible(report, tmp_path):
    again = build_report(report.out.parent, tmp_path / "again")
    for name in ("tables.md", "summary.csv", "runs.csv", "storage.csv", "report.html"):
        assert (report.out / name).read_bytes() == (again.out / name).read_bytes(), name


def test_recovery_curves_carry_a_finished_run_forward():
    rows = pd.DataFrame(
        {
            "seed": [0, 0, 0, 1, 1],
            "step": [0, 50, 100, 0, 50],
            "corrections": [0, 10, 20, 0, 30],
            "acc_novel": [0.0, 0.5, 1.0, 0.0, 0.8],
            "acc_original": [1.0] * 5,
        }
    )
    curves = aligned_curves(rows).set_index("step")
    assert curves.loc[100, "acc_novel_mean"] == pytest.approx(0.9)  # seed 1 stays at its final 0.8
    assert curves.loc[100, "acc_novel_std"] == pytest.approx(0.1)
    assert curves.loc[100, "corrections_mean"] == pytest.approx(25)


def test_pareto_flags_hand_checked():
    assert pareto_flags([1, 2, 3, 3, 4], [0.5, 0.4, 0.9, 0.95, 0.9]) == [True, False, False, True, False]
    assert pareto_flags([5, 5], [np.nan, 0.1]) == [False, True]


def test_dataset_variants_get_their_own_tables(tmp_path):
    a, b = results_table(("oracle",)), results_table(("oracle",))
    b["n_heldout"], b["task_id"] = 5, b["task_id"] + "-h5"
    pd.concat([a, b]).to_parquet(tmp_path / "results.parquet", index=False)
    per = load_results_any(tmp_path).per_checkpoint
    assert [c.title for c in cells(per)] == [
        "banking77 [n_heldout=10] · oracle · minilm",
        "banking77 [n_heldout=5] · oracle · minilm",
    ]


def test_report_from_an_ocrr_run_folder_and_a_sweep_folder(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--dataset",
                "synthetic",
                "--data-option",
                "dim=16",
                "--data-option",
                "sigma=0.1",
                "--seeds",
                "0",
                "--systems",
                "substrate,static_knn",
                "--quiet",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    assert main(["report", str(run)]) == 0
    assert "open" in capsys.readouterr().out
    page = (run / "report" / "report.html").read_text()
    assert "Table 1 — synthetic · oracle · seeds 0" in page and "ocrr run folder" in page

    sw = tmp_path / "sweep"
    assert _smoke_sweep(sw, "--report") == 0
    assert (sw / "report" / "report.html").exists()
    # the CSV export reads back to the same table as the sweep folder
    from_csv = load_results_any(sw / "results.csv").per_checkpoint
    from_dir = load_results_any(sw).per_checkpoint
    floats = [c for c in from_dir.columns if from_dir[c].dtype.kind == "f"]  # the CSV keeps 6 decimals
    exact = [c for c in from_dir.columns if c not in floats]
    assert from_csv[exact].astype(str).equals(from_dir[exact].astype(str))
    assert ((from_csv[floats] - from_dir[floats]).abs().fillna(0) <= 5e-7).all().all()


def test_report_errors_name_the_fix(tmp_path, capsys):
    with pytest.raises(OcrrError, match="does not exist"):
        build_report(tmp_path / "nowhere")
    assert main(["report", str(tmp_path)]) == 2
    assert "per_checkpoint.csv" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("results.parquet", b"", "cannot be read as a Parquet table (Parquet file size is 0 bytes)"),
        ("results.parquet", b"abc", "cannot be read as a Parquet table (Parquet file size is 3 bytes"),
        ("results.csv", b"", "is empty: it holds no table"),
        ("results.csv", b"\xff\xfe", "cannot be read as a CSV table ('utf-8' codec can't decode"),
    ],
)
def test_a_results_file_that_cannot_be_read_is_one_error_naming_it(name, content, message, tmp_path, capsys):
    """Empty or garbage files ended in ArrowInvalid or pandas' EmptyDataError tracebacks."""
    (tmp_path / name).write_bytes(content)
    assert main(["report", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert f"'{tmp_path / name}' {message}" in err and len(err.splitlines()) == 1
    assert "give a table ocrr wrote: a sweep's results.parquet or results.csv, or a run's per_checkpoint.csv" in err
    assert not (tmp_path / "report").exists()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "run"
    args = ["run", "--dataset", "synthetic", "--data-option", "dim=16", "--seeds", "0", "--systems", "static_knn"]
    assert main([*args, "--quiet", "--out", str(run)]) == 0
    return run


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("config.json", b"{bad", "cannot be read as JSON (Expecting property name"),
        ("config.json", b"\xff", "cannot be read as JSON ('utf-8' codec can't decode"),
        ("config.json", b"[1]", "does not name the run's protocol (protocol.name)"),
        ("per_checkpoint.csv", b"", "is empty: it holds no table"),
        ("footprints.csv", b"", "is empty: it holds no table"),
    ],
)
def test_a_run_folder_with_a_damaged_file_is_one_error_naming_it(run_folder, name, content, message, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_folder, run)
    (run / name).write_bytes(content)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"'{run / name}' {message}" in err and len(err.splitlines()) == 1
    assert f"ocrr run wrote it: run the same command again with --out {run} to write the folder anew" in err
    assert not (run / "report").exists()


def test_figure_names_keep_dots_of_the_cell_name(tmp_path):
    from matplotlib.figure import Figure

    from ocrr.report.figures import save

    paths = [save(Figure(), tmp_path / f"ocl-stay={p}_curves") for p in ("0.0", "0.9")]
    assert [p.name for pair in paths for p in pair] == [
        "ocl-stay=0.0_curves.png",
        "ocl-stay=0.0_curves.svg",
        "ocl-stay=0.9_curves.png",
        "ocl-stay=0.9_curves.svg",
    ]


def test_report_adds_a_table_per_feedback_axis_the_policies_set(tmp_path):
    sw = tmp_path / "sweep"
    assert _smoke_sweep(sw, "--policies", "oracle", "oracle:noise=0.3") == 0
    report = build_report(sw)
    assert report.tables[-1] == "synthetic: final accuracy vs noise"
    tables = (report.out / "tables.md").read_text()
    section = tables[tables.index("synthetic: final accuracy vs noise") :]
    header = next(line for line in section.splitlines() if line.startswith("| system"))
    assert header == "| system | noise 0 | noise 0.3 |"
    assert "vs delay" not in tables and "vs budget" not in tables  # axes no policy sets
    assert "Realistic feedback: final accuracy per axis" in report.html.read_text()
    smoke = tmp_path / "plain"
    assert _smoke_sweep(smoke, "--policies", "oracle") == 0
    assert "final accuracy vs" not in (build_report(smoke).out / "tables.md").read_text()


def _smoke_sweep(out, *options: str) -> int:
    """`ocrr sweep --preset smoke` on seed 0, in this process, into ``out``."""
    return main(
        ["sweep", "--preset", "smoke", "--seeds", "0", "--executor", "serial", "--quiet", *options, "--out", str(out)]
    )
