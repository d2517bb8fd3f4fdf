"""The CMR refinement methods (ocrr.systems.heads.refine, ocrr.systems.replay.cmr) on small data."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ocrr.batch import Batch
from ocrr.checks.data import check_data
from ocrr.errors import OcrrError
from ocrr.systems.heads.refine import per_example_fisher
from ocrr.systems.registry import make_system
from ocrr.systems.replay.cmr import MaxLossReplay, MIRReplay

REFINING = ["cft", "online_l2", "online_ewc", "er", "mir", "max_loss", "mir_l2", "offline_refining"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data():
    return check_data()


def fitted(spec, data, seed=0):
    return make_system(spec, labels=data.labels, seed=seed).fit(data.seed)


def params(system):
    return torch.cat([p.detach().reshape(-1) for p in system.head_.parameters()])


def toy_memory():
    """Upstream items on three axes, four of each: class a at e0, b at e1, c at e2, and four
    "hard" items at e1 labelled c. E_t: two items at e0 corrected to b (interferes with a).
    The head is set by hand (``toy_head``) so the losses are known in advance."""
    eye = np.eye(3, dtype=np.float32)
    vecs = eye[[0] * 4 + [1] * 4 + [2] * 4 + [1] * 4]
    labels = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["c"] * 4
    return Batch(vecs, None, labels), Batch(eye[[0, 0]], None, ["b", "b"])


def toy_head(system):
    """Logits 5 x0, 20 x1, 5 x2: class a fits with margin 5 (loss ~0.01) and the hard items
    have loss ~20. Fine-tuning on E_t moves every logit by about lr per step (Adam), so after
    S = epochs * lr: a's loss ~ 4S - 5 (the largest increase), the hard items' ~ 20 + 2S (the
    largest loss)."""
    with torch.no_grad():
        system.head_.weight.copy_(torch.diag(torch.tensor([5.0, 20.0, 5.0])))
        system.head_.bias.zero_()


class Recording:
    """Mixin: remember the virtual model and each memory's candidates, scores and picks."""

    def _choose(self, x, y):
        self.seen, self.before = [], copy.deepcopy(self.head_)  # f_{t-1}, grown to the new label
        return super()._choose(x, y)

    def interference(self, virtual, x, y):
        scores = super().interference(virtual, x, y)
        self.seen.append((copy.deepcopy(virtual), x.clone(), y.clone(), scores.clone()))
        return scores


class RecordingMaxLoss(Recording, MaxLossReplay):
    pass


class RecordingMIR(Recording, MIRReplay):
    pass


@pytest.mark.parametrize("cls", [RecordingMaxLoss, RecordingMIR])
def test_conditional_replay_picks_the_top_scores_of_each_memory(cls):
    seed, errors = toy_memory()
    system = cls(labels=["a", "b", "c"], seed=0, candidates=1000, replay_size=4, epochs=20, lr=0.2).fit(seed)
    toy_head(system)
    system.correct(errors)
    (virtual, x, y, scores), _ = system.seen  # upstream memory, then the (empty) online one
    assert len(x) == len(seed)  # candidates >= memory: every upstream item is a candidate
    after_virtual = F.cross_entropy(virtual(x), y, reduction="none").detach()
    expected = after_virtual
    if cls is RecordingMIR:
        expected = after_virtual - F.cross_entropy(system.before(x), y, reduction="none").detach()
    torch.testing.assert_close(scores, expected)
    assert system.last_replay_ == (4, 0)  # the online memory is empty on the first call
    assert system.online_.n == 2  # E_t joins M_o after the call


def test_max_loss_takes_hard_items_and_mir_the_interfered_ones():
    """On the toy, the hard items keep the largest losses (MaxLoss's pick), while the class-a
    items at e0, where b was taught, gain the most loss (MIR's pick)."""
    seed, errors = toy_memory()
    picked = {}
    for cls in (RecordingMaxLoss, RecordingMIR):
        system = cls(labels=["a", "b", "c"], seed=0, candidates=1000, replay_size=8, epochs=20, lr=0.2).fit(seed)
        toy_head(system)
        system.correct(errors)
        (_, x, y, scores), _ = system.seen  # candidates in drawn order
        top = torch.argsort(scores, descending=True)[:4]
        picked[cls] = sorted(zip(x[top].argmax(dim=1).tolist(), system.space_.decode(y[top].numpy())))
        assert system.last_replay_ == (8, 0)
    assert picked[RecordingMaxLoss] == [(1, "c")] * 4  # the hard items
    assert picked[RecordingMIR] == [(0, "a")] * 4  # class a, where the new errors were taught


def test_online_ewc_with_lambda_zero_equals_cft(data):
    cft, ewc = fitted("cft", data), fitted("online_ewc:ewc_lambda=0", data)
    for lo, hi in [(0, 7), (7, 8), (8, 30)]:
        cft.correct(data.stream[lo:hi])
        ewc.correct(data.stream[lo:hi])
    assert cft.predict(data.eval) == ewc.predict(data.eval)
    assert torch.equal(params(cft), params(ewc))


def test_online_ewc_fisher_is_the_mean_squared_per_example_gradient_and_gamma_is_applied_once(data):
    system = fitted("online_ewc:ewc_gamma=0.5", data)
    head = system.head_
    x, y = torch.from_numpy(data.seed.vecs[:9]), torch.from_numpy(system.space_.encode(data.seed.labels[:9]))
    fisher = per_example_fisher(head, x, y)
    # closed form for a linear softmax head: d CE / dW = (p - e_y) x^T, d CE / db = p - e_y
    with torch.no_grad():
        r = torch.softmax(head(x), dim=1)
        r[torch.arange(9), y] -= 1
    torch.testing.assert_close(fisher["weight"], r.square().T @ x.square() / 9)
    torch.testing.assert_close(fisher["bias"], r.square().mean(dim=0))
    # F <- gamma F + F_t once per call, each F_t at the refined head
    system.correct(data.stream[:10])
    first = {k: v.clone() for k, v in system.fisher_.items()}
    system.correct(data.stream[10:20])
    stream_y = torch.from_numpy(system.space_.encode(data.stream.labels[10:20]))
    latest = per_example_fisher(system.head_, torch.from_numpy(data.stream.vecs[10:20]), stream_y)
    for key in first:
        torch.testing.assert_close(system.fisher_[key], 0.5 * first[key] + latest[key])


def test_online_l2_with_a_large_lambda_stays_near_the_previous_head(data):
    moved = {}
    for spec in ("online_l2:l2_lambda=0", "online_l2:l2_lambda=1000000"):
        system = fitted(spec + ":epochs=10", data)
        system.correct(data.stream[:20])
        start = params(system)
        system.correct(data.stream[20:40])
        moved[spec] = float((params(system) - start).norm())
    free, held = moved.values()
    assert held < 0.2 * free


def test_er_replays_half_from_each_memory(data):
    system = fitted("er:replay_size=32", data)
    system.correct(data.stream[:5])
    assert system.last_replay_ == (32, 0)  # M_o empty: all from M_u
    system.correct(data.stream[5:10])
    assert system.last_replay_ == (27, 5)  # M_o holds only 5: M_u fills the rest
    system.correct(data.stream[10:30])
    assert system.last_replay_ == (22, 10)
    system.correct(data.stream[30:35])
    assert system.last_replay_ == (16, 16)  # M_o holds 30: half from each
    assert len(system.online_) == 35 and len(system.upstream_) == len(data.seed)


def test_er_replays_every_k_calls_and_in_two_stages(data):
    system = fitted("er:replay_every=3:mode=two_stage", data)
    replayed = []
    for i in range(7):
        system.correct(data.stream[i * 3 : i * 3 + 3])
        replayed.append(sum(system.last_replay_) > 0)
    assert replayed == [True, False, False, True, False, False, True]
    mixed = fitted("er:replay_every=3", data)
    for i in range(7):
        mixed.correct(data.stream[i * 3 : i * 3 + 3])
    assert not torch.equal(params(system), params(mixed))


@pytest.mark.parametrize("spec", REFINING + ["cmr_frozen", "cft:head=mlp", "mir_l2:head=mlp"])
def test_same_seed_same_refinement(spec, data):
    runs = []
    for _ in range(2):
        system = fitted(spec, data, seed=5)
        system.correct(data.stream[:10])
        system.correct(data.stream[10])
        runs.append((system.predict(data.eval), params(system)))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("spec", REFINING + ["cft:head=mlp", "online_ewc:head=mlp"])
def test_each_learns_a_corrected_label(spec, data):
    system = fitted(spec, data)
    item = Batch(data.stream.vecs[:1], None, ["brand_new"])
    for _ in range(5):
        system.correct(item)
    if spec == "offline_refining":  # learns once, when the stream ends
        system.end_of_stream()
    assert system.predict(item) == ["brand_new"]


@pytest.mark.parametrize("spec", REFINING)
def test_an_episode_of_errors_is_fixed_right_away(spec, data):
    """EFR on the checks' data: 24 errors from four classes the head never trained on (10 epochs:
    the default 5 leaves rows that never saw an item behind the trained ones here)."""
    system = fitted(spec + ":epochs=10", data)
    episode = data.stream[:24]
    assert not any(p == t for p, t in zip(system.predict(episode), episode.labels))
    system.correct(episode)
    if spec == "offline_refining":  # learns once, when the stream ends
        system.end_of_stream()
    assert np.mean([p == t for p, t in zip(system.predict(episode), episode.labels)]) >= 0.8


def test_frozen_upstream_never_changes(data):
    system = fitted("cmr_frozen", data)
    before = system.predict(data.eval)
    system.correct(data.stream[:30])
    assert system.predict(data.eval) == before and not system.learns


def test_linear_upstream_head_is_the_shared_seed_head(data):
    ours, online = fitted("cft", data), fitted("online_linear", data)
    assert torch.equal(params(ours), params(online))


@pytest.mark.parametrize(
    "spec, words",
    [
        ("cft:lr=-0.1", "lr must be a number > 0"),
        ("cft:epochs=0", "epochs must be an integer ≥ 1"),
        ("cft:batch_size=2.5", "batch_size must be an integer ≥ 1, got 2.5"),
        ("cft:head=cnn", "head must be one of linear, mlp"),
        ("online_l2:l2_lambda=-1", "l2_lambda must be a number ≥ 0"),
        ("online_ewc:ewc_gamma=-0.5", "ewc_gamma"),
        ("er:mode=sequential", "mode must be one of mixed, two_stage"),
        ("er:replay_every=0", "replay_every"),
        ("mir:candidates=0", "candidates"),
    ],
)
def test_bad_hyperparameters_say_which_and_how(spec, words):
    with pytest.raises(OcrrError, match=words):
        make_system(spec, labels=["a", "b"])


def test_offline_refining_serves_f0_then_learns_every_error_once_at_the_end(data):
    system, frozen = fitted("offline_refining", data), fitted("cmr_frozen", data)
    system.correct(data.stream[:10])
    system.correct(data.stream[10:25])
    assert len(system.online_) == 25
    assert torch.equal(params(system), params(frozen))  # f_0 serves the whole stream
    assert system.predict(data.eval) == frozen.predict(data.eval)
    system.end_of_stream()
    f0 = torch.cat([p.detach().reshape(-1) for p in system.upstream_head_.parameters()])
    assert torch.equal(f0, params(frozen))  # f_0 itself is kept unchanged
    assert not torch.equal(params(system), f0)
    # f_T is f_0 fine-tuned on the kept errors: it fixes most of them
    fixed = np.mean([p == t for p, t in zip(system.predict(data.stream[:25]), data.stream[:25].labels)])
    before = np.mean([p == t for p, t in zip(frozen.predict(data.stream[:25]), data.stream[:25].labels)])
    assert fixed > before
