"""Correction policies: after each prediction, does the user correct it, with what, and when?

Only wrong predictions are corrected, except under ``all`` (the online-learning setting of
EvalOCL), which reveals every item's label, right or wrong. A random policy with probability p draws
one uniform number per stream position from a generator derived from the run seed
alone, and corrects position i when the prediction is wrong and u_i < p. Every system
in a run therefore meets the same coins, and random10's coins are a subset of random50's.

Realistic feedback composes with any of them as more ``:``-separated options; the
draws behind them live in ``ocrr.policies.feedback`` and, like the coins, depend on the run seed alone:

* ``noise=<rate>[:uniform|confusable]``: a revealed label is replaced by a wrong one with that
  probability: any other label of the dataset, uniformly, or the most confusable one (the
  seed-set class whose centroid is nearest the item, other than its own);
* ``delay=<items>`` or ``delay=geometric:<mean>``: a correction reaches the system that many
  stream items after it was made (items predicted meanwhile see the old state);
* ``budget=<fraction>[:uncertainty|random]``: only that fraction of the reveals is made, chosen
  by the system's uncertainty (``System.uncertainty``) or by a seeded random score.

``oracle:noise=0.3:confusable:delay=50`` is one spec; ``Policy.name`` is its canonical form
(every option spelled out, in a fixed order), which is what task ids hash. Without options a
policy and its name are exactly what they were before.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from ocrr.errors import OcrrError
from ocrr.registry import Registry
from ocrr.specs import Option, format_value, parse_spec, spec_name, validate

NAMED = {"oracle": 1.0, "random50": 0.5, "random10": 0.1}  # fixed correction probabilities
NAMES = "oracle, all, random50, random10 or random:<p>"
NOISE_KINDS = ("uniform", "confusable")
SELECTIONS = ("uncertainty", "random")
EXAMPLE = "oracle:noise=0.1:confusable:delay=geometric:50:budget=0.1:uncertainty"


@dataclass(frozen=True)
class Policy:
    name: str
    p: float
    reveals_right: bool = False  # `all`: right predictions are revealed (and learned from) too
    noise: float = 0.0  # probability that a revealed label is replaced by a wrong one
    noise_kind: str = "uniform"  # which wrong one: uniform or confusable
    delay: float = 0.0  # stream items between a correction and its arrival (geometric: the mean)
    delay_kind: str = "fixed"
    budget: float | None = None  # fraction of the reveals actually made; None: all of them
    select: str = "uncertainty"  # how the budget is spent: uncertainty or random

    def coins(self, seed: int, n: int) -> np.ndarray:
        """Boolean per stream position: would a wrong prediction here be corrected?"""
        if self.p >= 1.0:
            return np.ones(n, bool)
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(b"correction-policy")]))
        return rng.random(n) < self.p

    @property
    def realistic(self) -> bool:
        """Whether any realistic-feedback option is on (else the runner's plain path applies)."""
        return self.noise > 0 or self.delay > 0 or self.budget is not None


# The feedback options, declared once (ocrr.specs). In a spec a bare part qualifies the
# option before it: noise=0.1:confusable sets noise_kind, budget=0.1:random sets select, and
# delay=geometric:50 makes the delay random with mean 50 (delay_mean).
OPTIONS = {
    "noise": Option(0.0, float, low=0, high=1, help="probability that a revealed label is replaced by a wrong one"),
    "noise_kind": Option("uniform", str, choices=NOISE_KINDS, help="which wrong label (noise=<rate>:<kind>)"),
    "delay": Option(0, int, low=0, help="stream items before a correction arrives (delay=geometric:<mean>: random)"),
    "delay_mean": Option(
        None, float, low=0, allow_none=True, help="mean of the geometric delay (delay=geometric:<mean>)"
    ),
    "budget": Option(None, float, gt=0, high=1, allow_none=True, help="fraction of the reveals made; none: all"),
    "select": Option(
        "uncertainty", str, choices=SELECTIONS, help="which reveals the budget makes (budget=<f>:<select>)"
    ),
}
QUALIFIERS = {"noise": "noise_kind", "delay": "delay_mean", "budget": "select"}

# The named policies, without feedback options; ``random`` takes its probability (random:<p>).
POLICIES: Registry[Policy | None] = Registry(
    "policy", hint=f"Use {NAMES}, optionally followed by feedback options, e.g. {EXAMPLE}."
)
for _name, _p in NAMED.items():
    POLICIES.register(_name, Policy(_name, _p))
POLICIES.register("all", Policy("all", 1.0, reveals_right=True))
POLICIES.register("random", None)  # built from its probability
RANDOM_P = Option(None, float, gt=0, high=1, help="random:<p>: probability that a wrong prediction is corrected")


def make_policy(spec: str) -> Policy:
    """'oracle' | 'all' | 'random50' | 'random10' | 'random:<p>' (aliases: random_50, random-50),
    followed by optional ``noise=``, ``delay=``, ``budget=`` options (module docstring)."""
    text = str(spec).strip().lower()
    base = spec_name(text)
    is_random = _key(base) == "random"
    _, given = parse_spec(text, "policy", EXAMPLE, {**QUALIFIERS, base: "p"} if is_random else QUALIFIERS)
    hint = f"Write e.g. {EXAMPLE}."
    p = given.pop("p", None) if is_random else None
    policy = _base_policy(base, None if p is None else RANDOM_P.check("policy random", "p", p, hint), spec)
    if not given:
        return policy
    geometric = given.get("delay") == "geometric"
    if geometric:
        given.pop("delay")
        if given.get("delay_mean") is None:
            raise OcrrError(f"policy {spec!r}: delay=geometric needs its mean in items, e.g. delay=geometric:50.")
    elif "delay_mean" in given:
        raise OcrrError(
            f"policy {spec!r}: delay={format_value(given.get('delay'))} takes no qualifier "
            f"{format_value(given['delay_mean'])}; write delay=<items> or delay=geometric:<mean>."
        )
    values = validate(f"policy {base}", OPTIONS, given, hint)
    fields = {
        "noise": values.get("noise", 0.0),
        "noise_kind": values.get("noise_kind", "uniform"),
        "delay": float(values["delay_mean"] if geometric else values.get("delay", 0)),
        "delay_kind": "geometric" if geometric else "fixed",
        "budget": values.get("budget"),
        "select": values.get("select", "uncertainty"),
    }
    return Policy(_canonical_name(policy.name, fields), policy.p, policy.reveals_right, **fields)


def _key(base: str) -> str:
    return base.replace("_", "").replace("-", "")


def _base_policy(base: str, p: float | None, spec: str) -> Policy:
    key = _key(base)
    if key not in POLICIES:
        raise POLICIES.unknown(base)
    named = POLICIES[key]
    if named is not None:
        return named
    if p is not None:
        return Policy(f"random:{p:g}", p)
    raise OcrrError(f"policy {spec!r}: random needs its probability, a number in (0, 1], e.g. random:0.25.")


def _canonical_name(base: str, f: dict) -> str:
    """Base name plus every option that is on, in a fixed order (what task ids hash)."""
    parts = [base]
    if f["noise"] > 0:
        parts.append(f"noise={f['noise']:g}:{f['noise_kind']}")
    if f["delay"] > 0:
        parts.append(f"delay=geometric:{f['delay']:g}" if f["delay_kind"] == "geometric" else f"delay={f['delay']:g}")
    if f["budget"] is not None:
        parts.append(f"budget={f['budget']:g}:{f['select']}")
    return ":".join(parts)
