"""ocrr report on language-shift results: its table, recovery curves in both languages, and the
two language pairs of one dataset kept apart."""

import json

import pandas as pd

from ocrr.report import build_report


def results(pairs=("en-US/es-ES", "en-US/pl-PL")) -> pd.DataFrame:
    """Made-up runs: the substrate climbs from 0.4 to 0.8 in the target language, keeping 0.9 in the source."""
    rows = []
    for pair in pairs:
        source, target = pair.split("/")
        for seed in (0, 1):
            for step in range(5):
                rows.append(
                    {
                        "task_id": f"{pair}-{seed}",
                        "dataset": f"leyzer:source={source}:target={target}",
                        "data_options": "{}",
                        "encoder": "use_multilingual",
                        "protocol": "language_shift",
                        "protocol_options": json.dumps({"every": 50, "eval_cap": 400, "n_heldout": 0, "stream_cap": 0}),
                        "policy": "oracle",
                        "system": "substrate",
                        "seed": seed,
                        "step": 50 * step,
                        "corrections": 10 * step,
                        "acc_target": 0.4 + 0.1 * step,
                        "acc_source": 0.9,
                    }
                )
    return pd.DataFrame(rows)


def test_report_draws_the_language_shift_cells(tmp_path):
    results().to_csv(tmp_path / "results.csv", index=False)
    report = build_report(tmp_path / "results.csv", tmp_path / "out")
    tables = (tmp_path / "out" / "tables.md").read_text(encoding="utf-8")
    assert tables.count("| system | buffer | target at start | final target | final source | →50% | →70% |") == 2
    assert "| substrate | – | 0.400 ± 0.000 | 0.800 ± 0.000 | 0.900 ± 0.000 | 10 | 30 |" in tables
    assert "target=es-ES" in tables and "target=pl-PL" in tables  # the two pairs: two cells
    assert sum("_recovery.svg" in p.name for p in report.figures) == 2
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert list(summary["corrections_to_70_mean"]) == [30.0, 30.0]
