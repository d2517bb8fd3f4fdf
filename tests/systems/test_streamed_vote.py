"""The exact vote streamed from a ledger file's checked rows, a block at a time
(``ocrr.systems.substrate.streamed_vote``), answers as the opened substrate's exact search
and vote do: the same label and neighbours for every query, ties included, and the same
similarities: exactly where every dot product is exact in float32, else within the rounding
of a float32 dot product (BLAS kernels of other shapes sum in another order)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.location import CheckedRows, scan_location
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.registry import make_system
from ocrr.systems.substrate.persistent import open_substrate
from ocrr.systems.substrate.streamed_vote import exact_vote

DIM = 16


def _tied(rng, n: int) -> np.ndarray:
    """Unit vectors of +-1/4 components: every dot product is a multiple of 1/16, exact in
    float32 whatever the order of summation, and many are equal (ties on every query)."""
    return (rng.choice([-0.25, 0.25], size=(n, DIM))).astype(np.float32)


def _generic(rng, n: int, classes: int = 30) -> np.ndarray:
    centres = rng.normal(size=(classes, DIM))
    v = centres[rng.integers(classes, size=n)] + 0.5 * rng.normal(size=(n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module", params=["tied", "generic"])
def ledger(request, tmp_path_factory):
    rng = np.random.default_rng(3)
    n = 12_000
    make = _tied if request.param == "tied" else _generic
    vecs = make(rng, n)
    labels = [f"c{c}" for c in rng.integers(40, size=n)]
    path = tmp_path_factory.mktemp(request.param) / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        for lo in range(0, n, 5_000):
            led.extend(vecs[lo : lo + 5_000], labels[lo : lo + 5_000], [None] * len(labels[lo : lo + 5_000]))
    return path, make(np.random.default_rng(9), 500)


def _checked(path):
    report, scan = scan_location(path, rows=False)
    assert report and scan is not None
    return scan.hashes, scan.dim


@pytest.mark.parametrize("spec", ["substrate", "substrate:k=7", "substrate:k=3:weighting=sumsim"])
@pytest.mark.parametrize("block", [1_000, 16_384])
def test_the_streamed_vote_is_the_substrates(ledger, spec, block):
    path, queries = ledger
    with open_substrate(path, spec, verify="full") as sub:
        want = sub.explain(queries)
    checked, dim = _checked(path)
    with CheckedRows(path, checked, dim) as stored:
        got = exact_vote(stored, queries, make_system(spec), block=block)
    assert got.labels == [e.label for e in want]
    assert got.ids.tolist() == [[n.id for n in e.neighbours] for e in want]
    sims = [[n.similarity for n in e.neighbours] for e in want]
    assert got.neighbour_labels == [[n.label for n in e.neighbours] for e in want]
    if path.parent.name.startswith("tied"):  # the tie-breaks were tested: most queries have tied neighbours
        assert got.sims.tolist() == sims
        assert (np.diff(got.sims, axis=1) == 0).any(axis=1).mean() > 0.5
    else:
        # two orders of summing DIM products of unit vectors differ by at most DIM * eps (float32)
        bound = DIM * float(np.finfo(np.float32).eps)
        np.testing.assert_allclose(got.sims, np.asarray(sims, np.float32), rtol=0, atol=bound)


def test_a_row_edited_after_the_check_is_refused(ledger, tmp_path):
    path, queries = ledger
    copy = tmp_path / "l.db"
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    checked, dim = _checked(copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE entries SET label = 'edited' WHERE id = 11999")
    conn.close()
    with CheckedRows(copy, checked, dim) as stored, pytest.raises(OcrrError, match="entry 11999 differs"):
        exact_vote(stored, queries, make_system("substrate"))
