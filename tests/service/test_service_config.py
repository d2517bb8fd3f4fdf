"""The service's config: checked when made, frozen; the service runs from it alone."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ocrr.errors import OcrrError
from ocrr.service import ServiceConfig


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("workers", 0, "ocrr serve: --workers must be an integer in [1, 64], got 0."),
        ("workers", 65, "--workers must be an integer in [1, 64], got 65."),
        ("workers", True, "--workers must be an integer in [1, 64], got true."),
        ("port", -1, "--port must be an integer in [0, 65535], got -1."),
        ("port", 70_000, "--port must be an integer in [0, 65535]"),
        ("host", "", "--host needs an address"),
        ("host", 3, "--host must be text, got 3."),
        ("seed", "3", "--seed must be an integer, got '3'."),
        ("check_every", -1, "--check-every must be a number ≥ 0, got -1."),
        ("verify_every", float("inf"), "--verify-every must be a number ≥ 0, got inf."),
        ("key", 3, "--key must be a path or none, got 3."),
        ("system", "", "--system takes a substrate spec"),
        ("encoder_nice", 25, "--encoder-nice 25: give a niceness 0-19, or 'idle'"),
        ("encoder_nice", "low", "--encoder-nice 'low'"),
        ("token", "  ", "the service token is empty"),
        ("pin_workers", "yes", "--pin-workers must be true or false, got 'yes'. See 'ocrr serve --help'."),
        ("pin_workers", True, "with one worker there is nothing to spread: add --workers N"),
        # Before: refused as a public address without TLS (the typo named only with --insecure-public).
        ("host", "999.1.1.1", "--host 999.1.1.1 is not an address to listen on"),
        ("host", "nosuch.invalid", "--host nosuch.invalid is not an address to listen on"),
        # Before: --fit nosuch "needs an encoder"; with one, the ledger was made, then the dataset refused.
        ("fit", "nosuch", "--fit nosuch: unknown dataset 'nosuch'. Use one of"),
        # Before: ignored without --encoder (there is no encoder process to lower).
        ("encoder_nice", 5, "without --encoder there is none: add --encoder"),
        ("encoder_nice", "idle", "or drop --encoder-nice"),
        # Before: found by the encoder process, or the ledger's open, after the ledger was made.
        ("encoder", "nosuch", "--encoder nosuch: unknown encoder 'nosuch'. Use minilm"),
        ("encoder", "minilm:batch_size=0", "--encoder minilm:batch_size=0: "),
        ("encoder", "precomputed:v.npy", "reads vectors per dataset, not texts"),
        ("system", "nosuch", "--system nosuch: unknown system 'nosuch'"),
    ],
)
def test_a_bad_option_is_refused_with_its_name_and_the_fix(tmp_path, option, value, words):
    with pytest.raises(OcrrError, match=re.escape(words)):
        ServiceConfig(ledger=tmp_path / "l.db", **{option: value})
    assert not (tmp_path / "l.db").exists()


def test_the_encoder_process_priority_defaults_to_idle_and_is_taken_with_an_encoder(tmp_path):
    assert ServiceConfig(ledger=tmp_path / "l.db").nice == "idle"
    config = ServiceConfig(ledger=tmp_path / "l.db", encoder="minilm", encoder_nice=7)
    assert (config.encoder_nice, config.nice) == (7, 7)
    assert ServiceConfig(ledger=tmp_path / "l.db", host="localhost").host == "localhost"  # (no lookup needed)


def test_the_config_is_frozen_and_takes_paths_as_strings(tmp_path):
    config = ServiceConfig(ledger=str(tmp_path / "l.db"), key=str(tmp_path / "k.pem"), quick_open=True)
    assert config.ledger == tmp_path / "l.db" and isinstance(config.key, Path) and config.verify == "checkpoint"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 2
    assert dataclasses.replace(config, workers=4).workers == 4
    with pytest.raises(OcrrError, match="--workers"):
        dataclasses.replace(config, workers=0)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_service_never_imports_the_command_line():
    out = _run(
        "import sys, ocrr.service.server, ocrr.service.app\n"
        "print(sorted(m for m in sys.modules if m.startswith('ocrr.cli')))"
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_without_the_service_extra_the_package_imports_and_serving_names_the_install():
    block = "import sys; sys.modules['fastapi'] = None\n"  # as if fastapi were not installed
    out = _run(
        block + "import ocrr.service\n"
        "from ocrr.errors import OcrrError\n"
        "try:\n"
        "    ocrr.service.serve(ocrr.service.ServiceConfig(ledger='unused.db'))\n"
        "except OcrrError as e:\n"
        "    print(e)\n"
    )
    assert out.returncode == 0, out.stderr
    assert "ocrr serve needs the service extra (fastapi is missing); pip install -e '.[service]'" in out.stdout


def test_create_app_opens_the_state_from_a_config_and_closes_it_at_shutdown(tmp_path):
    pytest.importorskip("fastapi")
    requests = pytest.importorskip("requests")
    from service_helpers import TOKEN, running

    from ocrr.ledger.sqlite.store import DurableLedger
    from ocrr.service.app import create_app

    app = create_app(ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN))
    with running(app) as url:
        assert requests.get(f"{url}/health").json()["entries"] == 0
        r = requests.post(
            f"{url}/correct",
            json={"vectors": [[1.0, 0.0]], "labels": ["x"]},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 200 and r.json()["ids"] == [0]
    with DurableLedger.open(tmp_path / "l.db") as led:  # closed by the app: another connection opens it
        assert len(led) == 1


def test_without_a_token_the_state_gets_a_random_one(tmp_path):
    from ocrr.service.state import build_state

    states = [build_state(ServiceConfig(ledger=tmp_path / f"{k}.db"), log=lambda m: None) for k in range(2)]
    try:
        assert all(len(s.token) >= 32 for s in states) and states[0].token != states[1].token
    finally:
        for s in states:
            s.close()


def test_a_serving_process_freezes_its_start_up_heap_and_an_embedding_one_does_not(tmp_path):
    """``ocrr serve``'s processes move what start-up loaded out of the collector's reach (a
    full collection of it pauses every request); an app made in a process that goes on with
    other work (these tests, a notebook) leaves that process's collector alone."""
    pytest.importorskip("fastapi")
    probe = (
        "import gc, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from service_helpers import TOKEN, running\n"
        "from ocrr.service.app import create_app\n"
        "from ocrr.service.config import ServiceConfig\n"
        "for name, freeze in (('plain', False), ('serving', True)):\n"
        "    before = gc.get_freeze_count()  # not 0 at start-up on every Python (3.12 freezes some)\n"
        "    app = create_app(ServiceConfig(ledger=sys.argv[2] + name, token=TOKEN), freeze_heap=freeze)\n"
        "    with running(app):\n"
        "        print(name, gc.get_freeze_count() > before)\n"
    )
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run(
        [sys.executable, "-c", probe, here, str(tmp_path / "l")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["plain", "False", "serving", "True"]


def test_each_serve_flag_takes_its_help_and_default_from_the_config_declaration(monkeypatch):
    from ocrr.cli.main import build_parser
    from ocrr.cli.serve import config_from_args
    from ocrr.service.config import CONFIG_OPTIONS, flag

    parser = build_parser("serve")
    serve = next(a for a in parser._actions if a.choices and "serve" in a.choices).choices["serve"]
    by_dest = {action.dest: action for action in serve._actions}
    for name, declared in CONFIG_OPTIONS.items():
        if name == "token":  # read from --token-file or $OCRR_TOKEN, never from argv
            continue
        action = by_dest[name]
        assert action.help.startswith(declared.help), name
        assert name == "ledger" or action.default == declared.default or (name, action.default) == ("witnesses", [])
        assert flag(name) in action.option_strings or (name, action.option_strings) == ("witnesses", ["--witness"])
    monkeypatch.delenv("OCRR_TOKEN", raising=False)
    args = parser.parse_args(["serve", "--ledger", "l.db", "--port", "0", "--pin-workers", "--workers", "2"])
    assert config_from_args(args) == ServiceConfig(ledger="l.db", port=0, pin_workers=True, workers=2)
    with pytest.raises(OcrrError, match=re.escape("ocrr serve: --workers must be an integer in [1, 64], got 65.")):
        config_from_args(parser.parse_args(["serve", "--ledger", "l.db", "--workers", "65"]))
