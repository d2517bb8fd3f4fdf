"""The paper's main experiment on the real datasets with the real encoder (needs OCRR_DATA_DIR).

The datasets are found through OCRR_DATA_DIR (or the user cache, after a download); without
them every test here is skipped, saying so. Embeddings are cached in the user cache, so only
the first run pays for encoding.
"""

import pytest
from tests.conftest import REAL_DATA_MARKS

from ocrr.engine.experiment import Experiment, run_experiment
from ocrr.utils.threads import pinned_threads

pytestmark = REAL_DATA_MARKS


@pytest.fixture(autouse=True)
def real_cache(monkeypatch, user_cache):
    """The user's embedding cache, and one thread as ``ocrr run`` pins it (restored after the
    test: a process-wide pin would change the arithmetic of every test that runs later)."""
    monkeypatch.setenv("OCRR_CACHE_DIR", str(user_cache))
    with pinned_threads():
        yield


def finals(result):
    return result.summary.set_index("system")


def test_banking77_main_job_substrate_recovers_without_forgetting():
    result = run_experiment(Experiment(dataset="banking77", seeds=[0, 1, 2]))
    assert len(result.dataset.train) == 10003 and len(result.dataset.labels) == 77
    s = finals(result)
    novel, orig = s["final_novel_mean"], s["final_original_mean"]
    for other in ("static_knn", "static_linear", "online_linear"):
        assert novel["substrate"] >= novel[other] + 0.2, (other, novel.to_dict())
    assert abs(orig["substrate"] - orig["static_knn"]) <= 0.03, orig.to_dict()
    # static systems never learn the held-out classes
    assert novel["static_knn"] == 0.0 and novel["static_linear"] == 0.0
    # eval sets: 400 original (capped), 400 novel (10 classes x 40 test items)
    per = result.per_checkpoint
    assert per["step"].min() == 0 and (per["corrections"] <= per["step"]).all()


def test_clinc150_with_oos_runs_end_to_end():
    result = run_experiment(Experiment(dataset="clinc150", seeds=[0]))
    assert len(result.dataset.labels) == 151
    s = finals(result)
    assert s.loc["substrate", "final_novel_mean"] >= s.loc["online_linear", "final_novel_mean"] + 0.2
    # appending corrections costs the known classes (oos included) almost nothing
    assert abs(s.loc["substrate", "final_original_mean"] - s.loc["static_knn", "final_original_mean"]) <= 0.03
