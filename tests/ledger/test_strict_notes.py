"""Signed notes and checkpoints are parsed exactly as c2sp.org/signed-note,
c2sp.org/tlog-checkpoint and Go's golang.org/x/mod/sumdb/note allow,
and a consistency proof from the empty log is accepted (RFC 9162 2.1.4)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, TreeHead, verify_checkpoint, verify_head
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import EMPTY_ROOT, ProofError, leaf_hash, verify_consistency

ORIGIN = "example.com/strict"
ROOT = hashlib.sha256(b"root").digest()
ROOT64 = base64.b64encode(ROOT).decode()
EM = "\u2014"


@pytest.fixture(scope="module")
def signer():
    return Signer.generate(ORIGIN)


@pytest.fixture(scope="module")
def witness():
    return Signer.generate("witness.example/w1")


def _sig_line(signer: Signer, text: str) -> str:
    """The signature line ``signer`` puts under ``text`` (built here from the spec, so the
    tests do not depend on the code under test to sign malformed texts)."""
    sig = signer._key.sign(text.encode("utf-8"))
    return f"{EM} {signer.origin} {base64.b64encode(signer.key_id + sig).decode()}\n"


def _note(signer: Signer, text: str, *extra: str) -> str:
    return f"{text}\n{_sig_line(signer, text)}" + "".join(extra)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _extra_bits(b64: str) -> str:
    """The same bytes in base64 with an unused bit of the last character set: Python's
    and Go's lenient decoders accept it, the canonical (strict) spelling does not."""
    data = b64.rstrip("=")
    last = _ALPHABET[_ALPHABET.index(data[-1]) | 1]
    return data[:-1] + last + b64[len(data) :]


# -- what is accepted ----------------------------------------------------------------


def test_the_checkpoints_ocrr_signs_verify(signer):
    assert verify_checkpoint(signer.checkpoint(460, ROOT), signer.vkey) == (ORIGIN, 460, ROOT)
    assert verify_checkpoint(signer.checkpoint(0, EMPTY_ROOT), signer.vkey) == (ORIGIN, 0, EMPTY_ROOT)
    signed = signer.sign_head(TreeHead(7, ROOT, hashlib.sha256(b"c").digest(), 1_700_000_000_000))
    assert verify_checkpoint(signed["checkpoint"], signer.vkey) == (ORIGIN, 7, ROOT)
    assert verify_checkpoint(signed["checkpoint"].encode(), signer.vkey)[1] == 7  # bytes too
    assert verify_head(signed, signer.vkey).size == 7


def test_what_the_specs_allow_is_accepted(signer, witness):
    text = f"{ORIGIN}\n460\n{ROOT64}\n"
    # a witness's cosignature before and after ours, on the same text
    note = _note(signer, text, _sig_line(witness, text))
    assert verify_checkpoint(note, signer.vkey) == (ORIGIN, 460, ROOT)
    note = f"{text}\n{_sig_line(witness, text)}{_sig_line(signer, text)}"
    assert verify_checkpoint(note, signer.vkey)[1] == 460
    # an unknown signature (any bytes, at least 5) by our name but another key id is ignored
    other = f"{EM} {ORIGIN} {_b64(bytes(4 + 64))}\n"
    assert verify_checkpoint(_note(signer, text, other), signer.vkey)[1] == 460
    # non-empty extension lines; non-ASCII printable text; DEL is not a C0 control
    text2 = f"{ORIGIN}\n460\n{ROOT64}\nextension line\u00e9 \x7f\n"
    assert verify_checkpoint(_note(signer, text2), signer.vkey) == (ORIGIN, 460, ROOT)
    # 16 signatures (the spec's floor for what verifiers accept), ours repeated
    assert verify_checkpoint(_note(signer, text, *[_sig_line(witness, text)] * 15), signer.vkey)[1] == 460
    assert verify_checkpoint(_note(signer, text, _sig_line(signer, text)), signer.vkey)[1] == 460
    # the largest tree size Go's sumdb/tlog holds; a key id written in upper-case hex
    big = f"{ORIGIN}\n{2**63 - 1}\n{ROOT64}\n"
    name, kid, key = signer.vkey.split("+", 2)
    assert verify_checkpoint(_note(signer, big), f"{name}+{kid.upper()}+{key}")[1] == 2**63 - 1


def test_sign_note_signs_any_text_ending_in_newline(signer):
    note = signer.sign_note(f"{ORIGIN}\n3\n{ROOT64}\next\n")
    assert verify_checkpoint(note, signer.vkey) == (ORIGIN, 3, ROOT)
    with pytest.raises(OcrrError, match="newline"):
        signer.sign_note(f"{ORIGIN}\n3\n{ROOT64}")


# -- what is rejected: the checkpoint body (validly signed, so only the format is wrong) --

URLSAFE_ROOT = base64.urlsafe_b64encode(bytes([0xFB, 0xFF]) * 16).decode()
BAD_BODIES = {
    "size-leading-zero": f"{ORIGIN}\n0460\n{ROOT64}\n",
    "size-plus-sign": f"{ORIGIN}\n+460\n{ROOT64}\n",
    "size-underscore": f"{ORIGIN}\n4_60\n{ROOT64}\n",
    "size-arabic-indic-digits": f"{ORIGIN}\n\u0664\u0666\u0660\n{ROOT64}\n",
    "size-fullwidth-digits": f"{ORIGIN}\n\uff14\uff16\uff10\n{ROOT64}\n",
    "size-negative": f"{ORIGIN}\n-1\n{ROOT64}\n",
    "size-minus-zero": f"{ORIGIN}\n-0\n{ROOT64}\n",
    "size-double-zero": f"{ORIGIN}\n00\n{ROOT64}\n",
    "size-leading-space": f"{ORIGIN}\n 460\n{ROOT64}\n",
    "size-trailing-space": f"{ORIGIN}\n460 \n{ROOT64}\n",
    "size-over-int64": f"{ORIGIN}\n{2**63}\n{ROOT64}\n",
    "size-huge": f"{ORIGIN}\n{'9' * 5000}\n{ROOT64}\n",
    "root-31-bytes": f"{ORIGIN}\n460\n{_b64(ROOT[:31])}\n",
    "root-33-bytes": f"{ORIGIN}\n460\n{_b64(ROOT + b'x')}\n",
    "root-empty": f"{ORIGIN}\n460\n\n",
    "root-unpadded": f"{ORIGIN}\n460\n{ROOT64.rstrip('=')}\n",
    "root-extra-bits": f"{ORIGIN}\n460\n{_extra_bits(ROOT64)}\n",
    "root-urlsafe-alphabet": f"{ORIGIN}\n460\n{URLSAFE_ROOT}\n",
    "root-inner-space": f"{ORIGIN}\n460\n{ROOT64[:20]} {ROOT64[20:]}\n",
    "root-double-padding": f"{ORIGIN}\n460\n{ROOT64}=\n",
    "only-two-lines": f"{ORIGIN}\n460\n",
    "empty-extension-line": f"{ORIGIN}\n460\n{ROOT64}\n\next\n",
    "empty-origin": f"\n460\n{ROOT64}\n",
}


def test_the_base64_cases_decode_leniently():
    """The bad spellings are ones a lax decoder takes for the same (or a 32-byte) root."""
    body = BAD_BODIES["root-extra-bits"].split("\n")[2]
    assert body != ROOT64 and base64.b64decode(body, validate=True) == ROOT
    assert len(base64.urlsafe_b64decode(URLSAFE_ROOT)) == 32 and "-" in URLSAFE_ROOT and "_" in URLSAFE_ROOT
    assert base64.b64decode(ROOT64.rstrip("=") + "=") == ROOT


@pytest.mark.parametrize("text", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_malformed_checkpoint_bodies_are_rejected(signer, text):
    with pytest.raises(OcrrError, match="malformed|origin"):
        verify_checkpoint(_note(signer, text), signer.vkey)


# -- what is rejected: the signed note around it ------------------------------------------


def _good(signer: Signer) -> tuple[str, str]:
    text = f"{ORIGIN}\n460\n{ROOT64}\n"
    return text, _note(signer, text)


def _bad_notes(signer: Signer, witness: Signer) -> dict[str, str | bytes]:
    text, good = _good(signer)
    ours = _sig_line(signer, text)
    wit = _sig_line(witness, text)
    blob = wit.split(" ")[2].rstrip("\n")
    return {
        "no-final-newline": good[:-1],
        "two-final-newlines": good + "\n",
        "crlf-line-ends": good.replace("\n", "\r\n"),
        "carriage-return-in-text": _note(signer, f"{ORIGIN}\n460\n{ROOT64}\nx\ry\n"),
        "tab-in-text": _note(signer, f"{ORIGIN}\n460\n{ROOT64}\nx\ty\n"),
        "nul-in-text": _note(signer, f"{ORIGIN}\n460\n{ROOT64}\nx\x00y\n"),
        "escape-in-text": _note(signer, f"{ORIGIN}\n460\n{ROOT64}\n\x1b[31m\n"),
        "control-in-signature-line": good + f"{EM} w\x01 {blob}\n",
        "invalid-utf8": good.encode() + b"\xff\n",
        "lone-surrogate": good + f"{EM} witness.example/w1\ud800 {blob}\n",
        "extra-line-hyphen-not-em-dash": good + f"- witness.example/w1 {blob}\n",
        "extra-line-en-dash": good + f"\u2013 witness.example/w1 {blob}\n",
        "extra-line-no-space-after-dash": good + f"{EM}witness.example/w1 {blob}\n",
        "extra-line-no-signature": good + f"{EM} witness.example/w1\n",
        "extra-line-empty-signature": good + f"{EM} witness.example/w1 \n",
        "extra-line-empty-name": good + f"{EM}  {blob}\n",
        "extra-line-plus-in-name": good + f"{EM} witness+example {blob}\n",
        "extra-line-nbsp-in-name": good + f"{EM} witness\u00a0example {blob}\n",
        "extra-line-ideographic-space-in-name": good + f"{EM} witness\u3000example {blob}\n",
        "extra-line-two-spaces": good + f"{EM} witness.example/w1  {blob}\n",
        "extra-line-trailing-space": good + f"{EM} witness.example/w1 {blob} \n",
        "extra-line-not-base64": good + f"{EM} witness.example/w1 not*base64!\n",
        "extra-line-unpadded-base64": good + f"{EM} witness.example/w1 {_b64(b'12345678').rstrip('=')}\n",
        "extra-line-extra-bits": good + f"{EM} witness.example/w1 {_extra_bits(blob)}\n",
        "extra-line-urlsafe-base64": good
        + f"{EM} witness.example/w1 {base64.urlsafe_b64encode(bytes([255]) * 9).decode()}\n",
        "extra-line-4-bytes": good + f"{EM} witness.example/w1 {_b64(b'abcd')}\n",
        "extra-line-empty-bytes-after-id": good + f"{EM} witness.example/w1 {_b64(b'')}\n",
        "extra-blank-line-between-signatures": good + "\n" + wit,
        "garbage-line-after-signatures": good + "not a signature\n",
        "signature-block-empty": text + "\n",
        "no-blank-line": text + ours,
        "too-many-signatures": _note(signer, text, *[wit] * 100),
        "our-key-bad-signature-first": f"{text}\n{EM} {ORIGIN} {_b64(signer.key_id + bytes(64))}\n{ours}",
        "our-key-short-signature": f"{text}\n{EM} {ORIGIN} {_b64(signer.key_id + bytes(63))}\n",
        "origin-is-not-key-name": _note(signer, f"other.example/log\n460\n{ROOT64}\n"),
    }


_CASES = sorted(_bad_notes(Signer.generate(ORIGIN), Signer.generate("w")))


@pytest.mark.parametrize("case", _CASES)
def test_malformed_signed_notes_are_rejected(signer, witness, case):
    note = _bad_notes(signer, witness)[case]
    with pytest.raises(OcrrError) as e:
        verify_checkpoint(note, signer.vkey)
    assert "ocrr ledger" in str(e.value) or "signature" in str(e.value) or "origin" in str(e.value)


BAD_VKEYS = {
    "no-plus": "example.com",
    "short-key-id": "{name}+{kid6}+{key}",
    "key-id-with-space": "{name}+{kid_sp}+{key}",
    "key-id-0x": "{name}+0x{kid6}+{key}",
    "key-with-space": "{name}+{kid}+{key_sp}",
    "truncated-key": "{name}+{kid}+{key_short}",
    "name-with-space": "exa mple+{kid}+{key}",
}


@pytest.mark.parametrize("case", BAD_VKEYS, ids=BAD_VKEYS.keys())
def test_malformed_verifier_keys_are_rejected(signer, case):
    name, kid, key = signer.vkey.split("+", 2)
    vkey = BAD_VKEYS[case].format(
        name=name,
        kid=kid,
        kid6=kid[:6],
        kid_sp=f"{kid[:4]} {kid[5:]}",
        key=key,
        key_sp=f"{key[:8]} {key[8:]}",
        key_short=key[:40],
    )
    with pytest.raises(OcrrError, match="bad verifier key"):
        verify_checkpoint(signer.checkpoint(1, ROOT), vkey)


# -- signed heads (/head) are checked as strictly ------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"size": "7"},
        {"size": 7.9},
        {"size": True},
        {"size": -1},
        {"timestamp_ms": "1700000000000"},
        {"root": _b64(ROOT[:31])},
        {"root": ROOT64.rstrip("=")},
        {"chain_head": _b64(bytes(33))},
        {"origin": "other.example/log"},
    ],
    ids=repr,
)
def test_malformed_signed_heads_are_rejected(signer, change):
    signed = signer.sign_head(TreeHead(7, ROOT, hashlib.sha256(b"c").digest(), 1_700_000_000_000))
    with pytest.raises(OcrrError, match="malformed signed head|does not verify"):
        verify_head({**signed, **change}, signer.vkey)


def test_a_signed_head_with_a_non_canonical_signature_is_rejected(signer):
    signed = signer.sign_head(TreeHead(7, ROOT, hashlib.sha256(b"c").digest(), 1_700_000_000_000))
    with pytest.raises(OcrrError, match="malformed signed head"):
        verify_head({**signed, "signature": signed["signature"].rstrip("=")}, signer.vkey)


# -- consistency from the empty log ---------------------------------------------------------


def test_every_log_is_consistent_with_the_empty_log():
    tree = MerkleTree()
    verify_consistency(0, 0, [], EMPTY_ROOT, EMPTY_ROOT)
    for i in range(5):
        tree.append(leaf_hash(b"%d" % i))
        verify_consistency(0, len(tree), [], EMPTY_ROOT, tree.root())
        verify_consistency(0, len(tree), None, EMPTY_ROOT, tree.root())


@pytest.mark.parametrize(
    "args",
    [
        (0, 3, [ROOT], EMPTY_ROOT, ROOT),  # a proof from the empty log has no hashes
        (0, 3, [], ROOT, ROOT),  # a log of size 0 has the empty root, nothing else
        (0, 3, [], EMPTY_ROOT, ROOT[:31]),  # the new root is still a hash
        (0, 0, [], EMPTY_ROOT, ROOT),
        (0, 0, [], ROOT, ROOT),
        (1, 0, [], ROOT, EMPTY_ROOT),
    ],
    ids=["proof-not-empty", "root1-not-empty-root", "root2-not-a-hash", "root2-for-size-0", "both-wrong", "shrinks"],
)
def test_bad_consistency_from_the_empty_log_is_rejected(args):
    with pytest.raises(ProofError):
        verify_consistency(*args)


def test_the_standalone_verifier_checks_proofs_from_the_empty_log(tmp_path, capsys):
    from ocrr.ledger.verify import main

    tree = MerkleTree()
    for i in range(3):
        tree.append(leaf_hash(b"%d" % i))
    doc = {"from": 0, "to": 3, "proof": [], "root_from": _b64(EMPTY_ROOT), "root_to": _b64(tree.root())}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    trusted = ["--size", "3", "--root", _b64(tree.root())]
    assert main(["consistency", str(path), *trusted]) == 0
    for bad in ({"root_to": _extra_bits(_b64(tree.root()))}, {"root_from": 12}, {"proof": [_b64(ROOT)]}):
        path.write_text(json.dumps({**doc, **bad}))
        assert main(["consistency", str(path), *trusted]) == 1
    assert capsys.readouterr().out.count("FAILED") == 3
