"""An IVF index saved with ``ocrr ledger index`` and opened with ``open_substrate(...,
index_file=…)``: the same answers as the index trained at open, entries appended after the
save found, and every kind of tampering refused with the message naming the rebuild."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.substrate import persistent
from ocrr.systems.substrate.persistent import open_checked, open_substrate
from ocrr.systems.substrate.saved_index import SavedIndex, statement_path

faiss = pytest.importorskip("faiss")

ENTRIES, DIM, CLASSES = 24_000, 16, 40  # above the IVF's 20,000 entries before it trains
ORIGIN = "test.invalid/saved-index"
SPEC = "substrate:index=ivf_pq:nlist=64:nprobe=8:rerank=50"
REFUSED = "is refused: .* Rebuild it for this ledger with `ocrr ledger index"


def _rows(seed: int, n: int) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(CLASSES, DIM))
    classes = rng.integers(CLASSES, size=n)
    vecs = centres[classes] + 0.4 * rng.normal(size=(n, DIM))
    return (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32), [f"c{c}" for c in classes]


def _ledger(path, seed: int = 0, n: int = ENTRIES) -> None:
    vecs, labels = _rows(seed, n)
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(vecs, labels, [f"t{i}" for i in range(n)])


def _queries(n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(7)
    q = _rows(0, ENTRIES)[0][rng.integers(ENTRIES, size=n)] + 0.2 * rng.normal(size=(n, DIM))
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A ledger, its key and the index `ocrr ledger index` saved for it (copied per test)."""
    faiss.omp_set_num_threads(1)  # the same lists and answers at every build (ocrr.index.ivf)
    folder = tmp_path_factory.mktemp("built")
    _ledger(folder / "l.db")
    Signer.generate(ORIGIN).save(folder / "key.pem")
    argv = ["ledger", "index", str(folder / "l.db"), "--system", SPEC, "--key", str(folder / "key.pem")]
    assert main([*argv, "--origin", ORIGIN, "--out", str(folder / "l.ivf")]) == 0
    return folder


@pytest.fixture()
def here(built, tmp_path):
    for file in built.iterdir():
        shutil.copy(file, tmp_path / file.name)
    return tmp_path


def _signer(folder, name: str = "key.pem") -> Signer:
    return Signer.load(folder / name, ORIGIN)


def _open(folder, spec: str = SPEC, **options):
    options.setdefault("signer", _signer(folder))
    return open_substrate(folder / "l.db", spec, verify="full", **options)


def _answers(sub, queries):
    found = sub.explain(queries)
    return [(e.label, [(n.id, n.similarity) for n in e.neighbours]) for e in found]


def test_the_saved_index_answers_as_the_one_trained_at_open(here):
    faiss.omp_set_num_threads(1)  # k-means and the lists as at the build
    queries = _queries()
    with _open(here) as trained:
        want = _answers(trained, queries)
    with _open(here, index_file=here / "l.ivf") as saved:
        assert saved.system.index_.trained_on == ENTRIES and len(saved.system.index_) == ENTRIES
        assert _answers(saved, queries) == want


def test_its_search_knobs_are_the_served_ones_and_its_structure_the_built_one(here):
    with _open(here, "substrate:index=ivf_pq:nlist=64:nprobe=3:rerank=20", index_file=here / "l.ivf") as sub:
        assert (sub.system.index_.nprobe, sub.system.index_.rerank) == (3, 20)
    for other in ("substrate:index=ivf_pq:nlist=32", "substrate:index=ivf_sq8:nlist=64", "substrate"):
        with pytest.raises(OcrrError, match="index file .*(other index options|holds an IVF index)"):
            _open(here, other, index_file=here / "l.ivf")


def test_entries_appended_after_the_save_are_found(here):
    fresh = np.zeros((3, DIM), np.float32)
    fresh[np.arange(3), np.arange(3)] = 1.0  # far from the classes' directions
    with _open(here, index_file=here / "l.ivf") as sub:
        assert list(sub.correct(fresh[:2], ["new0", "new1"], ["a", "b"])) == [ENTRIES, ENTRIES + 1]
        assert sub.predict(fresh[:2]) == ["new0", "new1"]
    with _open(here, index_file=here / "l.ivf") as sub:  # reopened: N.. added at open
        assert len(sub.system.index_) == ENTRIES + 2
        found = sub.explain(fresh[:2])
        assert [e.neighbours[0].id for e in found] == [ENTRIES, ENTRIES + 1]
        assert [e.label for e in found] == ["new0", "new1"]


def _flip(path, at: int = -100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_statement(folder, old: str, new: str) -> None:
    note = statement_path(folder / "l.ivf")
    note.write_text(note.read_text().replace(old, new, 1))


TAMPERS = {
    "a byte of the FAISS file": lambda f: _flip(f / "l.ivf"),
    "a byte of its .npz": lambda f: _flip(f / "l.ivf.npz"),
    "the FAISS file grown": lambda f: (f / "l.ivf").write_bytes((f / "l.ivf").read_bytes() + b"\0"),
    "the .npz cut short": lambda f: (f / "l.ivf.npz").write_bytes((f / "l.ivf.npz").read_bytes()[:-1]),
    "the statement's size": lambda f: _edit_statement(f, f"size {ENTRIES}", f"size {ENTRIES - 1}"),
    "the statement's settings": lambda f: _edit_statement(f, '"nlist":64', '"nlist":32'),
    "the statement gone": lambda f: statement_path(f / "l.ivf").unlink(),
    "the FAISS file gone": lambda f: (f / "l.ivf").unlink(),
}


@pytest.mark.parametrize("tamper", TAMPERS, ids=list(TAMPERS))
def test_a_tampered_index_is_refused(here, tamper):
    TAMPERS[tamper](here)
    with pytest.raises(OcrrError, match=REFUSED):
        _open(here, index_file=here / "l.ivf")
    with _open(here) as sub:  # the refusal left the ledger closed and usable
        assert len(sub) == ENTRIES


@pytest.mark.parametrize("tamper", [t for t in TAMPERS if "statement" not in t])
def test_the_files_checked_a_chunk_at_a_time_are_refused_as_when_read_whole(here, tamper, monkeypatch):
    """The supervisor's check (``keep=False``: digests over chunks, nothing held) refuses the
    changed files with the message of the whole read, and passes the intact ones."""
    from ocrr.systems.substrate import saved_index

    monkeypatch.setattr(saved_index, "_DIGEST_CHUNK", 7)  # many chunks, one cut through the last
    signer = Signer.load(here / "key.pem", ORIGIN)
    vouched = SavedIndex.read(here / "l.ivf", signer, keep=False)
    assert vouched.statement == SavedIndex.read(here / "l.ivf", signer).statement and not vouched.faiss_bytes
    TAMPERS[tamper](here)
    with pytest.raises(OcrrError) as whole:
        SavedIndex.read(here / "l.ivf", signer)
    with pytest.raises(OcrrError, match=REFUSED) as chunked:
        SavedIndex.read(here / "l.ivf", signer, keep=False)
    assert str(chunked.value) == str(whole.value)


@pytest.mark.parametrize("tamper", TAMPERS, ids=list(TAMPERS))
def test_the_supervisors_check_refuses_what_an_open_refuses(here, tamper):
    """``open_checked(index_file=…)`` (the supervisor of ``ocrr serve --workers N``, which takes
    no index itself) refuses each tampered index with the message ``open_substrate`` gives."""
    TAMPERS[tamper](here)
    with pytest.raises(OcrrError, match=REFUSED) as opened:
        _open(here, index_file=here / "l.ivf")
    with pytest.raises(OcrrError, match=REFUSED) as checked:
        open_checked(here / "l.db", SPEC, signer=_signer(here), index_file=here / "l.ivf")
    assert str(checked.value) == str(opened.value)


@pytest.mark.parametrize(
    "wrong",
    ["another key", "another origin", "other settings", "the statement gone"],
)
def test_the_supervisor_refuses_a_statement_before_reading_the_ledger(here, monkeypatch, wrong):
    """What the statement alone decides (its signature, its origin, its settings) is refused
    before the ledger is opened: at ten million entries that open takes minutes."""
    signer, spec = _signer(here), SPEC
    if wrong == "another key":
        Signer.generate(ORIGIN).save(here / "other.pem")
        signer = _signer(here, "other.pem")
    elif wrong == "another origin":
        signer = Signer.load(here / "key.pem", "test.invalid/another-log")
    elif wrong == "other settings":
        spec = SPEC.replace("nlist=64", "nlist=32")
    else:
        statement_path(here / "l.ivf").unlink()

    def opened(*args, **kwargs):
        raise AssertionError("the ledger was opened before the index statement was refused")

    monkeypatch.setattr(persistent, "open_store", opened)
    with pytest.raises(OcrrError, match=REFUSED):
        open_checked(here / "l.db", spec, signer=signer, index_file=here / "l.ivf")


def test_the_supervisors_check_passes_an_intact_index(here):
    with open_checked(here / "l.db", SPEC, signer=_signer(here), index_file=here / "l.ivf") as sub:
        assert len(sub) == ENTRIES


def test_an_index_signed_by_another_key_is_refused(here):
    Signer.generate(ORIGIN).save(here / "other.pem")
    with pytest.raises(OcrrError, match=REFUSED + ".*"):
        _open(here, index_file=here / "l.ivf", signer=_signer(here, "other.pem"))
    with pytest.raises(OcrrError, match="give --key"):
        _open(here, index_file=here / "l.ivf", signer=None)


def test_the_index_of_another_ledger_is_refused(here):
    (here / "l.db").unlink()
    _ledger(here / "l.db", seed=1)  # the same size and settings, other entries
    with pytest.raises(OcrrError, match="Merkle root at size 24000 is not the one"):
        _open(here, index_file=here / "l.ivf")


def test_the_index_of_a_longer_ledger_is_refused(here):
    (here / "l.db").unlink()
    _ledger(here / "l.db", n=ENTRIES - 1000)  # the same entries, rewound
    with pytest.raises(OcrrError, match="it holds 24000 entries and the ledger 23000"):
        _open(here, index_file=here / "l.ivf")
    with _open(here) as sub:
        assert len(sub) == ENTRIES - 1000


def test_the_command_refuses_what_it_cannot_save(here, capsys):
    argv = ["ledger", "index", str(here / "l.db"), "--origin", ORIGIN, "--out", str(here / "x.ivf")]
    assert main([*argv, "--system", "substrate", "--key", str(here / "key.pem")]) != 0
    assert "holds an IVF index" in capsys.readouterr().err
    assert main([*argv, "--system", SPEC]) != 0
    assert "give --key" in capsys.readouterr().err
    small = here / "small.db"
    _ledger(small, n=500)
    argv[2] = str(small)
    assert main([*argv, "--system", SPEC, "--key", str(here / "key.pem")]) != 0
    assert "fewer than the 20000 an IVF index trains on" in capsys.readouterr().err


def test_the_statement_cannot_be_read_as_a_checkpoint(built):
    from ocrr.ledger.heads import verify_checkpoint

    note = statement_path(built / "l.ivf").read_text()
    with pytest.raises(OcrrError):
        verify_checkpoint(note, _signer(built).vkey)
    assert json.loads(note.split("\n")[4].partition(" ")[2])["index"] == "ivf_pq"


def test_the_block_build_writes_the_files_an_index_trained_at_open_saves(here, tmp_path):
    """`ocrr ledger index` reads the rows a block at a time and never opens a substrate; the
    files it wrote are byte for byte the ones the substrate's own index, trained at open, saves."""
    from ocrr.systems.substrate.saved_index import index_settings, write_saved_index

    faiss.omp_set_num_threads(1)
    with _open(here) as trained:
        index = trained.system.index_
        root = trained.ledger.root(ENTRIES)
        settings = index_settings(trained.system, DIM)
        write_saved_index(index, tmp_path / "open.ivf", settings, ENTRIES, root, _signer(here))
    for name in ("", ".npz"):
        assert (here / f"l.ivf{name}").read_bytes() == (tmp_path / f"open.ivf{name}").read_bytes()
    assert json.loads((here / "l.ivf.statement").read_text().split("\n")[4].partition(" ")[2]) == settings


def test_the_block_build_takes_the_training_rows_an_open_reads_and_fills_block_by_block(here):
    from ocrr.ledger.location import scan_location
    from ocrr.systems.registry import make_system
    from ocrr.systems.substrate.index_build import build_index_in_blocks, training_rows

    faiss.omp_set_num_threads(1)
    report, scan = scan_location(here / "l.db", rows=False)
    checked = scan.hashes
    index = build_index_in_blocks(here / "l.db", make_system(SPEC), DIM, checked, block=16_384)
    kmeans_rows, code_rows = training_rows(index, ENTRIES)
    assert len(kmeans_rows) == 2_182 and len(code_rows) == ENTRIES  # every 24000 // (64 lists x 32)-th; all
    assert index.trained_on == ENTRIES and len(index) == ENTRIES
    with _open(here, index_file=here / "l.ivf") as saved:
        lists = saved.system.index_.list_sizes()
    assert np.array_equal(index.list_sizes(), lists)


def test_a_row_changed_after_the_check_is_refused_naming_it(here):
    import sqlite3

    from ocrr.ledger.location import scan_location
    from ocrr.systems.registry import make_system
    from ocrr.systems.substrate.index_build import build_index_in_blocks

    report, scan = scan_location(here / "l.db", rows=False)
    checked = scan.hashes
    with sqlite3.connect(here / "l.db") as conn:  # storage is untrusted: a row edited after the check
        (vector,) = conn.execute("SELECT vector FROM entries WHERE id = 20001").fetchone()
        conn.execute("UPDATE entries SET vector = ? WHERE id = 20001", (vector[::-1],))
    conn.close()
    with pytest.raises(OcrrError, match="changed since it was checked: entry 20001 .*ocrr ledger verify"):
        build_index_in_blocks(here / "l.db", make_system(SPEC), DIM, checked)


def test_the_command_refuses_a_damaged_ledger_naming_the_entry(here, capsys):
    import sqlite3

    with sqlite3.connect(here / "l.db") as conn:
        conn.execute("UPDATE entries SET label = 'edited' WHERE id = 5")
    conn.close()
    argv = ["ledger", "index", str(here / "l.db"), "--system", SPEC, "--key", str(here / "key.pem")]
    assert main([*argv, "--origin", ORIGIN, "--out", str(here / "x.ivf")]) != 0
    assert "is damaged at entry 5" in capsys.readouterr().err
    assert not (here / "x.ivf").exists()


def test_an_index_that_tunes_itself_is_built_in_an_opened_substrate(here):
    """Tuning searches every row exactly, so such an index is trained the way the service
    trains it, in a substrate holding the rows; the saved file is still opened, not trained."""
    from ocrr.systems.registry import make_system
    from ocrr.systems.substrate.index_build import builds_in_blocks

    faiss.omp_set_num_threads(1)
    tuned = "substrate:index=ivf_pq:nlist=64:target_recall=0.5"
    assert builds_in_blocks(here / "l.db", make_system(SPEC))
    assert not builds_in_blocks(here / "l.db", make_system(tuned))
    assert not builds_in_blocks("postgresql://localhost/ledger", make_system(SPEC))
    argv = ["ledger", "index", str(here / "l.db"), "--system", tuned, "--key", str(here / "key.pem")]
    assert main([*argv, "--origin", ORIGIN, "--out", str(here / "t.ivf")]) == 0
    with _open(here, tuned, index_file=here / "t.ivf") as sub:
        assert sub.system.index_.tuning is None and sub.system.index_.tuned_at == ENTRIES


def test_the_command_refuses_an_empty_or_missing_ledger(here, capsys):
    with DurableLedger.open(here / "empty.db", dim=DIM):
        pass
    for ledger, why in (("empty.db", "the ledger is empty"), ("missing.db", "does not exist")):
        argv = ["ledger", "index", str(here / ledger), "--system", SPEC, "--key", str(here / "key.pem")]
        assert main([*argv, "--origin", ORIGIN, "--out", str(here / "x.ivf")]) != 0
        assert why in capsys.readouterr().err
    assert not (here / "x.ivf").exists()
