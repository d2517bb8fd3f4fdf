# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""One set of row rules (finite, the ledger's dimension, unit norm within a tolerance) at
every persistent door: ``/correct`` (``checked_corrections``), ``open_substrate`` (rows
already stored), ``ocrr ledger import`` into a file and into PostgreSQL. Each refusal names
the offending row and the fix; the in-memory ``Chain`` keeps taking any finite row."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.chain import Chain
from ocrr.ledger.location import export_jsonl, import_jsonl
from ocrr.ledger.rows import UNIT_TOLERANCE, check_rows
from ocrr.ledger.sqlite.file import Ledger
from ocrr.systems.substrate.persistent import open_substrate

DIM = 8


def _unit(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _ledger_with(path, vecs: np.ndarray) -> None:
    """A ledger file holding ``vecs`` as written by a program that skips the row rules: the
    in-memory chain takes any finite row, and ``save`` writes it whole (a durable ledger's
    appends refuse such rows)."""
    chain = Ledger(DIM)
    chain.extend(vecs, [f"l{i % 2}" for i in range(len(vecs))], None)
    chain.save(path)


def _bad_rows() -> dict[str, np.ndarray]:
    huge, long = _unit(6), _unit(6)
    huge[4] = 3e38  # finite, but every similarity with it overflows float32
    long[4] *= 2
    return {"huge": huge, "not unit": long}


def test_float32_normalised_rows_pass_and_the_tolerance_is_stated():
    rows = np.random.default_rng(1).normal(size=(1000, 384)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)  # as an encoder does, in float32
    assert check_rows(rows, 384, str) is rows
    nearly = _unit(3)
    nearly[1] *= 1 + UNIT_TOLERANCE / 2
    check_rows(nearly, DIM, str)
    nearly[1] *= 1 + UNIT_TOLERANCE
    with pytest.raises(OcrrError, match="row 1 has norm"):
        check_rows(nearly, DIM, lambda i: f"row {i}")
    with pytest.raises(OcrrError, match="row 2 contains NaN or infinity"):
        check_rows(np.array([[1.0, 0], [0, 1], [np.inf, 0]]), 2, lambda i: f"row {i}")
    with pytest.raises(OcrrError, match="row 0 has dimension 2, the ledger holds 3"):
        check_rows(np.eye(2), 3, lambda i: f"row {i}")


@pytest.mark.parametrize("kind", ["huge", "not unit"])
def test_correct_refuses_the_row_and_names_it(tmp_path, kind):
    with open_substrate(tmp_path / "l.db", dim=DIM) as sub:
        with pytest.raises(OcrrError, match=r"correction vectors row 4 has norm .*Divide each row by its L2 norm"):
            sub.correct(_bad_rows()[kind], ["a"] * 6)
        assert len(sub) == 0


@pytest.mark.parametrize("kind", ["huge", "not unit"])
def test_open_substrate_refuses_stored_rows_that_break_the_rules(tmp_path, kind):
    _ledger_with(tmp_path / "l.db", _bad_rows()[kind])
    with pytest.raises(OcrrError, match=r"l\.db: entry 4 has norm .*Restore it from a backup"):
        open_substrate(tmp_path / "l.db")
    _ledger_with(tmp_path / "good.db", _unit(6))
    with open_substrate(tmp_path / "good.db") as sub:
        assert sub.predict(_unit(1, seed=2)) != [None]


@pytest.mark.parametrize("kind", ["huge", "not unit"])
def test_import_refuses_the_row_naming_line_and_entry(tmp_path, capsys, kind):
    _ledger_with(tmp_path / "src.db", _bad_rows()[kind])
    export_jsonl(tmp_path / "src.db", tmp_path / "bad.jsonl")
    with pytest.raises(OcrrError, match=r"bad\.jsonl:6 \(entry 4\) has norm .*import refused"):
        import_jsonl(tmp_path / "bad.jsonl", tmp_path / "out.db")
    assert not (tmp_path / "out.db").exists()
    assert main(["ledger", "import", str(tmp_path / "bad.jsonl"), str(tmp_path / "out.db")]) == 2
    assert "entry 4" in capsys.readouterr().err


def test_import_refuses_a_row_of_another_dimension_than_the_header(tmp_path):
    _ledger_with(tmp_path / "src.db", _unit(3))
    export_jsonl(tmp_path / "src.db", tmp_path / "a.jsonl")
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["dim"] = 4  # the entries hold 8 components each
    lines[0] = json.dumps(header)
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(OcrrError, match=r"b\.jsonl:2 \(entry 0\) has dimension 8, the ledger holds 4"):
        import_jsonl(tmp_path / "b.jsonl", tmp_path / "out.db")


@pytest.mark.parametrize("kind", ["huge", "not unit"])
def test_postgres_import_refuses_the_row(pg_url, tmp_path, kind):
    from ocrr.ledger.postgres.transfer import import_into_database

    _ledger_with(tmp_path / "src.db", _bad_rows()[kind])
    export_jsonl(tmp_path / "src.db", tmp_path / "bad.jsonl")
    with pytest.raises(OcrrError, match=r"bad\.jsonl:6 \(entry 4\) has norm .*import refused"):
        import_into_database(tmp_path / "bad.jsonl", pg_url)
    _ledger_with(tmp_path / "good.db", _unit(6))
    export_jsonl(tmp_path / "good.db", tmp_path / "good.jsonl")
    with import_into_database(tmp_path / "good.jsonl", pg_url) as pg:
        assert len(pg) == 6


def test_the_in_memory_chain_is_unchanged():
    """The experiment path (``ocrr run``) keeps taking any finite rows: its numbers must not move."""
    chain = Chain(DIM)
    chain.extend(_bad_rows()["not unit"], ["a"] * 6, [None] * 6)
    assert len(chain) == 6


def test_the_refused_row_is_the_one_named(tmp_path):
    """A row whose vector bytes were swapped for a non-unit one, the chain recomputed over it,
    is named by its entry id, not by its batch position."""
    rows = _unit(5000)
    rows[4321] *= 1.5
    _ledger_with(tmp_path / "src.db", rows)
    export_jsonl(tmp_path / "src.db", tmp_path / "bad.jsonl")
    with pytest.raises(OcrrError, match=r"bad\.jsonl:4323 \(entry 4321\)"):
        import_jsonl(tmp_path / "bad.jsonl", tmp_path / "out.db")
    line = json.loads((tmp_path / "bad.jsonl").read_text().splitlines()[4322])
    assert np.frombuffer(base64.b64decode(line["vector"]), "<f4").shape == (DIM,)


def _exact_verdicts(vecs: np.ndarray) -> np.ndarray:
    """Each row's verdict by the float64 rule itself (finite, norm within the tolerance)."""
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.sqrt(np.square(vecs, dtype=np.float64).sum(axis=1))
    return np.isfinite(vecs).all(axis=1) & (np.abs(norms - 1.0) <= UNIT_TOLERANCE)


@settings(max_examples=150, deadline=None)
@given(
    dim=st.sampled_from([1, 3, 8, 384, 4096]),
    rows=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    scales=st.lists(
        st.sampled_from([1.0, 1 - UNIT_TOLERANCE, 1 + UNIT_TOLERANCE]).flatmap(
            lambda edge: st.floats(edge - 2e-5, edge + 2e-5)
        )
        | st.sampled_from([np.nan, np.inf, 3e19, 0.0]),
        min_size=6,
        max_size=6,
    ),
)
def test_the_float32_shortcut_accepts_only_rows_the_float64_rule_accepts(dim, rows, seed, scales) -> None:
    """Rows scaled to just inside, on and just outside the tolerance's edges (and non-finite
    or overflowing ones): ``check_rows`` passes or names exactly the first row the float64
    rule refuses, whichever way it decides."""
    from ocrr.ledger.rows import _surely_unit

    v = np.random.default_rng(seed).normal(size=(rows, dim))
    v = (v / np.linalg.norm(v, axis=1, keepdims=True) * np.asarray(scales[:rows])[:, None]).astype(np.float32)
    verdicts = _exact_verdicts(v)
    if _surely_unit(v):
        assert verdicts.all()
    if verdicts.all():
        assert check_rows(v, dim, lambda i: f"row {i}") is v
    else:
        first = int(np.flatnonzero(~verdicts)[0])
        with pytest.raises(OcrrError, match=f"^row {first} "):
            check_rows(v, dim, lambda i: f"row {i}")


def test_the_float32_shortcut_takes_ordinary_rows() -> None:
    """Encoder-normalised rows are judged without the float64 pass (the shortcut is taken)."""
    from ocrr.ledger.rows import _surely_unit

    v = np.random.default_rng(1).normal(size=(4096, 384)).astype(np.float32)
    assert _surely_unit(v / np.linalg.norm(v, axis=1, keepdims=True))


@pytest.mark.parametrize(
    "edit, obeys",
    [(None, True), ("norm", False), ("nan", False), ("inf", False), ("zero", False), ("close", True)],
)
def test_rows_obey_says_whether_check_rows_takes_the_rows(edit, obeys):
    from ocrr.ledger.rows import check_rows, rows_obey

    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(50, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    if edit == "norm":
        vecs[17] *= 1.01
    elif edit == "nan":
        vecs[17, 2] = np.nan
    elif edit == "inf":
        vecs[17, 2] = np.inf
    elif edit == "zero":
        vecs[17] = 0
    elif edit == "close":
        vecs[17] *= 1.0005  # within UNIT_TOLERANCE
    assert rows_obey(vecs) is obeys
    if obeys:
        check_rows(vecs, None, str)
    else:
        with pytest.raises(OcrrError):
            check_rows(vecs, None, str)
