"""The one option grammar (ocrr.specs): parsing, declarations, the validator and its messages."""

import dataclasses
from pathlib import Path

import pytest

from ocrr.data import load_dataset
from ocrr.errors import OcrrError
from ocrr.policies import make_policy
from ocrr.protocols import make_protocol
from ocrr.specs import (
    Option,
    describe,
    field_options,
    format_spec,
    option,
    parse_assignments,
    parse_spec,
    spec_name,
    validate,
)
from ocrr.systems import make_system


def test_specs_parse_and_format_back():
    assert parse_spec("substrate:k=3:margin=0.1:tiebreak_recency=false:index=none") == (
        "substrate",
        {"k": 3, "margin": 0.1, "tiebreak_recency": False, "index": None},
    )
    assert spec_name(" substrate:k=3 ") == "substrate" and spec_name("oracle") == "oracle"
    assert format_spec("substrate", {"margin": 0.1, "k": 3}) == "substrate:k=3:margin=0.1"
    assert parse_spec(format_spec("x", {"a": 1.0, "b": None, "c": True}))[1] == {"a": 1.0, "b": None, "c": True}
    assert parse_assignments(["n_classes=50", "name=a:b"], "--data-option", "n_classes=50") == {
        "n_classes": 50,
        "name": "a:b",
    }


def test_bare_parts_qualify_the_part_before_them_only_where_declared():
    qualifiers = {"noise": "noise_kind", "random": "p"}
    assert parse_spec("random:0.5:noise=0.1:confusable", "policy", "e.g.", qualifiers) == (
        "random",
        {"p": 0.5, "noise": 0.1, "noise_kind": "confusable"},
    )
    with pytest.raises(OcrrError, match=r"system spec 'substrate:k': 'k' is not key=value\. Write e\.g\."):
        parse_spec("substrate:k")
    with pytest.raises(OcrrError, match="k is given twice; give it once"):
        parse_spec("substrate:k=3:k=5")
    with pytest.raises(OcrrError, match="--data-option 'dim' is not KEY=VALUE, e.g. dim=32"):
        parse_assignments(["dim"], "--data-option", "dim=32")


@pytest.mark.parametrize(
    "option, allowed",
    [
        (Option(1, int, low=1), "an integer ≥ 1"),
        (Option(0.1, float, gt=0), "a number > 0"),
        (Option(0.5, float, low=0, high=1), "a number in [0, 1]"),
        (Option(0.5, float, low=0, lt=1), "a number in [0, 1)"),
        (Option(0.5, float, gt=0, high=1, allow_none=True), "a number in (0, 1] or none"),
        (Option("a", str, choices=("a", "b")), "one of a, b"),
        (Option(True, bool), "true or false"),
        (Option("x", str), "text"),
        (Option(None, Path, allow_none=True), "a path or none"),
    ],
)
def test_each_constraint_reads_as_words(option, allowed):
    assert option.allowed() == allowed


def test_the_validator_widens_ints_to_numbers_and_refuses_the_rest():
    declared = {"lr": Option(0.1, float, gt=0), "k": Option(5, int, low=1), "on": Option(True, bool)}
    assert validate("x", declared, {"lr": 1, "k": 3, "on": False}) == {"lr": 1.0, "k": 3, "on": False}
    for bad in ({"k": True}, {"k": 2.0}, {"lr": float("inf")}, {"lr": float("nan")}, {"on": 1}):
        with pytest.raises(OcrrError, match="must be"):
            validate("x", declared, bad)


def test_a_path_option_takes_text_or_a_path_and_gives_a_path():
    declared = Option(None, Path, allow_none=True)
    assert declared.check("x", "key", "a/b.pem") == Path("a/b.pem") and declared.check("x", "key", None) is None
    with pytest.raises(OcrrError, match="x: key must be a path or none, got 3."):
        declared.check("x", "key", 3)


def test_a_dataclass_declares_each_field_once_as_an_option():
    @dataclasses.dataclass(frozen=True)
    class Settings:
        name: str = option(kind=str, help="required: no default")
        k: int = option(default=5, kind=int, low=1, help="neighbours")

    declared = field_options(Settings)
    assert list(declared) == ["name", "k"] and declared["k"] == Option(5, int, low=1, help="neighbours")
    assert Settings("a").k == 5
    with pytest.raises(TypeError):
        Settings()
    with pytest.raises(OcrrError, match="settings: k must be an integer ≥ 1, got 0."):
        validate("settings", declared, dataclasses.asdict(Settings("a", k=0)))


def test_describe_lists_every_option_with_type_constraint_default_and_help():
    text = describe({"k": Option(5, int, low=1, help="neighbours"), "margin": Option(None, float, allow_none=True)})
    header, k, margin = text.splitlines()
    assert header.split() == ["option", "type", "allowed", "default", "help"]
    assert k.split() == ["k", "integer", "an", "integer", "≥", "1", "5", "neighbours"]
    assert margin.split()[:2] == ["margin", "number"] and "none" in margin


# One message per bad value, for every kind of plug-in: '<kind> <name>: <option> must be
# <allowed>, got <value>', or '<kind> <name> has no option <key>. Did you mean <closest>?'.
BAD = [
    (lambda: make_system("substrate:k=zero"), "system substrate: k must be an integer in [1, 100000], got 'zero'"),
    (lambda: make_system("substrate:k=zero"), "Run 'ocrr systems substrate' to list its options."),
    (
        lambda: make_system("substrate:kk=3"),
        "system substrate has no option kk. Did you mean k? Its options: k, margin",
    ),
    (lambda: make_system("substrate:margin=-0.1"), "system substrate: margin must be a number ≥ 0 or none, got -0.1"),
    (lambda: make_system("knn_lm:knn_lambda=1.5"), "system knn_lm: knn_lambda must be a number in [0, 1], got 1.5"),
    (lambda: make_system("cft:lr=0"), "system cft: lr must be a number > 0, got 0"),
    (lambda: make_system("er:mode=sequential"), "system er: mode must be one of mixed, two_stage, got 'sequential'"),
    (lambda: make_system("er_fifo:cosine=maybe"), "system er_fifo: cosine must be true or false, got 'maybe'"),
    (lambda: make_system("bounded_fifo_100:budget=1.5"), "system bounded_fifo_100: budget must be an integer ≥ 1"),
    (lambda: make_protocol("heldout:every=0"), "protocol heldout: every must be an integer ≥ 1, got 0"),
    (lambda: make_protocol("heldout:every=0"), "Run 'ocrr protocols heldout' to list its options."),
    (lambda: make_protocol("cmr:alpha=2"), "protocol cmr: alpha must be a number in [0, 1], got 2"),
    (lambda: make_protocol("ocl:shift=-1"), "protocol ocl: shift must be an integer ≥ 0 or none, got -1"),
    (lambda: make_protocol("heldout:evry=5"), "protocol heldout has no option evry. Did you mean every?"),
    (lambda: make_policy("oracle:noise=1.5"), "policy oracle: noise must be a number in [0, 1], got 1.5"),
    (lambda: make_policy("oracle:budget=0"), "policy oracle: budget must be a number in (0, 1] or none, got 0"),
    (lambda: make_policy("oracle:delay=2.5"), "policy oracle: delay must be an integer ≥ 0, got 2.5"),
    (lambda: make_policy("oracle:noise=0.1:loud"), "policy oracle: noise_kind must be one of uniform, confusable"),
    (lambda: make_policy("random:2"), "policy random: p must be a number in (0, 1], got 2"),
    (lambda: make_policy("oracle:nosie=0.1"), "policy oracle has no option nosie. Did you mean noise?"),
    (lambda: load_dataset("synthetic", dim=0), "dataset synthetic: dim must be an integer in [1, 65536], got 0"),
    (lambda: load_dataset("synthetic", sigma="x"), "dataset synthetic: sigma must be a number ≥ 0, got 'x'"),
    (lambda: load_dataset("synthetic", n_class=3), "dataset synthetic has no option n_class. Did you mean n_classes?"),
]


@pytest.mark.parametrize("build, words", BAD, ids=[words[:48] for _, words in BAD])
def test_every_bad_option_names_the_option_the_value_and_what_is_allowed(build, words):
    with pytest.raises(OcrrError) as error:
        build()
    assert words in str(error.value)
    assert "\n" not in str(error.value)  # one line: never hard-wrapped


def test_ocrr_protocols_name_prints_its_options_and_the_common_ones(capsys):
    from ocrr.cli.main import main

    assert main(["protocols", "heldout"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("heldout: ") and "Metrics: acc_novel, acc_original." in out
    every = next(line for line in out.splitlines() if line.startswith("every "))
    assert every.split()[:7] == ["every", "integer", "an", "integer", "≥", "1", "50"]
    assert "\nshift " in out and "e.g. --protocol heldout:eval_cap=400:every=50:n_heldout=10" in out
