"""The lean training steps equal torch's own, bit for bit, step after step."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from tests.conftest import python_output

from ocrr.checks.data import check_data
from ocrr.systems.heads.lean_steps import AdamW, FusedAdamW, clip_grad_norm, linear_cross_entropy_grads
from ocrr.systems.heads.refine import RefiningHead
from ocrr.systems.heads.training import SeedTraining, init_linear, train_seed
from ocrr.systems.registry import make_system
from ocrr.utils.threads import pinned_threads


def _data(n: int = 300, dim: int = 24, classes: int = 9, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    return x, y


def _heads(kind: str, dim: int = 24, classes: int = 9) -> torch.nn.Module:
    torch.manual_seed(1)
    if kind == "linear":
        return torch.nn.Linear(dim, classes)
    return torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.ReLU(), torch.nn.Linear(16, classes))


def _train(head, x, y, *, lean: bool, no_graph: bool, lr: float, weight_decay: float, clip, penalty, steps=60):
    """Mini-batches of 1..16 rows (sizes vary, so the last partial batch is covered)."""
    params = list(head.parameters())
    if lean:
        opt = AdamW(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(7)
    for step in range(steps):
        idx = torch.randperm(len(y), generator=gen)[: 1 + step % 16]
        if no_graph:
            linear_cross_entropy_grads(head, x[idx], y[idx])
        else:
            opt.zero_grad() if lean else opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(head(x[idx]), y[idx])
            if penalty is not None:
                loss = loss + penalty(head)
            loss.backward()
        if clip is not None:
            if lean:
                clip_grad_norm(params, clip)
            else:
                torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
    return head


def _l2(anchor: torch.nn.Module):
    kept = {k: v.detach().clone() for k, v in anchor.named_parameters()}
    return lambda h: 0.1 * sum((p - kept[k]).square().sum() for k, p in h.named_parameters())


@pytest.mark.parametrize("kind", ["linear", "mlp"])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
@pytest.mark.parametrize("clip", [None, 0.05])
@pytest.mark.parametrize("with_penalty", [False, True])
def test_adamw_and_clip_equal_torch(kind, weight_decay, clip, with_penalty):
    x, y = _data()
    base = _heads(kind)
    penalty = _l2(base) if with_penalty else None
    settings = dict(lr=3e-2, weight_decay=weight_decay, clip=clip, penalty=penalty)
    with pinned_threads(1):
        theirs = _train(copy.deepcopy(base), x, y, lean=False, no_graph=False, **settings)
        ours = _train(copy.deepcopy(base), x, y, lean=True, no_graph=False, **settings)
    for (name, a), b in zip(theirs.named_parameters(), ours.parameters()):
        assert torch.equal(a, b), name
    assert not torch.equal(next(base.parameters()), next(ours.parameters()))  # it did train


@pytest.mark.parametrize("clip", [None, 0.05])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
def test_linear_grads_without_graph_equal_autograd(clip, weight_decay):
    x, y = _data(classes=40)  # more labels than some batches have rows
    base = _heads("linear", classes=40)
    settings = dict(lr=1e-2, weight_decay=weight_decay, clip=clip, penalty=None)
    with pinned_threads(1):
        theirs = _train(copy.deepcopy(base), x, y, lean=False, no_graph=False, **settings)
        ours = _train(copy.deepcopy(base), x, y, lean=True, no_graph=True, **settings)
    assert torch.equal(theirs.weight, ours.weight)
    assert torch.equal(theirs.bias, ours.bias)


def test_one_step_gradients_equal_autograd_values_and_layout():
    x, y = _data(n=40, classes=6)
    head = _heads("linear", classes=6)
    twin = copy.deepcopy(head)
    F.cross_entropy(head(x[:13]), y[:13]).backward()
    linear_cross_entropy_grads(twin, x[:13], y[:13])
    for a, b in ((head.weight.grad, twin.weight.grad), (head.bias.grad, twin.bias.grad)):
        assert a is not None and b is not None
        assert torch.equal(a, b)
        assert a.stride() == b.stride()


def test_adamw_skips_a_parameter_without_gradient_as_torch_does():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    a2, b2 = copy.deepcopy(a), copy.deepcopy(b)
    theirs, ours = torch.optim.AdamW([a, b], lr=0.1), AdamW([a2, b2], lr=0.1, weight_decay=1e-2)
    for step in range(4):
        for p, q in ((a, a2), (b, b2)):
            p.grad = q.grad = None
        a.grad, a2.grad = torch.full((3,), 0.5 + step), torch.full((3,), 0.5 + step)
        if step % 2:
            b.grad, b2.grad = torch.full((2,), -1.0), torch.full((2,), -1.0)
        theirs.step()
        ours.step()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert ours.steps == [4, 2]


def _torch_train_on(self, head, x, y, penalty=None):
    """RefiningHead.train_on as it was written with torch's optimiser, clipping and autograd."""
    if not len(y):
        return
    opt = torch.optim.AdamW(head.parameters(), lr=self.lr, weight_decay=self.weight_decay)
    for _ in range(self.epochs):
        order = torch.randperm(len(y), generator=self.batch_generator_)
        for lo in range(0, len(y), self.batch_size):
            idx = order[lo : lo + self.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(head(x[idx]), y[idx])
            if penalty is not None:
                loss = loss + penalty(head)
            loss.backward()
            if self.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(head.parameters(), self.clip_norm)
            opt.step()


@pytest.mark.parametrize(
    "spec",
    ["cft:clip_norm=0.1", "online_l2", "online_ewc", "mir:candidates=8", "cft:head=mlp:hidden=8", "offline_refining"],
)
def test_refining_systems_equal_their_torch_training(spec, monkeypatch):
    """Whole systems: the lean steps (with and without a graph) give the same heads, hence
    the same answers, as torch's optimiser, clipping and autograd."""
    data = check_data()
    stream = data.stream[:48]

    def run():
        system = make_system(spec, labels=data.labels, seed=3).fit(data.seed)
        for lo in range(0, len(stream), 12):
            system.correct(stream[lo : lo + 12])
        if hasattr(system, "end_of_stream"):
            system.end_of_stream()
        return system

    with pinned_threads(1):
        ours = run()
        monkeypatch.setattr(RefiningHead, "train_on", _torch_train_on)
        theirs = run()
    for a, b in zip(ours.head_.parameters(), theirs.head_.parameters()):
        assert torch.equal(a, b)
    assert ours.predict(data.stream) == theirs.predict(data.stream)


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4, 1e-2])
def test_fused_adamw_equals_torchs_fused_optimiser(weight_decay):
    """Gradients that change sign and size, and a parameter that has none on odd steps."""
    a, b = torch.nn.Parameter(torch.linspace(-1, 1, 12).reshape(3, 4)), torch.nn.Parameter(torch.ones(3))
    a2, b2 = copy.deepcopy(a), copy.deepcopy(b)
    theirs = torch.optim.AdamW([a, b], lr=0.05, weight_decay=weight_decay, fused=True)
    ours = FusedAdamW([a2, b2], lr=0.05, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(3)
    for step in range(9):
        grad = torch.randn(3, 4, generator=gen) * 10.0 ** (step % 3 - 1)
        a.grad, a2.grad = grad.clone(), grad.clone()
        b.grad = b2.grad = None
        if step % 2 == 0:
            b.grad, b2.grad = torch.full((3,), step - 4.0), torch.full((3,), step - 4.0)
        theirs.step()
        ours.step()
        assert torch.equal(a, a2) and torch.equal(b, b2), step
    assert [float(s) for s in ours.steps] == [9.0, 5.0]


def _torch_train_seed(model, x, y, cfg, generator):
    """train_seed as it is written with torch's fused AdamW and autograd (its generic path)."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    for _ in range(cfg.epochs):
        order = torch.randperm(len(y), generator=generator)
        for lo in range(0, len(y), cfg.batch_size):
            idx = order[lo : lo + cfg.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()


@pytest.mark.parametrize(
    ("n", "classes", "cfg"),
    [
        (300, 9, SeedTraining(epochs=4, batch_size=64)),  # a partial last batch
        (90, 40, SeedTraining(epochs=3, batch_size=32, weight_decay=0.0)),  # more labels than rows in a batch
        (256, 5, SeedTraining(epochs=2)),  # one whole batch per epoch
    ],
)
def test_linear_seed_training_equals_torchs(n, classes, cfg):
    """A linear head's seed training (the lean path) leaves the weights, the bias and the last
    batch's gradients exactly as torch's optimiser and autograd do."""
    x, y = _data(n=n, classes=classes)
    heads, gens = [], []
    for _ in range(2):
        gen = torch.Generator().manual_seed(11)
        heads.append(init_linear(24, classes, gen))
        gens.append(gen)
    with pinned_threads(1):
        train_seed(heads[0], x, y, cfg, gens[0])
        _torch_train_seed(heads[1], x, y, cfg, gens[1])
    ours, theirs = heads
    for name in ("weight", "bias"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
        assert torch.equal(getattr(ours, name).grad, getattr(theirs, name).grad), name
    assert torch.equal(gens[0].get_state(), gens[1].get_state())  # the same draws, in order
    assert not ours.training


def test_seed_training_of_a_linear_head_builds_no_torch_optimiser():
    """The first torch optimiser in a process imports torch._dynamo (about 0.9 s in each
    sweep worker); training a seed head must not."""
    code = (
        "import sys, torch\n"
        "from ocrr.systems.heads.training import SeedTraining, init_linear, train_seed\n"
        "g = torch.Generator().manual_seed(0)\n"
        "train_seed(init_linear(8, 3, g), torch.randn(40, 8), torch.arange(40) % 3, SeedTraining(epochs=2), g)\n"
        "print('torch._dynamo' in sys.modules)"
    )
    assert python_output(code) == "False"


def _autograd_correction_grads(self, x, y):
    """OnlineLinear._correction_grads as written with autograd for every loss."""
    self._fitted_head().zero_grad(set_to_none=True)
    self._correction_loss(x, y).backward()


def _autograd_flat_grad(self, x, y):
    """AGEM._flat_grad as written with torch.autograd.grad."""
    head = self._fitted_head()
    loss = F.cross_entropy(head(x), y)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(head.parameters()))])


@pytest.mark.parametrize(
    "spec",
    [
        "online_linear",
        "ewc",
        "ewc:ewc_lambda=50",
        "a_gem",
        "a_gem:memory_batch=5",
        "lwf",
        "lwf:lwf_lambda=0.3:temperature=3",
        "lwf:lwf_lambda=0",
    ],
)
@pytest.mark.parametrize("label_list", ["every label", "the seed's labels"])
def test_correction_steps_equal_their_autograd_steps(spec, label_list, monkeypatch):
    """Whole systems: a correction's step without the graph leaves the same head, hence the
    same answers, as autograd's. Given only the seed's labels, the head grows for each label
    first met in a correction (LwF then distils into its first rows only)."""
    from ocrr.systems.heads.continual import AGEM, LwF
    from ocrr.systems.heads.linear import OnlineLinear

    data = check_data()
    stream = data.stream[:60]
    labels = data.labels if label_list == "every label" else sorted(set(data.seed.labels))

    def run(corrected=True):
        system = make_system(spec, labels=labels, seed=2).fit(data.seed)
        for lo in range(0, len(stream) if corrected else 0, 7):
            system.correct(stream[lo : lo + 7])
        return system

    with pinned_threads(1):
        seeded, ours = run(corrected=False), run()
        for cls in (OnlineLinear, LwF):
            monkeypatch.setattr(cls, "_correction_grads", _autograd_correction_grads)
        monkeypatch.setattr(AGEM, "_flat_grad", _autograd_flat_grad)
        theirs = run()
    assert not torch.equal(seeded.head_.weight, ours.head_.weight)  # the corrections moved it
    if label_list != "every label":
        assert ours.head_.out_features > seeded.head_.out_features  # it grew
    for a, b in zip(ours.head_.parameters(), theirs.head_.parameters()):
        assert torch.equal(a, b)
    assert ours.predict(data.stream) == theirs.predict(data.stream)
