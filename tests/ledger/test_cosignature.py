"""Witness cosignatures (c2sp.org/tlog-cosignature): made, attached, verified and counted."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import (
    Cosigner,
    attach_cosignatures,
    check_cosigner_vkey,
    check_quorum,
    cosigned_by,
    verify_cosignature,
)
from ocrr.ledger.heads import Signer, parse_signed_note, verify_checkpoint
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import leaf_hash


@pytest.fixture
def checkpoint():
    """A log's signed checkpoint over 5 entries, and its signer."""
    tree = MerkleTree()
    for i in range(5):
        tree.append(leaf_hash(f"entry {i}".encode()))
    signer = Signer.generate("example.com/cosigned-log")
    return signer.checkpoint(5, tree.root()), signer


def test_the_line_is_the_specs_layout_and_verifies(checkpoint):
    note, signer = checkpoint
    witness = Cosigner.generate("witness.example/w1")
    line = witness.cosign(note, timestamp=1679315147)
    assert line.startswith("\u2014 witness.example/w1 ") and line.endswith("\n")
    raw = base64.b64decode(line.split(" ")[2])
    public = witness.public_bytes
    assert raw[:4] == hashlib.sha256(b"witness.example/w1\n\x04" + public).digest()[:4]
    assert raw[4:12] == struct.pack(">Q", 1679315147) and len(raw) == 4 + 8 + 64  # big-endian time
    body = note[: note.index("\n\n") + 1]
    message = f"cosignature/v1\ntime 1679315147\n{body}".encode()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message)  # raises if not
    assert witness.vkey.split("+", 2)[2] == base64.b64encode(b"\x04" + public).decode()
    cosigned = attach_cosignatures(note, line)
    assert verify_cosignature(cosigned, witness.vkey) == 1679315147
    assert verify_checkpoint(cosigned, signer.vkey)[1] == 5  # the log's own signature still checks


def test_a_tampered_body_or_wrong_timestamp_does_not_verify(checkpoint):
    note, _ = checkpoint
    witness = Cosigner.generate("witness.example/w1")
    line = witness.cosign(note, timestamp=1000)
    cosigned = attach_cosignatures(note, line)
    tampered = cosigned.replace("\n5\n", "\n6\n", 1)
    with pytest.raises(OcrrError, match="does not verify"):
        verify_cosignature(tampered, witness.vkey)
    raw = bytearray(base64.b64decode(line.split(" ")[2]))
    raw[4:12] = struct.pack(">Q", 1001)  # another time than the one signed
    other_time = f"\u2014 witness.example/w1 {base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(OcrrError, match="does not verify"):
        verify_cosignature(attach_cosignatures(note, other_time), witness.vkey)
    raw[4:12] = struct.pack("<Q", 1000)  # the right time in the wrong byte order
    little_endian = f"\u2014 witness.example/w1 {base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(OcrrError, match="does not verify"):
        verify_cosignature(attach_cosignatures(note, little_endian), witness.vkey)


def test_another_key_or_a_plain_note_signature_is_not_a_cosignature(checkpoint):
    note, signer = checkpoint
    witness, impostor = Cosigner.generate("witness.example/w1"), Cosigner.generate("witness.example/w1")
    cosigned = attach_cosignatures(note, impostor.cosign(note))
    with pytest.raises(OcrrError, match="no cosignature by witness witness.example/w1"):
        verify_cosignature(cosigned, witness.vkey)  # same name, other key: another key id
    with pytest.raises(OcrrError, match="no cosignature"):
        verify_cosignature(note, witness.vkey)
    # The log's own (type 0x01) key is not a cosigner of its checkpoint.
    with pytest.raises(OcrrError, match="no cosignature"):
        verify_cosignature(note, signer.vkey)
    with pytest.raises(OcrrError, match="bad witness verifier key"):
        check_cosigner_vkey(witness.vkey.replace("+", "+0", 1)[:-1])


def test_a_go_style_ed25519_note_key_verifies_cosignatures_of_the_same_key(checkpoint):
    note, _ = checkpoint
    witness = Cosigner.generate("witness.example/w1")
    public = witness.public_bytes
    kid = hashlib.sha256(b"witness.example/w1\n\x01" + public).digest()[:4]
    key_b64 = base64.b64encode(b"\x01" + public).decode()
    plain_vkey = f"witness.example/w1+{kid.hex()}+{key_b64}"
    cosigned = attach_cosignatures(note, witness.cosign(note, timestamp=7))
    assert verify_cosignature(cosigned, plain_vkey) == 7


def test_quorum_counts_distinct_trusted_witnesses(checkpoint):
    note, _ = checkpoint
    w1, w2, w3 = (Cosigner.generate(f"witness.example/w{i}") for i in (1, 2, 3))
    stranger = Cosigner.generate("stranger.example/w")
    note2 = attach_cosignatures(note, w1.cosign(note, timestamp=10) + w1.cosign(note, timestamp=20))
    note2 = attach_cosignatures(note2, [w2.cosign(note, timestamp=30), stranger.cosign(note)])
    trusted = [w1.vkey, w2.vkey, w3.vkey]
    assert cosigned_by(note2, trusted) == {w1.vkey: 20, w2.vkey: 30}
    assert check_quorum(note2, trusted, 2) == {w1.vkey: 20, w2.vkey: 30}
    with pytest.raises(OcrrError, match="cosigned by 2 of the trusted witnesses, fewer than the quorum of 3"):
        check_quorum(note2, trusted, 3)
    # One witness named twice (its vkey repeated) still counts once.
    assert len(cosigned_by(note2, [w1.vkey, w1.vkey + " "])) == 1
    # A line that claims to be by a trusted witness and does not verify fails closed.
    forged = w3.cosign(note.replace("\n5\n", "\n50\n"), timestamp=1)  # signed over another body
    with pytest.raises(OcrrError, match="witness.example/w3 does not verify"):
        check_quorum(attach_cosignatures(note2, forged), trusted, 1)


def test_attaching_keeps_the_note_well_formed(checkpoint):
    note, _ = checkpoint
    w1 = Cosigner.generate("witness.example/w1")
    line = w1.cosign(note, timestamp=5)
    once = attach_cosignatures(note, line)
    assert attach_cosignatures(once, line) == once  # a repeated line is dropped
    assert len(parse_signed_note(once)[1]) == 2
    with pytest.raises(OcrrError, match="malformed signed note"):
        attach_cosignatures(note, "not a signature line\n")


def test_keys_save_and_load_with_their_name(tmp_path, checkpoint):
    note, _ = checkpoint
    witness = Cosigner.generate("witness.example/w1")
    witness.save(tmp_path / "w.pem")
    loaded = Cosigner.load(tmp_path / "w.pem", "witness.example/w1")
    assert loaded.vkey == witness.vkey
    assert verify_cosignature(attach_cosignatures(note, loaded.cosign(note)), witness.vkey) > 0
    with pytest.raises(FileExistsError):
        witness.save(tmp_path / "w.pem")  # never overwritten
    (tmp_path / "junk.pem").write_text("junk")
    with pytest.raises(OcrrError, match="ocrr witness keygen"):
        Cosigner.load(tmp_path / "junk.pem", "witness.example/w1")
    with pytest.raises(OcrrError, match="witness name"):
        Cosigner.generate("has space")
