"""``ocrr serve --index-file``: the service answers from the IVF index `ocrr ledger index`
saved, as the index trained at open answers; a damaged file is refused at the start, once,
by the process that starts the workers; the option needs the key that signed it."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.service.config import ServiceConfig
from ocrr.service.state import build_state
from ocrr.systems.substrate.persistent import open_substrate

faiss = pytest.importorskip("faiss")

ENTRIES, DIM, CLASSES = 24_000, 16, 40
ORIGIN = "test.invalid/served-index"
SPEC = "substrate:index=ivf_sq8:nlist=64:nprobe=8:rerank=50"


def _built(folder):
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(CLASSES, DIM))
    classes = rng.integers(CLASSES, size=ENTRIES + 200)
    vecs = centres[classes] + 0.4 * rng.normal(size=(len(classes), DIM))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    with DurableLedger.open(folder / "l.db", dim=DIM) as led:
        led.extend(vecs[:ENTRIES], [f"c{c}" for c in classes[:ENTRIES]], [f"t{i}" for i in range(ENTRIES)])
    Signer.generate(ORIGIN).save(folder / "key.pem")
    argv = ["ledger", "index", str(folder / "l.db"), "--system", SPEC, "--key", str(folder / "key.pem")]
    assert main([*argv, "--origin", ORIGIN]) == 0  # written beside the ledger: l.db.ivf
    return vecs[ENTRIES:]


def test_the_service_answers_from_the_saved_index_and_refuses_a_damaged_one(tmp_path):
    pytest.importorskip("fastapi")
    requests = pytest.importorskip("requests")
    from service_helpers import TOKEN, running

    from ocrr.service.app import create_app

    faiss.omp_set_num_threads(1)
    queries = _built(tmp_path)
    signer = Signer.load(tmp_path / "key.pem", ORIGIN)
    with open_substrate(tmp_path / "l.db", SPEC, signer=signer) as trained:  # the index trained at open
        want = trained.predict(queries)
    options = dict(ledger=tmp_path / "l.db", token=TOKEN, system=SPEC, key=tmp_path / "key.pem", origin=ORIGIN)
    config = ServiceConfig(**options, index_file=tmp_path / "l.db.ivf")
    state = build_state(config, log=lambda m: None)
    with running(create_app(state)) as url:
        got = requests.post(f"{url}/predict", json={"vectors": queries.tolist()}, timeout=60)
        assert got.status_code == 200, got.text
        assert [p["label"] for p in got.json()["predictions"]] == want
    state.close()

    data = bytearray((tmp_path / "l.db.ivf").read_bytes())
    data[len(data) // 2] ^= 0x10
    (tmp_path / "l.db.ivf").write_bytes(bytes(data))
    with pytest.raises(OcrrError, match="l.db.ivf is refused: l.db.ivf is not the file its statement signs"):
        build_state(config, log=lambda m: None, predicts=False)  # the supervisor of --workers N
    with pytest.raises(OcrrError, match="--index-file is trusted through the signature .* give --key"):
        ServiceConfig(**{**options, "key": None}, index_file=tmp_path / "l.db.ivf")
