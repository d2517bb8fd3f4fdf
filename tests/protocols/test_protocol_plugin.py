"""A protocol defined here, outside the package, runs through ocrr run, ocrr sweep (resume
included, in worker processes) and ocrr report: adding a protocol is one class and one
registry line."""

import numpy as np
import pandas as pd
import pytest

from ocrr.batch import Batch
from ocrr.cli.main import main
from ocrr.protocols import PROTOCOLS, Option, Protocol, Scenario, register_protocol
from ocrr.protocols.scenario import every_n


def rows(split, vecs, idx):
    return Batch(np.ascontiguousarray(vecs[idx]), None, [split.labels[i] for i in idx])


class PairsProtocol(Protocol):
    """Half the classes known upfront; the others' training items stream in episodes of
    ``size`` items; one metric of its own: accuracy on every test item ("acc_test")."""

    name = "pairs"
    summary_text = "toy: episodes of a few items, accuracy on the whole test split"
    options = {"size": Option(2, int, low=1, help="items per episode")}
    metrics = ("acc_test",)

    def scenario(self, dataset, train_vecs, test_vecs, seed):
        labels = dataset.labels
        known = set(labels[: len(labels) // 2])
        train_labels = list(dataset.train.labels)
        seed_idx = [i for i, label in enumerate(train_labels) if label in known]
        novel = np.array([i for i, label in enumerate(train_labels) if label not in known])
        stream_idx = novel[np.random.default_rng(seed).permutation(len(novel))]
        bounds = np.unique(np.append(np.arange(0, len(stream_idx), self.values["size"]), len(stream_idx)))
        test = rows(dataset.test, test_vecs, np.arange(len(dataset.test)))
        return Scenario(
            self.name,
            seed,
            labels,
            rows(dataset.train, train_vecs, seed_idx),
            rows(dataset.train, train_vecs, stream_idx),
            {"test": test},
            eval_after=every_n(len(bounds) - 1, 5),
            episode_bounds=bounds,
        )


DATA = [
    "--dataset",
    "synthetic",
    "--data-option",
    "n_classes=8",
    "--data-option",
    "dim=16",
    "--data-option",
    "n_train_per_class=10",
    "--data-option",
    "n_test_per_class=5",
    "--data-option",
    "sigma=0.1",
]


@pytest.fixture
def pairs():
    register_protocol(PairsProtocol)
    yield PairsProtocol
    PROTOCOLS.pop("pairs", None)


def test_a_test_defined_protocol_runs_sweeps_resumes_and_reports(pairs, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "run",
                *DATA,
                "--protocol",
                "pairs:size=2",
                "--systems",
                "substrate",
                "static_knn",
                "--seeds",
                "0",
                "1",
                "--quiet",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    per = pd.read_csv(run / "per_checkpoint.csv")
    assert list(per.columns) == [
        "dataset",
        "encoder",
        "policy",
        "seed",
        "system",
        "step",
        "corrections",
        "acc_test",
        "online_accuracy",
        "episode",
    ]
    one = per[(per.system == "substrate") & (per.seed == 0)]
    assert one["step"].tolist() == [0, 10, 20, 30, 40] and one["episode"].tolist() == [0, 5, 10, 15, 20]
    # the substrate learns the streamed classes; static_knn never does (it only knows half the classes)
    assert one["acc_test"].iloc[-1] > one["acc_test"].iloc[0] + 0.3
    static = per[per.system == "static_knn"]
    assert static["acc_test"].max() <= 0.5 + 1e-9
    summary = pd.read_csv(run / "summary.csv")
    assert {"final_acc_test_mean", "final_acc_test_std", "online_accuracy_mean"} <= set(summary.columns)
    preds = pd.read_parquet(run / "predictions.parquet")
    assert len(preds) == 4 * 40 and set(preds.groupby(["seed", "system", "episode"]).size()) == {2}

    sweep = tmp_path / "sweep"
    args = [
        "sweep",
        *[a.replace("--dataset", "--datasets") for a in DATA],
        "--protocol",
        "pairs:size=2",
        "--systems",
        "substrate",
        "static_knn",
        "--seeds",
        "0",
        "1",
        "--executor",
        "local",
        "--jobs",
        "1",
        "--quiet",
        "--out",
        str(sweep),
    ]
    assert main(args) == 0
    table = pd.read_parquet(sweep / "results.parquet")
    assert set(table["protocol"]) == {"pairs"} and set(table["size"]) == {2}
    # the same computation as ocrr run, in a worker process that learned the protocol from the parent
    merged = per.merge(table, on=["system", "seed", "step"], suffixes=("_run", "_sweep"))
    assert len(merged) == len(per)
    assert (merged["acc_test_run"] == merged["acc_test_sweep"]).all()
    assert (merged["corrections_run"] == merged["corrections_sweep"]).all()

    lost = sorted((sweep / "tasks").glob("*.parquet"))[1]
    lost.unlink()
    capsys.readouterr()
    assert main(args) == 0
    assert "3 already done, 1 ran, 0 failed" in capsys.readouterr().out
    assert pd.read_parquet(sweep / "results.parquet").equals(table)

    for folder in (run, sweep):
        assert main(["report", str(folder)]) == 0
        page = (folder / "report" / "report.html").read_text()
        assert "pairs · synthetic · oracle" in page and "final acc_test" in page
        assert list((folder / "report" / "figures").glob("pairs-*_curves.svg"))


def test_protocol_options_are_validated_at_the_door(pairs, tmp_path, capsys):
    assert main(["run", *DATA, "--protocol", "pairs:size=0", "--quiet", "--out", str(tmp_path / "r")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "protocol pairs: size must be an integer ≥ 1, got 0" in err
    # held-out shortcuts do not silently apply to another protocol
    assert (
        main(
            [
                "sweep",
                *[a.replace("--dataset", "--datasets") for a in DATA],
                "--protocol",
                "pairs",
                "--every",
                "5",
                "--out",
                str(tmp_path / "s"),
            ]
        )
        == 2
    )
    assert "set options of the heldout protocol" in " ".join(capsys.readouterr().err.split())
