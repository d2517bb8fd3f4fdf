"""Cosignatures ocrr makes verify with the Go reference of c2sp.org/tlog-cosignature
(github.com/transparency-dev/formats/note), and the reference's cosignatures verify in ocrr.

The Go program (tests/go/cosign) is built offline in GOPATH mode over a copy of the reference
($OCRR_GO_REFERENCE_DIR/transparency-dev-formats) and Debian's golang.org/x/mod sources."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ocrr.ledger.cosignature import Cosigner, attach_cosignatures, check_quorum, verify_cosignature
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import leaf_hash

GO_SRC = Path(__file__).resolve().parents[1] / "go" / "cosign"
DEBIAN_GOPATH = Path("/usr/share/gocode")  # where Debian's golang-*-dev packages put Go sources
INSTALL = "apt-get install golang-go golang-golang-x-mod-dev"
REFERENCE = Path(os.environ.get("OCRR_GO_REFERENCE_DIR", "")).expanduser() / "transparency-dev-formats"
HAVE_REFERENCE = bool(os.environ.get("OCRR_GO_REFERENCE_DIR")) and (REFERENCE / "note").is_dir()

pytestmark = pytest.mark.skipif(
    not HAVE_REFERENCE,
    reason="needs the Go reference: set OCRR_GO_REFERENCE_DIR to a folder holding transparency-dev-formats/ "
    "(github.com/transparency-dev/formats; .ci/run sets it from ../shared/go)",
)


def _with_big_endian_timestamps(source: Path) -> None:
    """The reference at commit 6c6f170 writes and reads the timestamp little-endian; the spec
    (RFC 8446's conventions: big-endian), Sigsum, torchwood and transparency-dev/formats since
    then use big-endian. Make the temporary copy do what its later versions do (a no-op on a
    copy that already does)."""
    text = source.read_text()
    source.write_text(text.replace("binary.LittleEndian.", "binary.BigEndian."))


@pytest.fixture(scope="module")
def cosign_tool(tmp_path_factory) -> Path:
    go = shutil.which("go")
    if go is None or not (DEBIAN_GOPATH / "src/golang.org/x/mod/sumdb/note/note.go").exists():
        pytest.skip(f"Go or Debian's golang.org/x/mod sources are missing: {INSTALL}")
    tmp = tmp_path_factory.mktemp("go")
    formats = tmp / "gopath/src/github.com/transparency-dev/formats"
    shutil.copytree(REFERENCE, formats)
    _with_big_endian_timestamps(formats / "note/note_cosigv1.go")
    shutil.copytree(GO_SRC, tmp / "gopath/src/cosign")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{tmp / 'gopath'}:{DEBIAN_GOPATH}", "GOFLAGS": ""}
    env["GOCACHE"] = os.environ.get("GOCACHE") or str(tmp / "gocache")
    out = tmp / "cosign"
    done = subprocess.run(
        [go, "build", "-o", str(out), "."], cwd=tmp / "gopath/src/cosign", env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"go build failed:\n{done.stderr}"
    return out


@pytest.fixture
def checkpoint():
    tree = MerkleTree()
    for i in range(11):
        tree.append(leaf_hash(f"entry {i}".encode()))
    signer = Signer.generate("example.com/go-cosigned")
    return signer.checkpoint(11, tree.root()), signer


def _plain_vkey(cosigner: Cosigner) -> str:
    """The witness's key as a standard Ed25519 note vkey (type 0x01): what the reference's
    NewVerifierForCosignatureV1 takes at that commit (it derives the 0x04 key id itself)."""
    raw = b"\x01" + cosigner.public_bytes
    key_id = hashlib.sha256(cosigner.name.encode() + b"\n" + raw).digest()[:4]
    return f"{cosigner.name}+{key_id.hex()}+{base64.b64encode(raw).decode()}"


def test_go_verifies_a_cosignature_ocrr_made(cosign_tool, checkpoint, tmp_path):
    note, signer = checkpoint
    witness = Cosigner.generate("witness.example/ocrr")
    cosigned = attach_cosignatures(note, witness.cosign(note, timestamp=1679315147))
    (tmp_path / "note").write_text(cosigned)
    cmd = [str(cosign_tool), "verify", str(tmp_path / "note"), signer.vkey, _plain_vkey(witness)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok 1679315147\n", done.stdout + done.stderr
    (tmp_path / "note").write_text(cosigned.replace("\n11\n", "\n12\n", 1))  # Go does check: a tampered note fails
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "FAILED" in done.stdout


def test_ocrr_verifies_a_cosignature_go_made(cosign_tool, checkpoint, tmp_path):
    note, _ = checkpoint
    (tmp_path / "note").write_text(note)
    before = int(time.time())
    done = subprocess.run(
        [str(cosign_tool), "sign", str(tmp_path / "note"), "witness.example/go"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    vkey, line = done.stdout.split("\n", 1)
    assert line.startswith("\u2014 witness.example/go ")
    cosigned = attach_cosignatures(note, line)
    assert before <= verify_cosignature(cosigned, vkey) <= time.time()
    assert list(check_quorum(cosigned, [vkey], 1)) == [vkey]
