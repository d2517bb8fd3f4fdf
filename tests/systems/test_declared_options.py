"""Every system declares each hyperparameter once (type, constraint, help); defaults come from
the constructor signature; make_system checks a spec against them before building."""

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
    with pytest.raises(OcrrError, match="system spy: k must be an integer ≥ 1, got 'zero'"):
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
