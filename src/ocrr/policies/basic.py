"""Correction policies: after each prediction, does the user correct it, with what, and when?

Only wrong predictions are corrected, except under ``all`` (the online-learning setting of
EvalOCL), which reveals every item's label, right or wrong. A random policy with probability p draws
one uniform number per stream position from a generator derived from the run seed
alone, and corrects position i when the prediction is wrong and u_i < p. Every system
in a run therefore meets the same coins, and random10's coins are a subset of random50's.

Realistic feedback (issue 16) composes with any of them as more ``:``-separated options; the
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

NAMED = {"oracle": 1.0, "random50": 0.5, "random10": 0.1}
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


def make_policy(spec: str) -> Policy:
    """'oracle' | 'all' | 'random50' | 'random10' | 'random:<p>' (aliases: random_50, random-50),
    followed by optional ``noise=``, ``delay=``, ``budget=`` options (module docstring)."""
    tokens = [t.strip() for t in str(spec).strip().split(":")]
    base = tokens.pop(0)
    if base.lower().replace("_", "").replace("-", "") == "random" and tokens and "=" not in tokens[0]:
        base += ":" + tokens.pop(0)
    policy = _base_policy(base, spec)
    if not tokens:
        return policy
    return _with_options(policy, tokens, spec)


def _base_policy(base: str, spec: str) -> Policy:
    key = base.lower().replace("_", "").replace("-", "")
    if key == "all":
        return Policy("all", 1.0, reveals_right=True)
    if key in NAMED:
        return Policy(key, NAMED[key])
    if key.startswith("random:"):
        try:
            p = float(key.split(":", 1)[1])
        except ValueError:
            p = -1.0
        if 0.0 < p <= 1.0:
            return Policy(f"random:{p:g}", p)
        raise OcrrError(f"policy {spec!r}: the probability must be a number in (0, 1], e.g. random:0.25.")
    raise OcrrError(f"unknown policy {spec!r}. Use {NAMES}, optionally followed by feedback options, e.g. {EXAMPLE}.")


def _number(spec: str, key: str, text: str, low: float, high: float | None, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value >= low and (high is None or value <= high)):
        raise OcrrError(f"policy {spec!r}: {key}={text!r} must be {what}. Write e.g. {EXAMPLE}.")
    return value


def _with_options(policy: Policy, tokens: list[str], spec: str) -> Policy:
    """Read ``key=value`` tokens, each optionally followed by one bare qualifier token."""
    values: dict = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if "=" not in token:
            raise OcrrError(
                f"policy {spec!r}: {token!r} does not follow an option that takes it. "
                f"Options: noise=<rate>[:uniform|confusable], delay=<items> or "
                f"delay=geometric:<mean>, budget=<fraction>[:uncertainty|random]; e.g. {EXAMPLE}."
            )
        key, text = (s.strip().lower() for s in token.split("=", 1))
        bare = tokens[i + 1].lower() if i + 1 < len(tokens) and "=" not in tokens[i + 1] else None
        if key in values:
            raise OcrrError(f"policy {spec!r}: {key} is given twice; give it once.")
        if key == "noise":
            values[key] = _number(spec, key, text, 0.0, 1.0, "a rate in [0, 1]")
            if bare is not None and bare not in NOISE_KINDS:
                raise OcrrError(
                    f"policy {spec!r}: noise kind {bare!r} must be uniform or confusable, e.g. noise=0.1:confusable."
                )
            values["noise_kind"] = bare or "uniform"
        elif key == "delay":
            if text == "geometric":
                if bare is None:
                    raise OcrrError(
                        f"policy {spec!r}: delay=geometric needs its mean in items, e.g. delay=geometric:50."
                    )
                values[key] = _number(spec, "delay=geometric", bare, 0.0, None, "a mean number of items >= 0")
                values["delay_kind"] = "geometric"
            else:
                if bare is not None:
                    raise OcrrError(
                        f"policy {spec!r}: delay={text} takes no qualifier {bare!r}; write "
                        "delay=<items> or delay=geometric:<mean>."
                    )
                items = _number(spec, key, text, 0.0, None, "a whole number of items >= 0 or geometric:<mean>")
                if items != int(items):
                    raise OcrrError(
                        f"policy {spec!r}: delay={text} must be a whole number of items, or "
                        "write delay=geometric:<mean> for a random delay."
                    )
                values[key] = float(int(items))
                values["delay_kind"] = "fixed"
        elif key == "budget":
            fraction = _number(spec, key, text, 0.0, 1.0, "a fraction in (0, 1]")
            if fraction <= 0:
                raise OcrrError(
                    f"policy {spec!r}: budget=0 reveals nothing; give a fraction in (0, 1], e.g. budget=0.1."
                )
            if bare is not None and bare not in SELECTIONS:
                raise OcrrError(
                    f"policy {spec!r}: budget selection {bare!r} must be uncertainty or random, "
                    "e.g. budget=0.1:uncertainty."
                )
            values[key] = fraction
            values["select"] = bare or "uncertainty"
        else:
            raise OcrrError(f"policy {spec!r}: unknown option {key!r}. Options: noise, delay, budget; e.g. {EXAMPLE}.")
        i += 2 if bare is not None else 1
    fields = {
        **{
            "noise": 0.0,
            "noise_kind": "uniform",
            "delay": 0.0,
            "delay_kind": "fixed",
            "budget": None,
            "select": "uncertainty",
        },
        **values,
    }
    return Policy(_canonical_name(policy.name, fields), policy.p, policy.reveals_right, **fields)


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
