"""The one registry shape (ocrr.registry): mapping access, "did you mean", names, describe,
lazy targets; and every kind of plug-in uses it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ocrr.cli.main import COMMANDS
from ocrr.data import DATASETS
from ocrr.encoders.registry import ENCODERS
from ocrr.errors import OcrrError
from ocrr.policies.basic import POLICIES, make_policy
from ocrr.protocols import PROTOCOLS
from ocrr.registry import Registry, load_target, summary_of
from ocrr.report.presentation import FOLDER_SECTIONS, PRESENTATIONS
from ocrr.systems import REGISTRY, catalog
from ocrr.systems import registry as systems_registry


def colours() -> Registry[int]:
    colours: Registry[int] = Registry("colour", hint="Run 'paint colours' to list them.")
    for value, name in enumerate(("red", "green", "blue")):
        colours.register(name, value)
    return colours


def test_a_registry_is_a_mapping_in_registration_order():
    reg = colours()
    assert list(reg) == ["red", "green", "blue"] and reg["green"] == 1 and "blue" in reg and len(reg) == 3
    reg["cyan"] = 7
    del reg["red"]
    assert reg.names() == ["blue", "cyan", "green"] and dict(reg.items())["cyan"] == 7


def test_an_unknown_name_gets_the_close_ones_and_the_hint():
    with pytest.raises(OcrrError) as caught:
        colours().lookup("gren")
    assert str(caught.value) == "unknown colour 'gren'. Did you mean green? Run 'paint colours' to list them."
    with pytest.raises(OcrrError, match=r"^unknown colour 'mauve'\. Run 'paint colours'"):
        colours().lookup("mauve")


def test_describe_uses_the_kinds_renderer():
    reg: Registry[int] = Registry("colour", describe=lambda name, value: f"{name} is number {value}")
    reg.register("red", 0)
    assert reg.describe("red") == "red is number 0"


def test_a_lazy_target_is_imported_when_asked_for():
    assert load_target("ocrr.specs:parse_value")("3") == 3
    assert load_target("specs:parse_value", "ocrr")("true") is True

    def paint():
        """Paint it red.

        More about painting."""

    assert summary_of(paint) == "Paint it red"
    paint.summary = "paint it blue"  # type: ignore[attr-defined]
    assert summary_of(paint) == "paint it blue"


def test_listing_and_describing_systems_imports_no_system_module():
    probe = (
        "import sys\n"
        "from ocrr.systems import REGISTRY\n"
        "assert len(list(REGISTRY)) > 40 and REGISTRY['lora'].summary\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('ocrr.systems.lora')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_systems_have_one_register_function():
    assert catalog.register is systems_registry.register
    systems_registry.register("spare_substrate", "substrate:Substrate", "test", "a substrate", in_all=False, k=2)
    try:
        assert REGISTRY["spare_substrate"].defaults == {"k": 2}
        assert systems_registry.make_system("spare_substrate").k == 2
    finally:
        del REGISTRY["spare_substrate"]


@pytest.mark.parametrize(
    ("registry", "kind"),
    [
        (REGISTRY, "system"),
        (PROTOCOLS, "protocol"),
        (ENCODERS, "encoder"),
        (DATASETS, "dataset"),
        (POLICIES, "policy"),
        (PRESENTATIONS, "presentation"),
        (FOLDER_SECTIONS, "folder section"),
        (COMMANDS, "command"),
    ],
)
def test_every_kind_of_plugin_has_the_one_registry(registry, kind):
    assert isinstance(registry, Registry) and registry.kind == kind


def test_an_unknown_policy_gets_the_close_one():
    with pytest.raises(OcrrError, match=r"unknown policy 'oracel'\. Did you mean oracle\? Use oracle, all"):
        make_policy("oracel:noise=0.1")
