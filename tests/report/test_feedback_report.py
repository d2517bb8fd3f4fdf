"""The realistic-feedback report tables, on hand-made results."""

import math

import pandas as pd

from ocrr.report.feedback import axis_table, drift_table


def rows(policy, system, seed, points):
    return [
        dict(
            policy=policy,
            system=system,
            seed=seed,
            step=s,
            corrections=c,
            acc_novel=n,
            acc_original=o,
            online_accuracy=0.5,
        )
        for s, c, n, o in points
    ]


def test_axis_tables_put_each_option_value_in_its_column():
    df = pd.DataFrame(
        rows("oracle", "substrate", 0, [(0, 0, 0.0, 0.9), (50, 40, 0.8, 0.9)])
        + rows("oracle", "substrate", 1, [(0, 0, 0.0, 0.9), (50, 40, 0.6, 0.7)])
        + rows("oracle:noise=0.3", "substrate", 0, [(50, 40, 0.5, 0.85)])
        + rows("oracle:budget=0.1:random", "substrate", 0, [(50, 4, 0.2, 0.9)])
        + rows("oracle:budget=0.1", "substrate", 0, [(50, 5, 0.3, 0.9)])
    )
    noise = axis_table(df[~df["policy"].str.contains("budget")], "noise", ["substrate"])
    assert noise.to_dict("records") == [
        {"system": "substrate", "noise 0": "0.700 ± 0.100 / 0.800 ± 0.100", "noise 0.3": "0.500 / 0.850"}
    ]
    budget = axis_table(df[~df["policy"].str.contains("noise")], "budget", ["substrate"]).iloc[0].to_dict()
    assert budget["budget 10% random"] == "0.200 / 0.900 / 4 corr."
    assert budget["budget 10% uncertainty"] == "0.300 / 0.900 / 5 corr."


def test_drift_table_counts_corrections_to_each_threshold():
    df = pd.DataFrame(
        [
            dict(
                policy="oracle",
                system="substrate",
                seed=s,
                step=step,
                corrections=c,
                acc_drifted=d,
                acc_stable=0.9,
                online_accuracy=0.7,
            )
            for s, pts in (
                (0, [(0, 0, 0.6), (50, 20, 0.82), (100, 30, 0.91)]),
                (1, [(0, 0, 0.5), (50, 25, 0.7), (100, 40, 0.85)]),
            )
            for step, c, d in pts
        ]
    )
    row = drift_table(df, thresholds=(0.8, 0.9)).iloc[0].to_dict()
    assert row["drifted before"] == "0.550 ± 0.050" and row["→80%"] == "30" and row["→90%"] == "30 (1/2)"
    assert not math.isnan(float(row["corrections"]))
