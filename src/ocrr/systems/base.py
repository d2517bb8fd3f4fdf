"""The System base class every classifier under test implements, and input checks.

A system is fitted once on the seed set (its "upstream" state), then sees a stream:
``predict`` is called on each item and, when the correction policy says so,
``correct`` with the true label. Evaluation calls ``predict`` on whole eval sets.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import NotFittedError, OcrrError
from ocrr.specs import FROM_SIGNATURE, Option, validate


@dataclass(frozen=True)
class Footprint:
    """What a system stores: retrieval entries, trainable parameters, bytes in memory."""

    entries: int = 0
    params: int = 0
    bytes: int = 0
    extra: dict = field(default_factory=dict)


# Constructor arguments every factory receives from the registry: they say which run this
# is, not how the system works, so they are never hyperparameters.
RUN_ARGUMENTS = ("name", "labels", "seed")


class System(ABC):
    """Base class of the systems under test: four methods, a few declared capabilities.

    Conventions (scikit-learn's): the constructor only stores its arguments, each as an
    attribute of the same name (this class's constructor does it for every declared option,
    so most systems write none); ``fit`` learns the seed state into attributes whose names
    end in ``_`` and returns ``self``. The runner calls only the four abstract methods, so a
    system that does not inherit this class still runs; inheriting gives the defaults below.

    Capabilities, read by the runner and by ``ocrr.checks``:

    * ``learns``: False for a system whose predictions corrections never change (static
      strawmen); the runner then skips re-predicting after a correction.
    * ``reads_text``: True for a system that reads ``batch.texts`` (vectors are only
      validated); it must refuse a batch without texts.
    * ``execution_settings``: constructor arguments that say how to run, not what to
      compute (device, threads, progress bars, scratch folders). They are left out of
      ``hyperparameters()``, which is recorded in results and hashed into sweep task ids.
    * ``takes_free_cores``: True for a system whose results do not depend on its thread count
      and that runs faster on more threads (a transformer): when a sweep's last tasks leave
      cores idle, a worker raises its torch and BLAS threads between checkpoints
      (``ocrr.utils.threads.CoreBudget``). Declare it only with a test that its results at
      one and at two threads are identical; the default keeps one thread. A system that
      instead runs independent pieces of work at once, each on one thread (llm_icl scores
      several prompts at once), also defines ``use_free_cores(share)``: its pools then stay
      on one thread and the worker hands it ``share``, a callable giving the threads it may
      use now (read it again as it runs: it grows as the sweep's other runs finish).
    * ``options``: each option declared once (``ocrr.specs.Option``: default, type,
      constraint, help), merged along the class hierarchy by ``declared_options()`` (a
      subclass's declaration wins). The constructor takes each as a keyword argument, checks
      a given value against its declaration (``make_system`` checks a spec before that) and
      keeps it as given in the attribute of the same name; the class's signature is
      generated from the declarations, so ``help()`` and the registry see every option. A
      subclass writes ``__init__`` only for real work (checks that involve several options,
      empty learned state), taking ``**kwargs`` and calling ``super().__init__(**kwargs)``
      first. (An option declared without a default is read from a hand-written signature,
      as plug-ins written before this did.)
    * ``default_name``: the ``name`` a system built without one gets.
    * ``widened_options``: options kept as their declared kind's value (see the attribute).
    * ``uncertainty(batch)``: optional, one number per item, higher where the prediction is
      less sure, with no side effects (selective feedback, ``budget=f:uncertainty``, ranks
      reveals by it). The default, None, means "not offered": the budget is then spent by the
      seeded random score, i.e. like ``budget=f:random``.
    * ``anticipate(batch)``: optional, a speed hint with the stream's items before they are
      predicted; each prediction must be the one made of that item alone without the hint
      (``ocrr.checks`` compares them).
    """

    name: str
    learns: bool = True
    reads_text: bool = False
    execution_settings: tuple[str, ...] = ()
    takes_free_cores: bool = False
    options: ClassVar[dict[str, Option]] = {}
    default_name: ClassVar[str] = "system"
    # Options kept as their declared kind (a number given as 1 kept as 1.0): the systems whose
    # constructors always converted them, so that their records and task ids do not move.
    widened_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, labels: Iterable[str] | None = None, seed: int = 0, name: str | None = None, **options: Any):
        declared = _merged_options(type(self))
        unknown = [key for key in options if key not in declared]
        if unknown:  # as Python refuses an argument no signature names
            raise TypeError(f"{type(self).__name__}() got unexpected keyword argument(s) {', '.join(unknown)}")
        generated = _generated_options(type(self))  # (a hand-written constructor sets its own)
        missing = [key for key, option in generated.items() if option.default is FROM_SIGNATURE and key not in options]
        if missing:
            raise TypeError(f"{type(self).__name__}() missing required keyword argument(s) {', '.join(missing)}")
        self.name = self.default_name if name is None else name
        checked = validate(self.name, declared, options)  # a direct call gets the message a spec gets
        for key, option in {**generated, **{key: declared[key] for key in options}}.items():
            value = checked[key] if key in self.widened_options and key in checked else options.get(key, option.default)
            setattr(self, key, value)  # as given: an int stays an int (the record, task ids)
        self.labels = labels
        self.seed = seed

    if TYPE_CHECKING:  # the options are set from their declarations, which type checkers do not read

        def __getattr__(self, name: str) -> Any: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # What inspect.signature, help() and the registry read: every option with its default,
        # when this class's constructor reaches System's (else None: its own signature, as written).
        cls.__signature__ = (  # type: ignore[attr-defined]
            inspect.Signature(
                [
                    inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
                    for p in constructor_parameters(cls)
                ]
            )
            if _reaches_system_constructor(cls)
            else None
        )

    @classmethod
    def declared_options(cls) -> dict[str, Option]:
        """Every constructor argument's declaration, in signature order, defaults filled in."""
        return dict(_declared_options(cls))

    @abstractmethod
    def fit(self, seed: Batch) -> System:
        """Learn the seed state from the seed set (labels given); return self."""

    @abstractmethod
    def predict(self, batch: Batch) -> list[str | None]:
        """One label (or None) per item; must not change the system."""

    @abstractmethod
    def correct(self, batch: Batch) -> None:
        """Learn from corrected items (labels given), in order."""

    @abstractmethod
    def footprint(self) -> Footprint:
        """What the system stores now."""

    def uncertainty(self, batch: Batch) -> np.ndarray | None:
        """Per item, how unsure the prediction is (higher: less sure); None: not offered."""
        return None

    def anticipate(self, batch: Batch) -> None:
        """A hint, before a stream is walked: these items will be predicted, one or a few at
        a time, in this order, each by the state it arrives to. A system may prepare for them
        (the substrate pre-scores them against its seed entries) but must predict each item
        exactly as it predicts it alone without the hint, and learn nothing from it. The
        default does nothing."""
        return None

    def hyperparameters(self) -> dict:
        """Constructor arguments that change what the system computes, by name.

        The default reads the constructor signatures (following ``**kwargs`` up the class
        hierarchy) and leaves out RUN_ARGUMENTS and ``execution_settings``. Override it to
        record fewer (e.g. only the knobs a chosen backend uses).
        """
        names = [p.name for p in constructor_parameters(type(self))]
        skip = set(RUN_ARGUMENTS) | set(self.execution_settings)
        missing = [n for n in names if n not in skip and not hasattr(self, n)]
        if missing:
            raise OcrrError(
                f"{type(self).__name__} does not store the constructor argument(s) "
                f"{', '.join(missing)} as attributes of the same name; store them in "
                "__init__ or override hyperparameters()."
            )
        return {n: getattr(self, n) for n in names if n not in skip}

    def _require_fitted(self) -> None:
        """Raise NotFittedError (an OcrrError naming the fix) unless ``fit`` has run."""
        if not self._is_fitted():
            name = getattr(self, "name", type(self).__name__)
            raise NotFittedError(f"{name} is not fitted yet: call fit(seed_batch) first, then predict() or correct().")

    def _is_fitted(self) -> bool:
        """Whether ``fit`` has run: by default, some learned state (a public attribute whose
        name ends in ``_``) is set and not None. Override if learned state is named otherwise."""
        return any(
            key.endswith("_") and not key.startswith("_") and value is not None for key, value in vars(self).items()
        )


def constructor_parameters(cls: type) -> list[inspect.Parameter]:
    """The keyword parameters of ``cls``'s constructor, following ``**kwargs`` up the classes:
    a hand-written constructor's own, then (``System``'s) each declared option not named yet,
    then the run arguments."""
    params: list[inspect.Parameter] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        if init is System.__init__:
            own = [_keyword(key, option.default) for key, option in _generated_options(cls).items()]
            own += [_keyword("labels", None), _keyword("seed", 0), _keyword("name", cls.default_name)]  # type: ignore[attr-defined]
        else:
            own = list(inspect.signature(init).parameters.values())[1:]  # without self
        names = {p.name for p in params}
        params += [p for p in own if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names]
        if not any(p.kind == p.VAR_KEYWORD for p in own):
            break  # this constructor does not pass arguments on to its parents
    return params


def _reaches_system_constructor(cls: type) -> bool:
    """Whether ``cls``'s constructor hands ``**kwargs`` on up to ``System.__init__``."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is System.__init__:
            return True
        if init is not None and klass is not object:
            own = list(inspect.signature(init).parameters.values())
            if not any(p.kind == p.VAR_KEYWORD for p in own):
                return False
    return False


def _keyword(name: str, default: Any) -> inspect.Parameter:
    if default is FROM_SIGNATURE:  # declared without a default, and no signature gives one: required
        default = inspect.Parameter.empty
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)


@functools.cache
def _merged_options(cls: type) -> dict[str, Option]:
    """Every option declared along the class hierarchy: the class's own first, in declaration
    order, then each parent's not declared yet (a subclass's declaration wins)."""
    merged: dict[str, Option] = {}
    for klass in cls.__mro__:
        for key, option in vars(klass).get("options", {}).items():
            merged.setdefault(key, option)
    return merged


@functools.cache
def _generated_options(cls: type) -> dict[str, Option]:
    """The options ``System.__init__`` sets, to the value given or the declared default, and
    the generated signature lists: the declared ones no hand-written constructor on the way up
    names (an older plug-in's own signature keeps taking and setting its own)."""
    named: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or init is System.__init__ or klass is object:
            continue
        named |= {p.name for p in list(inspect.signature(init).parameters.values())[1:]}
    named |= set(RUN_ARGUMENTS)
    return {key: option for key, option in _merged_options(cls).items() if key not in named}


@functools.cache
def _declared_options(cls: type) -> dict[str, Option]:
    declared = _merged_options(cls)
    out = {}
    for p in constructor_parameters(cls):
        if p.name in RUN_ARGUMENTS:
            continue
        option = declared.get(p.name, Option(kind=object, help="(not declared)"))  # a plug-in's own argument
        out[p.name] = dataclasses.replace(option, default=p.default) if option.default is FROM_SIGNATURE else option
    return out


def check_vectors(vecs: np.ndarray, dim: int | None, what: str = "vectors") -> np.ndarray:
    """Validate a batch of vectors: 2-D, finite, the expected dimension; return float32.

    Raises OcrrError naming the fix; never lets a wrong shape or a NaN reach a score.
    """
    arr = np.asarray(vecs)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise OcrrError(f"{what} must be a 2-D array (n, d); got shape {arr.shape}. Pass one row per item.")
    if dim is not None and arr.shape[1] != dim:
        raise OcrrError(
            f"{what} have dimension {arr.shape[1]} but this system was fitted on dimension {dim}. "
            "Encode queries with the same encoder as the seed set (see --encoder)."
        )
    if not np.isfinite(arr).all():  # the method, not np.all: this runs once per correction
        bad = int(np.flatnonzero(~np.all(np.isfinite(arr), axis=1))[0])
        raise OcrrError(
            f"{what} row {bad} contains NaN or infinity. Check the encoder output or the precomputed "
            "embedding file; ocrr will not score non-finite vectors."
        )
    if arr.dtype == np.float32 and arr.flags.c_contiguous:
        return arr
    return np.ascontiguousarray(arr, dtype=np.float32)


def require_labels(batch: Batch, who: str) -> Sequence[str]:
    if batch.labels is None or len(batch.labels) != len(batch):
        raise OcrrError(f"{who}.correct needs one label per item; the batch has none. Pass Batch(..., labels=[...]).")
    return batch.labels
