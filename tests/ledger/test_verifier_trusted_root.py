"""The standalone verifier (ocrr/ledger/verify.py, and `ocrr ledger check`) says ok only against a
root the caller trusts, never against the root a proof document carries alone; a document whose
redundant fields (leaf_hash, entry.bytes, entry.hash, entry.id) contradict its entry is rejected."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ocrr.cli.main import main as ocrr
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.verify import entry_bytes, leaf_hash
from ocrr.ledger.verify import main as verify

VERIFY_PY = Path(__file__).resolve().parents[2] / "src" / "ocrr" / "ledger" / "verify.py"


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


@pytest.fixture()
def log(tmp_path, capsys):
    """A ledger of 11 entries: (its root, the proof of entry 3 at size 11, at size 7, and the
    consistency proof from 7 to 11), each document written to a file: (root, paths)."""
    path = tmp_path / "l.db"
    rng = np.random.default_rng(0)
    with DurableLedger.open(path) as led:
        for i in range(11):
            vec = rng.normal(size=4)  # made a unit row below: a durable ledger takes no other
            led.append(vec / np.linalg.norm(vec), f"c{i % 3}", f"text {i}" if i % 2 else None)
        root = led.root()
    paths = {}
    for name, argv in (
        ("p11", ["prove", str(path), "--entry", "3"]),
        ("p7", ["prove", str(path), "--entry", "3", "--size", "7"]),
        ("c7", ["consistency", str(path), "--from", "7"]),
    ):
        assert ocrr(["ledger", *argv]) == 0
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(capsys.readouterr().out)
    return root, paths


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = verify([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _trusted(root: bytes, size: int = 11) -> list[str]:
    return ["--size", str(size), "--root", _b64(root)]


def test_without_a_trusted_root_it_refuses_and_says_how(log, capsys):
    """Before: ``ok`` (the proof against the root it carries)."""
    _, paths = log
    for kind, name in (("inclusion", "p11"), ("consistency", "c7")):
        code, out, err = _run(capsys, kind, paths[name])
        assert code == 2 and "ok" not in out
        assert "against the root it carries" in err and "--size N --root ROOT" in err and "--checkpoint" in err


def test_a_proof_of_the_trusted_log_is_ok(log, capsys):
    root, paths = log
    assert _run(capsys, "inclusion", paths["p11"], *_trusted(root))[:2] == (0, "ok\n")
    hex_root = ["--size", "11", "--root", root.hex()]
    assert _run(capsys, "inclusion", paths["p11"], *hex_root)[0] == 0
    assert _run(capsys, "consistency", paths["c7"], *_trusted(root))[0] == 0  # trusted: the newer end


def test_a_self_consistent_proof_of_another_log_fails(tmp_path, log, capsys):
    """Entry 3 in a tree of someone's own making: the proof holds for that tree's root (before:
    ``ok``), not for the trusted one."""
    root, paths = log
    doc = json.loads(paths["p11"].read_text())
    e = doc["entry"]
    raw = entry_bytes(3, e["label"], e["text"], base64.b64decode(e["vector"]), base64.b64decode(e["prev_hash"]))
    own = MerkleTree()
    for k in range(11):
        own.append(leaf_hash(raw) if k == 3 else leaf_hash(b"forged %d" % k))
    forged = {**doc, "root": _b64(own.root()), "proof": [_b64(p) for p in own.inclusion_proof(3, 11)]}
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged))
    code, out, _ = _run(capsys, "inclusion", path, *_trusted(root))
    assert code == 1 and "not the trusted root" in out


def test_a_proof_for_a_smaller_log_needs_a_consistency_proof(tmp_path, log, capsys):
    root, paths = log
    code, out, _ = _run(capsys, "inclusion", paths["p7"], *_trusted(root))
    assert code == 1 and "consistency proof from 7 to 11" in out
    assert _run(capsys, "inclusion", paths["p7"], *_trusted(root), "--consistency", paths["c7"])[:2] == (0, "ok\n")
    cons = json.loads(paths["c7"].read_text())
    cons["proof"] = cons["proof"][::-1]
    (tmp_path / "bad.json").write_text(json.dumps(cons))
    assert _run(capsys, "inclusion", paths["p7"], *_trusted(root), "--consistency", tmp_path / "bad.json")[0] == 1
    # A proof for a larger log than the trusted one: ask for the proof at the trusted size.
    p7_root = json.loads(paths["p7"].read_text())["root"]
    code, out, _ = _run(capsys, "inclusion", paths["p11"], "--size", "7", "--root", p7_root)
    assert code == 1 and "ask for the proof at size 7" in out


def test_a_consistency_proof_must_reach_the_trusted_root(log, capsys):
    root, paths = log
    wrong = hashlib.sha256(b"another log").digest()
    code, out, _ = _run(capsys, "consistency", paths["c7"], *_trusted(wrong))
    assert code == 1 and "not the trusted root" in out
    code, out, _ = _run(capsys, "consistency", paths["c7"], *_trusted(root, size=9))
    assert code == 1 and "neither end" in out


def test_a_signed_checkpoint_is_a_trusted_root(tmp_path, log, capsys):
    root, paths = log
    signer = Signer.generate("example.com/trusted-root")
    (tmp_path / "cp").write_text(signer.checkpoint(11, root))
    by_note = ["--checkpoint", tmp_path / "cp", "--vkey", signer.vkey]
    assert _run(capsys, "inclusion", paths["p11"], *by_note)[:2] == (0, "ok\n")
    (tmp_path / "head.json").write_text(json.dumps({"size": 11, "checkpoint": signer.checkpoint(11, root)}))
    assert (
        _run(capsys, "inclusion", paths["p11"], "--checkpoint", tmp_path / "head.json", "--vkey", signer.vkey)[0] == 0
    )
    (tmp_path / "vkey").write_text(signer.vkey + "\n")  # the key may be a file too
    assert _run(capsys, "inclusion", paths["p11"], "--checkpoint", tmp_path / "cp", "--vkey", tmp_path / "vkey")[0] == 0
    other = Signer.generate("example.com/trusted-root")  # the same name, another key
    code, out, _ = _run(capsys, "inclusion", paths["p11"], "--checkpoint", tmp_path / "cp", "--vkey", other.vkey)
    assert code == 1 and "checkpoint does not verify" in out
    (tmp_path / "cp7").write_text(signer.checkpoint(11, hashlib.sha256(b"fork").digest()))
    code, out, _ = _run(capsys, "inclusion", paths["p11"], "--checkpoint", tmp_path / "cp7", "--vkey", signer.vkey)
    assert code == 1 and "not the trusted root" in out  # a signed fork is still not this proof's log
    code, _, err = _run(capsys, "inclusion", paths["p11"], "--checkpoint", tmp_path / "cp")
    assert code == 2 and "--checkpoint and --vkey go together" in err
    code, _, err = _run(capsys, "inclusion", paths["p11"], *by_note, *_trusted(root))
    assert code == 2 and "not both" in err


@pytest.mark.parametrize(
    "field",
    ["leaf_hash", "entry.bytes", "entry.hash", "entry.id"],
)
def test_a_redundant_field_that_contradicts_the_entry_is_rejected(tmp_path, log, capsys, field):
    """Before: leaf_hash, entry.bytes and entry.hash were ignored (``ok``), entry.id was taken for the index."""
    root, paths = log
    doc = json.loads(paths["p11"].read_text())
    e = doc["entry"]
    raw = entry_bytes(3, e["label"], e["text"], base64.b64decode(e["vector"]), base64.b64decode(e["prev_hash"]))
    doc["entry"]["bytes"] = _b64(raw)  # as the service sends it: consistent, so accepted
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    assert _run(capsys, "inclusion", path, *_trusted(root))[0] == 0
    other = leaf_hash(b"another entry")
    if field == "leaf_hash":
        doc["leaf_hash"] = _b64(other)
    elif field == "entry.bytes":
        doc["entry"]["bytes"] = _b64(raw.replace(b"c0", b"c2"))
    elif field == "entry.hash":
        doc["entry"]["hash"] = _b64(other)
    else:
        doc["entry"]["id"] = 4
    path.write_text(json.dumps(doc))
    code, out, _ = _run(capsys, "inclusion", path, *_trusted(root))
    assert code == 1 and "contradicts" in out, out


def test_a_document_with_a_duplicate_key_is_refused(tmp_path, log, capsys):
    """Two leaf_hash values: a parser keeping the first and one keeping the last would disagree."""
    root, paths = log
    text = paths["p11"].read_text()
    dup = text.replace('"leaf_hash":', '"leaf_hash": "AAAA",\n  "leaf_hash":', 1)
    (tmp_path / "dup.json").write_text(dup)
    code, _, err = _run(capsys, "inclusion", tmp_path / "dup.json", *_trusted(root))
    assert code == 2 and "duplicate key 'leaf_hash'" in err


def test_ocrr_ledger_check_answers_the_same(log, capsys):
    root, paths = log
    code = ocrr(["ledger", "check", "inclusion", str(paths["p11"])])
    assert code == 2 and "against the root it carries" in capsys.readouterr().err
    code = ocrr(["ledger", "check", "inclusion", str(paths["p11"]), *_trusted(root)])
    assert code == 0 and json.loads(capsys.readouterr().out) == {
        "ok": True,
        "kind": "inclusion",
        "trusted_size": 11,
        "trusted_root": _b64(root),
    }
    code = ocrr(["ledger", "check", "inclusion", str(paths["p11"]), *_trusted(GENESIS)])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["ok"] and "not the trusted root" in out["reason"]


def test_the_copied_verifier_checks_against_a_trusted_root_with_the_standard_library_alone(tmp_path, log):
    root, paths = log
    copy = tmp_path / "verify.py"
    copy.write_text(VERIFY_PY.read_text())
    run = [sys.executable, "-I", "-S", str(copy), "inclusion", str(paths["p11"])]  # no site-packages: no ocrr
    done = subprocess.run([*run, *_trusted(root)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    (tmp_path / "cp").write_text("example.com/log\n11\n" + _b64(root) + "\n\n— example.com/log AAAA\n")
    done = subprocess.run(
        [*run, "--checkpoint", str(tmp_path / "cp"), "--vkey", "a+b+c"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "needs ocrr installed" in done.stderr and "--size N --root ROOT" in done.stderr
