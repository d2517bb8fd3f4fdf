"""Every system declares each hyperparameter once (default, type, constraint, help); System's
constructor takes and keeps them, the class signature shows them, and make_system checks a spec
against them before building."""

import inspect
import re

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.specs import FROM_SIGNATURE
from ocrr.systems import REGISTRY, make_system
from ocrr.systems.base import RUN_ARGUMENTS, constructor_parameters
from ocrr.systems.registry import options_of


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_constructor_argument_is_declared_with_its_signature_default(name):
    factory = REGISTRY[name].factory
    declared = factory.declared_options()
    params = {p.name: p.default for p in constructor_parameters(factory) if p.name not in RUN_ARGUMENTS}
    assert list(declared) == list(params)
    for key, option in declared.items():
        assert option.kind is not object, f"{name}: {key} is not declared"
        assert option.default == params[key] and option.default is not FROM_SIGNATURE
        assert option.help, f"{name}: {key} has no help line"
        assert option.accepts(option.default), f"{name}: the default {key}={option.default!r} is refused"


def test_an_alias_lists_its_baked_in_values_as_defaults():
    assert options_of("bounded_fifo_100")["budget"].default == 100
    assert options_of("substrate_k1")["k"].default == 1 and options_of("substrate")["k"].default == 5


def test_the_constructor_gets_the_values_as_written():
    # an int given for a number stays an int: the recorded hyperparameters (and task ids) do not move
    assert make_system("substrate:margin=0").hyperparameters()["margin"] == 0
    assert isinstance(make_system("substrate:margin=0").margin, int)


def test_checks_come_before_the_constructor_runs(monkeypatch):
    from ocrr.systems.registry import Registered
    from ocrr.systems.substrate.core import Substrate

    built = []

    class Spy(Substrate):
        def __init__(self, **kwargs):
            built.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setitem(REGISTRY, "spy", Registered("spy", Spy, "retrieval", "a substrate that records its builds"))
    with pytest.raises(OcrrError, match=r"system spy: k must be an integer in \[1, 100000\], got 'zero'"):
        make_system("spy:k=zero")
    assert not built and make_system("spy:k=3").k == 3 and len(built) == 1


def test_ocrr_systems_name_prints_each_option_with_type_constraint_default_and_help(capsys):
    from ocrr.cli.main import main

    assert main(["systems", "bounded_fifo_100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("bounded_fifo_100 (retrieval): ")
    budget = next(line for line in lines if line.startswith("budget "))
    assert budget.split()[:7] == ["budget", "integer", "an", "integer", "≥", "1", "100"]
    assert "entries searchable at most" in budget
    assert lines[-1] == "Override as bounded_fifo_100:key=value, e.g. --systems bounded_fifo_100:budget=100"
    assert main(["systems", "substrat"]) == 2
    assert "unknown system 'substrat'. Did you mean substrate" in capsys.readouterr().err


def test_a_bad_value_passed_straight_to_a_class_gets_the_specs_message():
    from ocrr.systems.heads.continual import EWC
    from ocrr.systems.replay.ocl import OclReplay

    with pytest.raises(OcrrError, match=re.escape("ewc: ewc_lambda must be a number ≥ 0, got -1.")):
        EWC(ewc_lambda=-1)
    with pytest.raises(OcrrError, match=re.escape("er_uniform: sampler must be one of ")):
        OclReplay(sampler="lifo")
    with pytest.raises(OcrrError, match=re.escape("mine: seed_lr must be a number > 0, got 0.")):
        EWC(seed_lr=0, name="mine")


def test_an_unknown_keyword_is_a_type_error_naming_it():
    from ocrr.systems.heads.continual import EWC

    with pytest.raises(TypeError, match="ewc_lamda"):
        EWC(ewc_lamda=1.0)


def test_the_class_signature_lists_every_declared_option_then_the_run_arguments():
    from ocrr.systems.heads.continual import EWC

    params = inspect.signature(EWC).parameters
    assert list(params) == [
        "ewc_lambda", "fisher_samples", "lr", "seed_epochs", "seed_lr", "seed_weight_decay", "seed_batch_size",
        "labels", "seed", "name",
    ]  # fmt: skip
    assert params["ewc_lambda"].default == 1000.0 and params["lr"].default == 0.05
    assert params["name"].default == "ewc" and params["seed"].default == 0


def test_the_name_defaults_to_the_class_default_name():
    from ocrr.systems.heads.continual import EWC
    from ocrr.systems.substrate.bounded import BoundedFIFO, BoundedReservoir

    assert EWC().name == "ewc" and EWC(name="mine").name == "mine"
    assert BoundedFIFO().name == "bounded_fifo" and BoundedReservoir().name == "bounded_reservoir"


def test_values_are_kept_as_given_unless_the_system_always_widened_them():
    from ocrr.systems.heads.continual import EWC
    from ocrr.systems.hybrid.knn_lm import KNNLM

    ewc = EWC(ewc_lambda=1, fisher_samples=np.int64(7), labels=["a"], seed=3)
    assert isinstance(ewc.ewc_lambda, int) and ewc.hyperparameters()["ewc_lambda"] == 1
    assert type(ewc.fisher_samples) is np.int64 and ewc.labels == ["a"] and ewc.seed == 3
    assert isinstance(KNNLM(tau=1).tau, float)  # knn_lm always recorded tau as a float


def test_a_new_system_declares_its_options_once_and_writes_no_constructor():
    from ocrr.specs import Option
    from ocrr.systems.heads.linear import OnlineLinear

    class Damped(OnlineLinear):
        options = {"damping": Option(0.5, float, low=0, high=1, help="share of each step kept")}
        default_name = "damped"

    system = Damped(damping=0.25, lr=0.1)
    assert (system.name, system.damping, system.lr) == ("damped", 0.25, 0.1)
    assert list(Damped.declared_options())[:2] == ["damping", "lr"]
    assert system.hyperparameters()["damping"] == 0.25 and Damped().damping == 0.5
    with pytest.raises(OcrrError, match=re.escape("damped: damping must be a number in [0, 1], got 2.")):
        Damped(damping=2)


def test_a_plug_in_whose_signature_holds_its_defaults_still_works():
    from ocrr.specs import Option
    from ocrr.systems.heads.linear import OnlineLinear

    class Older(OnlineLinear):  # written before options carried defaults
        options = {"steps": Option(kind=int, low=1, help="steps per correction")}

        def __init__(self, steps: int = 3, **kwargs):
            kwargs.setdefault("name", "older")
            super().__init__(**kwargs)
            self.steps = steps

    assert Older.declared_options()["steps"].default == 3
    assert list(inspect.signature(Older).parameters)[:2] == ["steps", "lr"]
    system = Older(steps=2, lr=0.1)
    assert (system.name, system.steps, system.lr) == ("older", 2, 0.1)
    assert system.hyperparameters()["steps"] == 2


def test_a_plug_in_constructor_that_passes_nothing_on_keeps_its_own_signature():
    from ocrr.specs import Option
    from ocrr.systems.blind import BlindClassifier

    class Own(BlindClassifier):
        options = {"k": Option(kind=int, low=1, help="revealed labels in the window")}

        def __init__(self, k: int = 2, labels=None, seed: int = 0, name: str = "own"):
            super().__init__(k=k, labels=labels, seed=seed, name=name)

    params = inspect.signature(Own).parameters
    assert list(params) == ["k", "labels", "seed", "name"]
    assert params["k"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and Own(3).k == 3
    assert Own.declared_options()["k"].default == 2 and Own().name == "own"
