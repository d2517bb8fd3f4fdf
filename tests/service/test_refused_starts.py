"""A start of ``ocrr serve`` that is refused says why once, naming the fix, and leaves nothing
behind: an encoder whose vectors are not as wide as the ledger's is refused at the start (not
by every text request after it), and a ledger file that start made is removed (one that
existed before is never touched)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_helpers import DIM, TOKEN, HashingEncoder, open_state, seed

import ocrr.service.state
from ocrr.errors import OcrrError
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.service.config import ServiceConfig
from ocrr.service.state import build_state

pytest.importorskip("uvicorn", reason="the service extra is not installed (pip install -e '.[service]')")

import ocrr.service.server  # noqa: E402
from ocrr.service.server import serve  # noqa: E402


@pytest.fixture(autouse=True)
def never_served(monkeypatch):
    """A start these tests expect refused fails the test, not serves until stopped."""

    def started(*args, prepare=None, **kwargs):
        if prepare is not None:  # --workers N: the supervisor's check of the ledger
            prepare()
        raise AssertionError("the start was not refused: the service started")

    monkeypatch.setattr(ocrr.service.server, "supervise", started)
    monkeypatch.setattr(ocrr.service.server.uvicorn.Server, "run", started)


class NarrowEncoder(HashingEncoder):
    """The hashing encoder, half as wide: another encoder than the one the ledger was made with."""

    id = "test-hashing-narrow"

    def encode(self, texts, progress=None) -> np.ndarray:
        out = super().encode(texts, progress)[:, : DIM // 2]
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class FakeProcess:
    """Stands for ``EncoderProcess`` (no model): ``width`` wide, or failing to load (None)."""

    width: int | None = DIM // 2

    def __init__(self, spec: str, nice: int | str = 0):
        if self.width is None:
            raise OcrrError(f"cannot load encoder {spec!r}: no such model")
        self.dim, self.encoder_id = self.width, None

    def encode(self, texts, progress=None) -> np.ndarray:
        return np.eye(len(texts), self.dim, dtype=np.float32)

    def close(self) -> None:
        pass


def _seeded(path: Path) -> Path:
    state = open_state(path)
    seed(state)
    state.close()
    return path


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _refused(config: ServiceConfig) -> str:
    with pytest.raises(OcrrError) as refused:
        serve(config, log=lambda m: None)
    return str(refused.value)


# -- an encoder of another width ---------------------------------------------------------


def test_an_encoder_narrower_than_the_ledger_is_refused_at_the_start_naming_both(tmp_path):
    """Before: the service started, and every text request was a 400 ("query vectors have
    dimension 32 but this system was fitted on dimension 64")."""
    path = _seeded(tmp_path / "l.db")
    with pytest.raises(OcrrError) as refused:
        build_state(ServiceConfig(ledger=path, token=TOKEN), encoder=NarrowEncoder(), log=lambda m: None)
    said = str(refused.value)
    assert "makes vectors of dimension 32, but ledger" in said and "holds vectors of dimension 64" in said
    assert "serve it with the encoder its vectors were made with" in said and "or serve another ledger" in said
    open_state(path).close()  # the same ledger, with its own encoder: served


def test_an_encoder_process_is_checked_as_ocrr_serve_starts_it(tmp_path, monkeypatch):
    """``--encoder`` (its process stood for): the width comes from its warm-up."""
    monkeypatch.setattr(ocrr.service.state, "EncoderProcess", FakeProcess)
    path = _seeded(tmp_path / "l.db")
    said = _refused(ServiceConfig(ledger=path, token=TOKEN, encoder="minilm", port=0))
    assert said.startswith("--encoder minilm makes vectors of dimension 32, but ledger")
    with DurableLedger.open(path) as led:
        assert len(led) == 9  # (an existing ledger: kept, as it was)


def test_a_dataset_of_vectors_another_encoder_cannot_query_is_not_seeded(tmp_path):
    """``--fit synthetic`` (64-d vectors) with a 32-d encoder: refused before anything is stored."""
    config = ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, fit="synthetic")
    with pytest.raises(OcrrError, match="makes vectors of dimension 32, but --fit synthetic carries vectors of dim"):
        build_state(config, encoder=NarrowEncoder(), log=lambda m: None)
    with DurableLedger.open(tmp_path / "l.db") as led:
        assert len(led) == 0


# -- nothing left behind --------------------------------------------------------------------


def test_a_start_refused_before_the_ledger_is_made_makes_none(tmp_path):
    """Before: a 0-byte l.db was left (the key was read only once the ledger was claimed)."""
    said = _refused(ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "typo.pem", port=0))
    assert "cannot read the signing key" in said and "ocrr ledger keygen" in said
    assert _files(tmp_path) == []


@pytest.mark.parametrize(
    "options, words",
    [
        ({"system": "static_knn"}, "does not answer with the substrate's search and vote"),  # at the open
        ({"encoder": "minilm"}, "cannot load encoder 'minilm': no such model"),  # once the ledger is made
        ({"encoder": "minilm", "fit": "synthetic"}, "dimension 32, but --fit synthetic"),
        ({"fit": "csv:missing.csv"}, "missing.csv"),  # a dataset that does not load
        ({"workers": 2, "system": "static_knn"}, "does not answer with the substrate's search and vote"),
    ],
    ids=["system", "encoder", "fit-width", "fit-file", "workers"],
)
def test_a_refused_start_removes_the_ledger_it_made(tmp_path, monkeypatch, options, words):
    """Before: a 0-byte l.db (--system), or an initialised empty ledger and its -writer file
    (--encoder, --fit), stayed behind."""
    monkeypatch.setattr(ocrr.service.state, "EncoderProcess", FakeProcess)
    monkeypatch.setattr(FakeProcess, "width", None if "fit" not in options else DIM // 2)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "ledgers"
    folder.mkdir()
    said = _refused(ServiceConfig(ledger=folder / "l.db", token=TOKEN, port=0, **options))
    assert words in said
    assert _files(folder) == []


def test_a_refused_start_leaves_an_existing_ledger_and_its_files_as_they_were(tmp_path, monkeypatch):
    monkeypatch.setattr(ocrr.service.state, "EncoderProcess", FakeProcess)
    monkeypatch.setattr(FakeProcess, "width", None)
    path = _seeded(tmp_path / "l.db")
    (tmp_path / "l.db.token").write_text(TOKEN + "\n")
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    _refused(ServiceConfig(ledger=path, token=TOKEN, port=0, encoder="minilm"))
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before
    # And a file left by an earlier ledger of the name is not the start's to remove.
    path.unlink()
    _refused(ServiceConfig(ledger=path, token=TOKEN, port=0, encoder="minilm"))
    assert not path.exists() and (tmp_path / "l.db.token").read_text() == TOKEN + "\n"
