"""Correction policies and the summary metrics, on hand-checked cases."""

import math

import numpy as np
import pandas as pd
import pytest

from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols.heldout import summarise
from ocrr.protocols.summary import corrections_to


def test_oracle_corrects_every_error():
    assert make_policy("oracle").coins(0, 100).all()


def test_random_coins_depend_on_the_seed_only():
    p50, p10 = make_policy("random50"), make_policy("random_10")
    a, b = p50.coins(3, 5000), p50.coins(3, 5000)
    assert (a == b).all() and not (a == p50.coins(4, 5000)).all()
    assert abs(a.mean() - 0.5) < 0.03  # binomial sd 0.007: 4 sd
    c = p10.coins(3, 5000)
    assert abs(c.mean() - 0.1) < 0.02
    assert not (c & ~a).any()  # random10's corrections are a subset of random50's


def test_policy_specs():
    assert make_policy("random:0.25").p == 0.25
    assert make_policy("random-50").name == "random50"
    for bad in ("random:2", "random:x", "sometimes"):
        with pytest.raises(OcrrError):
            make_policy(bad)


def table(curves):
    rows = []
    for (system, seed), points in curves.items():
        for step, (corr, novel, orig) in enumerate(points):
            rows.append(
                dict(
                    dataset="d",
                    encoder="e",
                    policy="oracle",
                    seed=seed,
                    system=system,
                    step=50 * step,
                    corrections=corr,
                    acc_novel=novel,
                    acc_original=orig,
                )
            )
    return pd.DataFrame(rows)


def test_corrections_to_threshold_is_the_first_checkpoint_reaching_it():
    df = table({("s", 0): [(0, 0.0, 0.9), (40, 0.1, 0.9), (70, 0.55, 0.9), (90, 0.45, 0.9), (100, 0.7, 0.9)]})
    assert corrections_to(df, 10, "acc_novel") == 40
    assert corrections_to(df, 50, "acc_novel") == 70
    assert corrections_to(df, 70, "acc_novel") == 100
    assert math.isnan(corrections_to(df, 80, "acc_novel"))


def test_summary_means_stds_and_reach_counts():
    df = table({("s", 0): [(0, 0.0, 1.0), (30, 0.6, 0.8)], ("s", 1): [(0, 0.0, 1.0), (50, 0.4, 0.9)]})
    row = summarise(df).iloc[0]
    assert row["n_seeds"] == 2
    assert row["final_novel_mean"] == pytest.approx(0.5) and row["final_novel_std"] == pytest.approx(0.1)
    assert row["final_original_mean"] == pytest.approx(0.85)
    assert row["corrections_to_50_mean"] == 30 and row["corrections_to_50_reached"] == 1
    assert row["corrections_to_10_mean"] == 40 and row["corrections_to_10_reached"] == 2
    assert row["corrections_to_70_reached"] == 0 and np.isnan(row["corrections_to_70_mean"])
