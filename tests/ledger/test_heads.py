"""Signed tree heads and C2SP checkpoints (Ed25519 via cryptography)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, TreeHead, checkpoint_text, default_origin, verify_checkpoint, verify_head

ROOT = hashlib.sha256(b"root").digest()
HEAD = TreeHead(12, ROOT, hashlib.sha256(b"chain").digest(), 1_700_000_000_000)


@pytest.fixture(scope="module")
def signer():
    return Signer.generate("example.com/ocrr-test")


def test_checkpoint_is_a_c2sp_signed_note(signer):
    note = signer.checkpoint(12, ROOT)
    text, _, sigs = note.partition("\n\n")
    assert text + "\n" == checkpoint_text("example.com/ocrr-test", 12, ROOT)
    assert text.split("\n") == ["example.com/ocrr-test", "12", base64.b64encode(ROOT).decode()]
    (line,) = sigs.splitlines()
    dash, name, blob = line.split(" ")
    raw = base64.b64decode(blob)
    assert dash == "\u2014" and name == "example.com/ocrr-test" and len(raw) == 4 + 64
    # key id = SHA-256(name || 0x0A || 0x01 || public key)[:4] (c2sp.org/signed-note)
    assert raw[:4] == hashlib.sha256(b"example.com/ocrr-test\n\x01" + signer.public_bytes).digest()[:4]
    name, key_id, key = signer.vkey.split("+", 2)
    assert name == "example.com/ocrr-test" and bytes.fromhex(key_id) == raw[:4]
    assert base64.b64decode(key) == b"\x01" + signer.public_bytes
    assert verify_checkpoint(note, signer.vkey) == ("example.com/ocrr-test", 12, ROOT)


def test_altered_checkpoints_and_heads_are_rejected(signer):
    note = signer.checkpoint(12, ROOT)
    with pytest.raises(OcrrError, match="does not verify"):
        verify_checkpoint(note.replace("\n12\n", "\n13\n"), signer.vkey)
    other = Signer.generate("example.com/ocrr-test")
    with pytest.raises(OcrrError, match="no signature"):
        verify_checkpoint(note, other.vkey)
    signed = signer.sign_head(HEAD)
    assert verify_head(signed, signer.vkey) == HEAD
    with pytest.raises(OcrrError, match="does not verify"):
        verify_head({**signed, "size": 11}, signer.vkey)
    assert verify_checkpoint(signed["checkpoint"], signer.vkey)[1] == 12


def test_keys_round_trip_through_a_pem_file(signer, tmp_path):
    path = tmp_path / "key.pem"
    signer.save(path)
    assert (path.stat().st_mode & 0o777) == 0o600
    again = Signer.load(path, "example.com/ocrr-test")
    assert again.vkey == signer.vkey
    with pytest.raises(OcrrError, match="keygen"):
        Signer.load(tmp_path / "missing.pem", "x")


def test_origins_are_checked():
    assert default_origin("/data/my ledger.db") == "ocrr.invalid/my-ledger"
    with pytest.raises(OcrrError, match="origin"):
        Signer.generate("has space")
    with pytest.raises(OcrrError, match="origin"):
        Signer.generate("a+b")


def test_a_signing_key_saves_loads_and_names_its_fix(tmp_path):
    signer = Signer.generate("example.com/log")
    signer.save(tmp_path / "k.pem")
    loaded = Signer.load(tmp_path / "k.pem", "example.com/log")
    assert loaded.vkey == signer.vkey and loaded.origin == "example.com/log"
    name, key_id, key = signer.vkey.split("+", 2)  # the key's base64 may hold "+" too
    raw = base64.b64decode(key)
    assert raw[:1] == b"\x01" and bytes.fromhex(key_id) == hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4]
    (tmp_path / "junk.pem").write_text("junk")
    with pytest.raises(OcrrError, match=r"cannot read the signing key .*junk\.pem.*`ocrr ledger keygen .*junk\.pem`"):
        Signer.load(tmp_path / "junk.pem", "example.com/log")
