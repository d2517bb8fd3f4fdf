"""A private key passed where a verifier key belongs (both are "key" files) is refused as a
usage error that never repeats the key: not on stderr, not in a JSON answer."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.cli.main import main as ocrr
from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import check_cosigner_vkey
from ocrr.ledger.heads import Signer, check_vkey, shown
from ocrr.ledger.sqlite.store import DurableLedger

ORIGIN = "example.com/private"


@pytest.fixture()
def signed(tmp_path, capsys):
    """A ledger of 4 entries, its signing key, a signed checkpoint and an inclusion proof."""
    with DurableLedger.open(tmp_path / "l.db", dim=4) as led:
        led.extend(np.eye(4, dtype=np.float32), ["a", "b", "c", "d"], None)
    key = tmp_path / "k.pem"
    assert ocrr(["ledger", "keygen", str(key), "--origin", ORIGIN]) == 0
    assert ocrr(["ledger", "head", str(tmp_path / "l.db"), "--key", str(key), "--origin", ORIGIN, "--checkpoint"]) == 0
    (tmp_path / "cp.txt").write_text(capsys.readouterr().out)
    assert ocrr(["ledger", "prove", str(tmp_path / "l.db"), "--entry", "1"]) == 0
    (tmp_path / "p.json").write_text(capsys.readouterr().out)
    return tmp_path, key


def _secret(key) -> str:
    """The PEM's base64 body: what must never be shown."""
    return "".join(line for line in key.read_text().splitlines() if "-----" not in line)


@pytest.mark.parametrize(
    "argv",
    [
        ["ledger", "check", "inclusion", "{d}/p.json", "--checkpoint", "{d}/cp.txt", "--vkey", "{key}"],
        ["ledger", "verify", "{d}/l.db", "--vkey", "{key}"],
        ["ledger", "import", "{d}/x.jsonl", "{d}/new.db", "--checkpoint", "{d}/cp.txt", "--verifier-key", "{key}"],
        ["client", "head", "--url", "http://127.0.0.1:9", "--vkey", "{key}"],
    ],
    ids=["ledger-check", "ledger-verify", "ledger-import", "client-head"],
)
def test_a_private_key_given_as_a_verifier_key_is_refused_unshown(signed, capsys, argv):
    d, key = signed
    (d / "x.jsonl").write_text("")
    rc = ocrr([a.format(d=d, key=key) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2  # the wrong file given: a usage error, not a failed proof
    assert "private signing key was given where its verifier key belongs" in err
    secret = _secret(key)
    assert secret[:12] not in out + err and "PRIVATE KEY" not in out + err
    assert not (d / "new.db").exists()


def test_the_key_checks_never_repeat_a_private_key(tmp_path):
    key = tmp_path / "k.pem"
    Signer.generate(ORIGIN).save(key)
    pem = key.read_text()
    for check in (check_vkey, check_cosigner_vkey):
        with pytest.raises(OcrrError) as refused:
            check(pem)
        assert _secret(key)[:12] not in str(refused.value) and "PRIVATE KEY" not in str(refused.value)


def test_a_bad_verifier_key_is_shown_cut_short():
    long = "a+b+" + "x" * 5000
    with pytest.raises(OcrrError, match=r"bad verifier key 'a\+b\+x+\.\.\.' \(the key id is not 8 hex digits\)"):
        check_vkey(long)
    assert shown("short") == "'short'"
    assert len(shown(long)) == 80
