"""Options of `ocrr serve`, `ocrr witness serve` and `ocrr client` are checked at the door: a bad
one gets one error naming the fix (exit status 2), before a ledger, token or state file is
written or a server started; never a traceback from deep inside (ssl, uvicorn, numpy, urllib3)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from tests.service.service_helpers import self_signed

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import Cosigner
from ocrr.ledger.heads import Signer
from ocrr.service import ServiceConfig
from ocrr.witness.config import WitnessConfig

WITNESS = Cosigner.generate("witness.example/w1")
LOG = Signer.generate("example.com/doors")


@pytest.fixture
def no_server(monkeypatch):
    """`ocrr serve` up to the server's own checks (the TLS files, the key, the claim of ledger and port):
    the configs it would serve, and no ledger opened, nothing printed, no server started."""
    pytest.importorskip("uvicorn", reason="the service extra is not installed (pip install -e '.[service]')")
    import ocrr.service.server

    served: list[ServiceConfig] = []
    monkeypatch.setattr(ocrr.service.server, "_serve", lambda config, claimed, log: served.append(config) or 0)
    monkeypatch.delenv("OCRR_TOKEN", raising=False)
    return served


def _serve(tmp_path: Path, capsys, *argv: str) -> tuple[int, str]:
    code = main(["serve", "--ledger", str(tmp_path / "l.db"), "--port", "0", *argv])
    return code, capsys.readouterr().err


def _nothing_written(tmp_path: Path) -> bool:
    return not (tmp_path / "l.db").exists() and not (tmp_path / "l.db.token").exists()


# 1. --tls-cert / --tls-key


def test_missing_tls_files_are_refused_before_the_ledger_or_token_is_written(tmp_path):
    pytest.importorskip("uvicorn", reason="the service extra is not installed (pip install -e '.[service]')")
    env = {k: v for k, v in os.environ.items() if k != "OCRR_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2] / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(tmp_path / "l.db"), "--port", "0"]
        + ["--tls-cert", str(tmp_path / "nonexistent.crt"), "--tls-key", str(tmp_path / "nonexistent.key")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--tls-cert" in done.stderr and "does not exist" in done.stderr and "give the PEM file" in done.stderr
    assert done.stdout == ""  # no URL printed
    assert _nothing_written(tmp_path)


def test_tls_files_that_do_not_load_as_a_certificate_and_its_key_are_refused(tmp_path, capsys, no_server):
    pytest.importorskip("cryptography", reason="the service extra is not installed (pip install -e '.[service]')")
    cert, key = self_signed(tmp_path, "a")
    other = self_signed(tmp_path, "b")
    cases = [
        ((key, key), "do not load as a certificate and its private key"),  # the key passed as the cert
        ((cert, cert), "do not load as a certificate and its private key"),  # the cert passed as the key
        ((cert, other[1]), "do not load as a certificate and its private key"),  # another certificate's key
        ((tmp_path, key), f"--tls-cert {tmp_path} is not a file"),
        ((cert, tmp_path / "missing.key"), "--tls-key " + str(tmp_path / "missing.key") + " does not exist"),
    ]
    for (c, k), words in cases:
        code, err = _serve(tmp_path, capsys, "--tls-cert", str(c), "--tls-key", str(k))
        assert code == 2 and words in err and "--tls-key" in err, (c, k, err)
        assert len(err.strip().splitlines()) == 1, err
    assert not no_server and _nothing_written(tmp_path)
    code, err = _serve(tmp_path, capsys, "--tls-cert", str(cert), "--tls-key", str(key))
    assert code == 0 and err == "" and [(s.tls_cert, s.tls_key) for s in no_server] == [(cert, key)]


def test_an_encrypted_tls_key_is_refused_without_asking_for_a_passphrase(tmp_path, capsys, no_server):
    pytest.importorskip("cryptography")
    pair = self_signed(tmp_path, "locked", passphrase=b"secret passphrase")
    code, err = _serve(tmp_path, capsys, "--tls-cert", str(pair[0]), "--tls-key", str(pair[1]))
    assert code == 2 and "is encrypted" in err and "give it unencrypted" in err
    assert not no_server and _nothing_written(tmp_path)


def test_the_command_line_loads_the_tls_files_once(tmp_path, capsys, no_server, monkeypatch):
    """`ocrr serve --tls-cert … --tls-key …` checks the pair once, in ``serve``, which the
    Python entry shares: not once more on the way there."""
    pytest.importorskip("cryptography", reason="the service extra is not installed (pip install -e '.[service]')")
    cert, key = self_signed(tmp_path, "a")
    loaded: list[Path] = []
    load = ssl.SSLContext.load_cert_chain

    def counted(context, certfile, keyfile=None, password=None):
        loaded.append(Path(certfile))
        return load(context, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", counted)
    code, err = _serve(tmp_path, capsys, "--tls-cert", str(cert), "--tls-key", str(key))
    assert code == 0 and err == "" and len(no_server) == 1
    assert loaded == [cert]
    loaded.clear()
    code, err = _serve(tmp_path, capsys, "--tls-cert", str(key), "--tls-key", str(key))  # refused, still once
    assert code == 2 and "do not load as a certificate" in err and loaded == [key] and len(no_server) == 1


# 2. --seed


def test_a_negative_seed_is_refused_at_the_door(tmp_path, capsys, no_server):
    with pytest.raises(OcrrError, match="--seed must be an integer ≥ 0, got -1"):
        ServiceConfig(ledger=tmp_path / "l.db", system="bounded_reservoir_100", seed=-1)
    code, err = _serve(tmp_path, capsys, "--system", "bounded_reservoir_100", "--seed", "-1")
    assert code == 2 and "--seed must be an integer ≥ 0, got -1" in err and "e.g. --seed 0" in err
    assert not no_server and _nothing_written(tmp_path)
    assert ServiceConfig(ledger=tmp_path / "l.db", seed=0).seed == 0


# 3. ocrr client --timeout


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "soon"])
def test_a_client_timeout_must_be_a_finite_number_above_zero(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as usage:
        main(["client", "head", "--url", "http://127.0.0.1:1", "--vkey", LOG.vkey]
             + ["--state", str(tmp_path / "head.json"), f"--timeout={value}"])  # fmt: skip
    err = capsys.readouterr().err
    assert usage.value.code == 2
    assert "--timeout" in err and "give a number of seconds > 0, e.g. --timeout 30" in err and repr(value) in err
    assert "Traceback" not in err and not (tmp_path / "head.json").exists()


def test_a_positive_client_timeout_is_taken(tmp_path, capsys):
    pytest.importorskip("requests")
    code = main(["client", "head", "--url", "http://127.0.0.1:1", "--vkey", LOG.vkey]
                + ["--state", str(tmp_path / "head.json"), "--timeout", "0.5"])  # fmt: skip
    assert code == 2 and "cannot reach the service" in capsys.readouterr().err  # (nothing listens on port 1)


# 4. ocrr witness serve --port


@pytest.mark.parametrize("port", [-1, 65536, 99999])
def test_a_witness_port_out_of_range_is_refused_at_the_door(tmp_path, capsys, monkeypatch, port):
    import ocrr.witness.server

    def never(config):
        raise AssertionError("the witness was started")

    monkeypatch.setattr(ocrr.witness.server, "serve", never)
    with pytest.raises(OcrrError, match=rf"ocrr witness serve: --port must be an integer in \[0, 65535\], got {port}"):
        WitnessConfig(state=tmp_path / "w.db", key=tmp_path / "w.key", name="witness.example/w1", port=port)
    code = main(["witness", "serve", "--state", str(tmp_path / "w.db"), "--new-state", "--key", str(tmp_path / "w.key")]
                + ["--name", "witness.example/w1", "--log", LOG.vkey, "--port", str(port)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--port must be an integer in [0, 65535]" in err and "0: any free port" in err
    assert not (tmp_path / "w.db").exists()
    for fine in (0, 8780, 65535):
        assert WitnessConfig(state=tmp_path / "w.db", key=tmp_path / "k", name="w.example/w", port=fine).port == fine


# 5. --origin


@pytest.mark.parametrize("origin", ["", "   ", "with space", "a+b"])
def test_an_empty_or_malformed_origin_is_refused_not_replaced_by_the_default(tmp_path, capsys, no_server, origin):
    with pytest.raises(OcrrError, match="is not a log name: give one such as example.com/my-ledger"):
        ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem", origin=origin)
    code, err = _serve(tmp_path, capsys, "--key", str(tmp_path / "k.pem"), "--origin", origin)
    assert code == 2 and f"--origin {origin!r} is not a log name" in err and "drop --origin" in err
    assert not no_server and _nothing_written(tmp_path)


def test_a_good_origin_is_kept(tmp_path):
    config = ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem", origin="example.com/my-ledger")
    assert config.origin == "example.com/my-ledger"
    assert ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem").origin is None  # the default


# 6. --witness URL=VKEY


def test_a_short_http_witness_url_is_taken(tmp_path, capsys, no_server):
    LOG.save(tmp_path / "k.pem")  # (serve reads the key before it claims the ledger)
    config = ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem", witnesses=(f"http://x={WITNESS.vkey}",))
    assert config.witnesses == (("http://x", WITNESS.vkey),)
    code, err = _serve(tmp_path, capsys, "--key", str(tmp_path / "k.pem"), "--witness", f"http://x={WITNESS.vkey}")
    assert code == 0 and err == "" and no_server[0].witnesses == (("http://x", WITNESS.vkey),)


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://", "--witness URL 'http://' names no host"),
        ("https://", "--witness URL 'https://' names no host"),
        ("http://:8780", "--witness URL 'http://:8780' names no host"),
        ("http://[::1", "names no host"),
        ("ftp://x", "--witness URL 'ftp://x' must start with http:// or https://"),
        ("x:8780", "must start with http:// or https://"),
    ],
)
def test_a_wrong_witness_url_gets_a_true_message(tmp_path, url, words):
    with pytest.raises(OcrrError, match=words.replace("[", r"\[")) as refused:
        ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem", witnesses=(f"{url}={WITNESS.vkey}",))
    assert "e.g. http://127.0.0.1:8780" in str(refused.value)
    if "names no host" in words:
        assert "must start with" not in str(refused.value)  # it does start with one


def test_serving_from_python_checks_the_tls_files_first_too(tmp_path):
    """``ocrr.service.serve(config)`` (no command line) refuses them before anything is written."""
    pytest.importorskip("uvicorn", reason="the service extra is not installed (pip install -e '.[service]')")
    from ocrr.service import serve

    config = ServiceConfig(
        ledger=tmp_path / "l.db", port=0, tls_cert=tmp_path / "missing.pem", tls_key=tmp_path / "missing.key"
    )
    with pytest.raises(OcrrError, match="does not exist"):
        serve(config)
    assert _nothing_written(tmp_path)


# 7. --rehash-after


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "x", "3601"])
def test_a_rehash_delay_that_is_not_0_to_3600_seconds_is_refused_at_the_door(tmp_path, capsys, no_server, value):
    code, err = _serve(tmp_path, capsys, "--quick-open", f"--rehash-after={value}")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--rehash-after must be a number in [0, 3600], got " in err and "ocrr serve --help" in err
    assert not no_server and _nothing_written(tmp_path)
    with pytest.raises(OcrrError, match=r"--rehash-after must be a number in \[0, 3600\]"):
        ServiceConfig(ledger=tmp_path / "l.db", quick_open=True, rehash_after=value if value == "x" else float(value))


def test_a_rehash_delay_from_0_to_3600_seconds_is_taken(tmp_path, capsys, no_server):
    for value in ("0", "2.5", "3600"):
        code, err = _serve(tmp_path, capsys, "--quick-open", "--rehash-after", value)
        assert code == 0 and err == "" and no_server[-1].rehash_after == float(value)
    default = ServiceConfig(ledger=tmp_path / "l.db")
    assert default.rehash_after is None and default.rehash_delay == 10  # not given: the default applies


@pytest.mark.parametrize("value", ["0", "10", "10.0"])  # 10 is the default's value, and given all the same
def test_a_rehash_delay_without_a_quick_open_is_refused(tmp_path, capsys, no_server, value):
    code, err = _serve(tmp_path, capsys, "--rehash-after", value)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--rehash-after delays the rehash that follows a quick open" in err
    assert "add --quick-open, or drop --rehash-after" in err
    assert not no_server and _nothing_written(tmp_path)
    with pytest.raises(OcrrError, match="add --quick-open, or drop --rehash-after"):
        ServiceConfig(ledger=tmp_path / "l.db", rehash_after=float(value))


def test_no_rehash_delay_without_a_quick_open_is_taken_with_the_default_delay(tmp_path, capsys, no_server):
    code, err = _serve(tmp_path, capsys)
    assert code == 0 and err == ""
    assert no_server[-1].rehash_after is None and no_server[-1].rehash_delay == 10
    code, err = _serve(tmp_path, capsys, "--quick-open")
    assert code == 0 and err == "" and no_server[-1].rehash_delay == 10
    assert "(default 10.0)" in _serve_help(capsys)  # the help still says what not giving it means


def _serve_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    return " ".join(capsys.readouterr().out.split())  # (argparse wraps the lines)


# 8. --fit, --host, --encoder-nice: the message names what is wrong


def test_an_unknown_fit_dataset_is_named_as_unknown_not_as_needing_an_encoder(tmp_path, capsys, no_server):
    """Before: "--fit nosuch needs an encoder for its texts; add --encoder minilm"."""
    code, err = _serve(tmp_path, capsys, "--fit", "nosuch")
    assert code == 2 and "--fit nosuch: unknown dataset 'nosuch'. Use one of" in err and "encoder" not in err
    assert not no_server and _nothing_written(tmp_path)
    code, err = _serve(tmp_path, capsys, "--fit", "demo")  # a known dataset of texts still needs one
    assert code == 2 and "--fit demo needs an encoder for its texts; add --encoder minilm" in err


@pytest.mark.parametrize("host", ["999.1.1.1", "nosuch.invalid"])
def test_a_host_that_is_no_address_is_named_so_not_taken_for_a_public_one(tmp_path, capsys, no_server, host):
    """Before: "reachable from other machines … give --tls-cert and --tls-key"; the lookup's own
    "Name or service not known" came only with --insecure-public."""
    for extra in ([], ["--insecure-public"]):
        code, err = _serve(tmp_path, capsys, "--host", host, *extra)
        assert code == 2 and f"--host {host} is not an address to listen on" in err and "TLS" not in err, err
    assert not no_server and _nothing_written(tmp_path)


def test_an_encoder_priority_without_an_encoder_is_refused(tmp_path, capsys, no_server):
    """Before: taken, and silently ignored (there is no encoder process to lower)."""
    code, err = _serve(tmp_path, capsys, "--encoder-nice", "5")
    assert code == 2 and "without --encoder there is none: add --encoder" in err
    assert not no_server and _nothing_written(tmp_path)
    code, err = _serve(tmp_path, capsys, "--encoder-nice", "5", "--encoder", "minilm")
    assert code == 0 and (no_server[-1].encoder_nice, no_server[-1].nice) == (5, 5)
    assert "(default idle)" in _serve_help(capsys)
