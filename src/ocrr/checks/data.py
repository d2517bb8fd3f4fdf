"""What the checks run on: a small dataset they make themselves, and how they build a system.

The checks are about the System protocol, not accuracy, so the data is small and fast:
12 Gaussian classes in 64 dimensions (8 known, 4 that only the stream brings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.systems.registry import lookup, parse_spec

SEED = 3  # the run seed systems are built with (the determinism check also uses another)


class SystemUnavailable(OcrrError):
    """The system cannot be built here because an optional extra is not installed.

    ``parametrize_with_checks`` turns this into a pytest skip; ``check_system`` raises it.
    """


@dataclass(frozen=True)
class CheckData:
    """Seed set of 8 known classes, a stream of 4 novel ones, and one eval set of all 12.

    Noisy enough that some predictions are wrong (tie-breaks and ranks matter), large
    enough (120 eval queries) that incremental search caches are used, and 64-d rather
    than tinier so per-weight Fisher values (EWC) are in a realistic range.
    """

    labels: list[str]
    seed: Batch
    stream: Batch
    eval: Batch


def clustered_splits(n_classes: int, dim: int, sizes: tuple[int, ...], noise: float, seed: int) -> list[tuple]:
    """(labels, texts, unit float32 vectors) per split of ``sizes`` items per class: unit-norm
    class centroids plus Gaussian noise, classes interleaved as in a real file. Also what the
    test suite's fixtures use, so checks and tests draw the same kind of data."""
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((n_classes, dim))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    splits = []
    for n, tag in zip(sizes, ("train", "test")):
        labels, texts, vecs = [], [], []
        for c in range(n_classes):
            for i in range(n):
                labels.append(f"class_{c:02d}")
                texts.append(f"{tag} item {i} of class {c}")
                vecs.append(centroids[c] + noise * rng.standard_normal(dim))
        order = rng.permutation(len(labels))
        arr = np.asarray(vecs, np.float32)[order]
        arr /= np.linalg.norm(arr, axis=1, keepdims=True)
        splits.append((tuple(labels[i] for i in order), tuple(texts[i] for i in order), arr))
    return splits


def check_data(
    n_classes: int = 12,
    n_known: int = 8,
    dim: int = 64,
    n_train: int = 20,
    n_test: int = 10,
    noise: float = 0.15,
    seed: int = 11,
) -> CheckData:
    """Unit-norm class centroids plus Gaussian noise, each split in an interleaved order."""
    (train_labels, train_texts, train_vecs), (test_labels, test_texts, test_vecs) = clustered_splits(
        n_classes, dim, (n_train, n_test), noise, seed
    )
    train = Batch(train_vecs, list(train_texts), list(train_labels))
    test = Batch(test_vecs, list(test_texts), list(test_labels))
    labels = sorted(set(train_labels))
    known = set(labels[:n_known])
    in_seed = [i for i, label in enumerate(train_labels) if label in known]
    in_stream = [i for i, label in enumerate(train_labels) if label not in known]
    return CheckData(labels, train[np.asarray(in_seed)], train[np.asarray(in_stream)], test)


# What the checks take: a registered spec ("substrate:k=3") or a class/function building a system.
# (Systems are duck-typed here: one written anywhere need not subclass ocrr's System.)
Checkable = str | Callable[..., object]


class Subject:
    """The system under check, as something the checks can build fresh as often as they need.

    ``factory`` is either a registered spec (``"substrate"``, ``"substrate:k=3"``) or a
    callable -- usually the class -- taking ``labels=``, ``seed=`` and hyperparameters as
    keyword arguments, as the registry calls it. A factory's ``conformance_overrides``
    (a dict) are hyperparameters to build it with here, so that a heavy system is checked
    in seconds (e.g. lora on a tiny random encoder).
    """

    def __init__(self, factory: Checkable):
        if isinstance(factory, str):
            base, overrides = parse_spec(factory)
            entry = lookup(base)  # an unknown name fails here, naming the fix
            self.name = factory.strip()
            self.factory = entry.factory
            self._defaults = {**entry.defaults, **self._overrides_of(entry.factory), **overrides}
            self._named = True  # registered factories are told their spec as name=
        elif callable(factory):
            self.name = getattr(factory, "__name__", None) or repr(factory)
            self.factory = factory
            self._defaults = self._overrides_of(factory)
            self._named = False
        else:
            raise OcrrError(
                f"ocrr.checks needs a registered system name or a class/function that builds a "
                f"system, got {type(factory).__name__} {factory!r}. Pass e.g. check_system('substrate') "
                "or check_system(MySystem) -- the class, not an instance: the checks build many."
            )

    @staticmethod
    def _overrides_of(factory: object) -> dict:
        return dict(getattr(factory, "conformance_overrides", None) or {})

    def build(self, labels: Iterable[str], seed: int = SEED, hyperparameters: dict | None = None) -> Any:
        """A new, unfitted system: with the check defaults, or exactly ``hyperparameters``."""
        kwargs = dict(self._defaults if hyperparameters is None else hyperparameters)
        if self._named:
            kwargs["name"] = self.name
        try:
            return self.factory(labels=list(labels), seed=seed, **kwargs)
        except ImportError as err:
            raise self._unavailable(err) from err
        except OcrrError as err:
            if isinstance(err.__cause__, ImportError):  # an extra checked for up front (lora: peft)
                raise self._unavailable(err) from err
            raise

    def fitted(self, data: CheckData, seed: int = SEED) -> Any:
        """A new system fitted on the seed set (a missing extra may only show in fit)."""
        system = self.build(data.labels, seed)
        self.fit(system, data.seed)
        return system

    def fit(self, system: Any, seed: Batch) -> Any:
        """``system.fit(seed)``, whose return value is returned (a missing extra may only show here)."""
        try:
            return system.fit(seed)
        except ImportError as err:
            raise self._unavailable(err) from err

    def capability(self, name: str, default: bool) -> bool:
        """A declared capability (``learns``, ``reads_text``): of a built system if one can be
        built here, else of the factory itself (a class declares them as class attributes)."""
        try:
            return bool(getattr(self.build(["a", "b"]), name, default))
        except Exception:  # unavailable or broken: the checks themselves will say so
            return bool(getattr(self.factory, name, default))

    def anticipates(self) -> bool:
        """Whether the system has an ``anticipate`` hint of its own (not ``System``'s no-op)."""
        from ocrr.systems.base import System

        try:
            method = getattr(type(self.build(["a", "b"])), "anticipate", None)
        except Exception:  # unavailable or broken: the checks themselves will say so
            method = getattr(self.factory, "anticipate", None)
        return callable(method) and method is not System.anticipate

    def _unavailable(self, err: Exception) -> SystemUnavailable:
        return SystemUnavailable(f"{self.name} needs an optional extra that is not installed: {err}")
