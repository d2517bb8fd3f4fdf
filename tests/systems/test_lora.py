"""`lora`: LoRA adapters on a transformer encoder, one SGD step per correction (paper 4.5).

Every test builds the tiny random BERT (`model=tiny-random`: 2 layers of width 32, the
packaged MiniLM tokenizer): no download, seconds on one CPU thread.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

pytest.importorskip("peft", reason="lora needs the extra: pip install -e '.[lora]'")

from tests.conftest import clustered_dataset  # noqa: E402

from ocrr.errors import OcrrError  # noqa: E402
from ocrr.systems import Batch, make_system  # noqa: E402
from ocrr.systems.heads.lora import LoRA, resolve_targets  # noqa: E402
from ocrr.systems.registry import execution_settings  # noqa: E402

TINY = "lora:model=tiny-random:progress=false"
FAST = TINY + ":lr=0.05"  # the tiny random model needs a larger step to move within a test


@pytest.fixture(autouse=True)
def one_thread():
    """As the runner does (ocrr.utils.threads.pin_threads): one intra-op thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def batch_of(split, idx):
    idx = np.asarray(idx)
    return Batch(split.vecs[idx], [split.texts[i] for i in idx], [split.labels[i] for i in idx])


@pytest.fixture(scope="module")
def data():
    ds = clustered_dataset(n_classes=10, dim=16, n_train=12, n_test=6, noise=0.2, seed=4, name="lora")
    known = set(ds.labels[:7])
    return {
        "labels": list(ds.labels),
        "seed": batch_of(ds.train, [i for i, label in enumerate(ds.train.labels) if label in known]),
        "stream": batch_of(ds.train, [i for i, label in enumerate(ds.train.labels) if label not in known]),
        "eval": batch_of(ds.test, np.arange(len(ds.test))),
    }


def fitted(data, spec=TINY, seed=0):
    return make_system(spec, labels=data["labels"], seed=seed).fit(data["seed"])


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def test_corrections_change_only_adapters_and_head_and_base_stays_bit_identical(data):
    lora = fitted(data, FAST)
    before, head_before = snapshot(lora.model_), snapshot(lora.head_)
    lora.correct(data["stream"][:12])
    after = snapshot(lora.model_)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    trainable = {k for k, p in lora.model_.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in k or ".lora_B." in k for k in trainable)
    assert changed <= trainable  # frozen base weights: bit for bit
    assert any(".lora_A." in k for k in changed) and any(".lora_B." in k for k in changed)
    base = {k for k in before if k not in trainable}
    assert base and all(torch.equal(before[k], after[k]) for k in base)
    assert not torch.equal(head_before["weight"], lora.head_.weight)


def test_the_seed_phase_trains_adapters_and_head_only(data):
    untrained = make_system(TINY + ":seed_epochs=0", labels=data["labels"]).fit(data["seed"])
    trained = fitted(data)
    a, b = snapshot(untrained.model_), snapshot(trained.model_)
    for key, p in trained.model_.named_parameters():
        assert torch.equal(a[key], b[key]) != p.requires_grad, key  # same init; only trainables moved


def test_trainable_parameter_count_matches_the_formula(data):
    lora = fitted(data)
    # tiny BERT: 2 blocks, query and value are Linear(32, 32): r (in + out) each; head (hidden + 1) x labels
    adapters = 2 * 2 * 8 * (32 + 32)
    head = (32 + 1) * len(data["labels"])
    fp = lora.footprint()
    assert lora.targets_ == [f"encoder.layer.{i}.attention.self.{t}" for i in range(2) for t in ("query", "value")]
    assert fp.params == adapters + head and fp.extra["adapter_params"] == adapters
    assert fp.bytes == 4 * (adapters + head)
    assert fp.extra["total_params"] == sum(p.numel() for p in lora.model_.parameters()) + head
    r4 = fitted(data, TINY + ":rank=4")
    assert r4.footprint().params == adapters // 2 + head


def test_a_label_first_met_in_a_correction_grows_the_head(data):
    lora = fitted(data, FAST)
    item = Batch(data["stream"].vecs[:1], ["a brand new intent"], ["never_seen_label"])
    n = lora.head_.out_features
    for _ in range(50):
        lora.correct(item)
        if lora.predict(item) == ["never_seen_label"]:
            break
    assert lora.predict(item) == ["never_seen_label"]
    assert lora.head_.out_features == n + 1 and lora.footprint().params == 2 * 2 * 8 * 64 + 33 * (n + 1)


def test_same_seed_same_everything_other_seed_differs(data):
    def run(seed):
        lora = fitted(data, FAST, seed=seed)
        lora.correct(data["stream"][:10])
        return lora.predict(data["eval"]), snapshot(lora.model_), snapshot(lora.head_)

    (p1, m1, h1), (p2, m2, h2), (_, m3, _) = run(5), run(5), run(6)
    assert p1 == p2
    assert all(torch.equal(m1[k], m2[k]) for k in m1) and all(torch.equal(h1[k], h2[k]) for k in h1)
    assert any(not torch.equal(m1[k], m3[k]) for k in m1 if ".lora_A." in k)


def test_randomness_never_touches_the_global_rng(data):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    fitted(data, FAST).correct(data["stream"][:3])
    assert torch.equal(torch.rand(3), expected)


def test_batched_predict_equals_one_by_one_and_has_no_side_effects(data):
    lora = fitted(data, FAST)
    lora.correct(data["stream"][:8])
    ev = data["eval"]
    state = snapshot(lora.model_)
    batched = lora.predict(ev)
    assert batched == [lora.predict(ev[i])[0] for i in range(len(ev))]
    assert batched == lora.predict(ev[:17]) + lora.predict(ev[17:])
    small = make_system(FAST + ":predict_batch_size=3", labels=data["labels"]).fit(data["seed"])
    small.correct(data["stream"][:8])
    assert small.predict(ev) == batched  # chunking does not change predictions
    after = snapshot(lora.model_)
    assert all(torch.equal(state[k], after[k]) for k in state)


def test_cls_pooling_and_max_length(data):
    lora = fitted(data, TINY + ":pooling=cls:max_length=4")
    assert max(len(r) for r in lora._tokenize(data["eval"].texts)) == 4
    assert len(lora.predict(data["eval"])) == len(data["eval"])


def test_pickle_round_trip_carries_on_identically(data):
    lora = fitted(data, FAST)
    lora.correct(data["stream"][:4])
    clone = pickle.loads(pickle.dumps(lora))
    new = Batch(data["stream"].vecs[4:6], data["stream"].texts[4:6], ["fresh_a", "fresh_b"])  # grows the head
    lora.correct(new)
    clone.correct(new)
    assert clone.predict(data["eval"]) == lora.predict(data["eval"])
    assert torch.equal(clone.head_.weight, lora.head_.weight)


def test_errors_name_the_fix(data, tmp_path):
    lora = fitted(data)
    no_text = Batch(data["eval"].vecs[:2])
    with pytest.raises(OcrrError, match="lora reads text; this dataset is embeddings-only"):
        lora.predict(no_text)
    with pytest.raises(OcrrError, match="reads text"):
        make_system(TINY, labels=data["labels"]).fit(Batch(data["seed"].vecs, None, data["seed"].labels))
    with pytest.raises(OcrrError, match="needs one label per item"):
        lora.correct(Batch(data["stream"].vecs[:2], data["stream"].texts[:2]))
    with pytest.raises(OcrrError, match="no Linear module named.*lora:targets="):
        fitted(data, TINY + ":targets=q_proj+v_proj")
    with pytest.raises(OcrrError, match="pooling must be one of mean, cls"):
        make_system("lora:pooling=max")
    with pytest.raises(OcrrError, match="rank must be an integer ≥ 1"):
        make_system("lora:rank=0")
    empty = tmp_path / "not-a-model"  # a folder without config or weights: fails fast, no network
    empty.mkdir()
    with pytest.raises(OcrrError, match="could not load the encoder .*not-a-model.*Hugging Face id"):
        LoRA(model=str(empty), progress=False, labels=data["labels"]).fit(data["seed"])
    if not torch.cuda.is_available():
        with pytest.raises(OcrrError, match="no CUDA GPU"):
            fitted(data, TINY + ":device=cuda")
    assert lora.predict(data["eval"][:0]) == []


def test_no_matching_target_modules_is_a_clear_error():
    class NoAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(4, 8)
            self.down = torch.nn.Linear(8, 4)

    with pytest.raises(OcrrError, match="no attention query/value projections.*named down, up.*lora:targets="):
        resolve_targets(NoAttention(), None, "toy")
    assert resolve_targets(NoAttention(), "up", "toy") == ["up"]


@pytest.mark.parametrize("pair", [("query_proj", "value_proj"), ("q_lin", "v_lin"), ("q_proj", "v_proj")])
def test_targets_are_resolved_for_other_architectures(pair):
    block = torch.nn.Module()
    for leaf in (pair[0], "k", pair[1], "out"):
        setattr(block, leaf, torch.nn.Linear(6, 6))
    model = torch.nn.ModuleDict({"layer0": block})
    assert resolve_targets(model) == [f"layer0.{pair[0]}", f"layer0.{pair[1]}"]


def test_missing_peft_is_an_ocrr_error_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(OcrrError, match=r"pip install -e '\.\[lora\]'") as info:
        make_system("lora")
    assert isinstance(info.value.__cause__, ImportError)  # conformance skips on this


def test_hyperparameters_round_trip_and_capabilities():
    lora = make_system("lora:lr=0.001:targets=query+value")
    hyper = lora.hyperparameters()
    assert hyper["lr"] == 0.001 and hyper["targets"] == "query+value" and hyper["model"] == "minilm"
    assert LoRA(**hyper).hyperparameters() == hyper
    # execution settings are constructor arguments, but not hyperparameters (not in task ids)
    assert not set(LoRA.execution_settings) & set(hyper)
    run_elsewhere = make_system(
        "lora:lr=0.001:targets=query+value:device=cuda:threads=2:progress=false:predict_batch_size=7"
    )
    assert (run_elsewhere.device, run_elsewhere.threads, run_elsewhere.predict_batch_size) == ("cuda", 2, 7)
    assert run_elsewhere.hyperparameters() == hyper
    assert set(execution_settings("lora")) == {"device", "threads", "progress", "predict_batch_size"}
    assert LoRA.reads_text is True and LoRA.conformance_overrides["model"] == "tiny-random"
    paper = make_system("lora_deberta").hyperparameters()  # built lazily: no hub access needed to construct
    assert (paper["model"], paper["pooling"], paper["rank"], paper["alpha"], paper["lr"], paper["seed_epochs"]) == (
        "microsoft/deberta-v3-large",
        "cls",
        8,
        16,
        5e-4,
        2,
    )
