# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""The PostgreSQL ledger store against a real server: same bytes as the file store, checked
reopening, tamper detection, append-only in the database, export/import across stores."""

from __future__ import annotations

import base64

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer
from ocrr.ledger.location import export_jsonl, import_jsonl, open_store, scan_location
from ocrr.ledger.postgres.schema import roles_sql
from ocrr.ledger.postgres.store import PostgresLedger
from ocrr.ledger.postgres.transfer import import_into_database
from ocrr.ledger.postgres.url import redact
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.verify import verify_consistency, verify_inclusion

DIM = 8


def _entries(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # unit rows: what import takes
    labels = [f"label-{i % 5}" for i in range(n)]
    texts = [None if i % 3 == 0 else f"text {i} é" for i in range(n)]
    return vecs, labels, texts


def _superuser(url: str):
    return psycopg.connect(url, autocommit=True)


def test_same_bytes_as_the_file_store(pg_url, tmp_path):
    vecs, labels, texts = _entries(37)
    with PostgresLedger.open(pg_url) as pg, DurableLedger.open(tmp_path / "l.db") as file:
        for lo, hi in ((0, 1), (1, 10), (10, 37)):  # several group commits
            assert pg.extend(vecs[lo:hi], labels[lo:hi], texts[lo:hi]) == file.extend(
                vecs[lo:hi], labels[lo:hi], texts[lo:hi]
            )
        assert pg.head() == file.head()
        assert [pg.entry_hash(i) for i in range(37)] == [file.entry_hash(i) for i in range(37)]
        for size in (1, 5, 16, 37):
            assert pg.root(size) == file.root(size)
            assert pg.inclusion_proof(size - 1, size) == file.inclusion_proof(size - 1, size)
            assert pg.consistency_proof(size, 37) == file.consistency_proof(size, 37)
        size, root, _ = pg.head()
        verify_inclusion(20, size, pg.tree.node(0, 20), pg.inclusion_proof(20), root)
        verify_consistency(9, size, pg.consistency_proof(9), pg.root(9), root)
        assert list(pg.read_entries(3, 7)) == list(file.read_entries(3, 7))
    with PostgresLedger.open(pg_url) as again:  # reopened: checked and rebuilt from the database
        assert len(again) == 37 and again.root() == file.root()
        assert again.report.ok and again.report.size == 37


def test_export_import_across_stores_byte_for_byte(pg_url, pg_cluster, tmp_path):  # noqa: F811
    from tests.ledger.pg_cluster import drop_schema, new_schema

    vecs, labels, texts = _entries(50, seed=1)
    with DurableLedger.open(tmp_path / "a.db") as file:
        file.extend(vecs, labels, texts)
    export_jsonl(tmp_path / "a.db", tmp_path / "a.jsonl")
    with import_into_database(tmp_path / "a.jsonl", pg_url) as pg:  # file -> database
        assert len(pg) == 50
    export_jsonl(pg_url, tmp_path / "b.jsonl")
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    with import_jsonl(tmp_path / "b.jsonl", tmp_path / "c.db"):  # database -> file
        pass
    export_jsonl(tmp_path / "c.db", tmp_path / "c.jsonl")
    assert (tmp_path / "c.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    # A second database from the second export: the same log again, appendable.
    schema = new_schema(pg_cluster)
    try:
        other = pg_cluster.url(schema)
        with import_into_database(tmp_path / "b.jsonl", other, expect_size=50) as pg2:
            pg2.append(vecs[0], "more")
            assert len(pg2) == 51
        assert scan_location(other)[0].ok
    finally:
        drop_schema(pg_cluster, schema)


def test_import_refuses_a_forged_export_and_leaves_nothing(pg_url, tmp_path):
    vecs, labels, texts = _entries(10)
    with DurableLedger.open(tmp_path / "a.db") as file:
        file.extend(vecs, labels, texts)
    export_jsonl(tmp_path / "a.db", tmp_path / "a.jsonl")
    lines = (tmp_path / "a.jsonl").read_text().splitlines(keepends=True)
    forged = tmp_path / "forged.jsonl"
    forged.write_text("".join(lines[:5] + [lines[5].replace('"label-4"', '"label-0"')] + lines[6:]))
    with pytest.raises(OcrrError, match="entry 4 does not hash"):
        import_into_database(forged, pg_url)
    with _superuser(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('ocrr_entries')").fetchone()[0] is None  # rolled back, tables too
    with pytest.raises(OcrrError, match="expected"):
        import_into_database(tmp_path / "a.jsonl", pg_url, expect_size=11)
    with import_into_database(tmp_path / "a.jsonl", pg_url):
        pass
    with pytest.raises(OcrrError, match="already holds a ledger of 10 entries"):
        import_into_database(tmp_path / "a.jsonl", pg_url)


def _tamper(url: str, sql: str, params=()) -> None:
    """Edit the log as a superuser who switched the append-only triggers off."""
    with _superuser(url) as conn:
        conn.execute("SET session_replication_role = replica")  # triggers off for this session
        conn.execute(sql, params)


def test_a_row_edited_in_the_database_is_found_and_named(pg_url):
    vecs, labels, texts = _entries(30)
    with PostgresLedger.open(pg_url) as pg:
        pg.extend(vecs, labels, texts)
        _tamper(pg_url, "UPDATE ocrr_entries SET label = 'forged' WHERE seq = 17")
        assert pg.check_slice(0, 30) == (
            17,
            "entry 17: stored hash does not match its contents (label, text or vector changed)",
        )
        report = pg.verify("full")
        assert not report.ok and report.first_bad == 17
    report, _ = scan_location(pg_url)
    assert not report.ok and report.first_bad == 17
    with pytest.raises(OcrrError, match="damaged at entry 17"):
        PostgresLedger.open(pg_url)


@pytest.mark.parametrize(
    "sql, first_bad",
    [
        ("DELETE FROM ocrr_entries WHERE seq = 29", 29),  # the tail removed: the head still says 30
        ("UPDATE ocrr_entries SET vector = %s WHERE seq = 3", 3),
        ("UPDATE ocrr_entries SET seq = 100 WHERE seq = 12", 12),
    ],
)
def test_other_edits_are_named(pg_url, sql, first_bad):
    vecs, labels, texts = _entries(30)
    with PostgresLedger.open(pg_url) as pg:
        pg.extend(vecs, labels, texts)
    _tamper(pg_url, sql, (b"\x00" * 4 * DIM,) if "%s" in sql else ())
    report, _ = scan_location(pg_url)
    assert not report.ok and report.first_bad == first_bad, report


def test_a_rewritten_history_is_caught_by_its_checkpoint(pg_url, tmp_path):
    """Entries and head recomputed consistently (a forger with the code): the checkpoint the
    full check recorded no longer matches."""
    vecs, labels, texts = _entries(12)
    signer = Signer.generate("example.com/pg-test")  # only a signed checkpoint record vouches for a history
    with PostgresLedger.open(pg_url, signer=signer) as pg:
        pg.extend(vecs, labels, texts)
        pg.verify("full")  # records a signed checkpoint at 12
    with DurableLedger.open(tmp_path / "forged.db") as forged:  # the same log but entry 5's label
        forged.extend(vecs, [*labels[:5], "forged", *labels[6:]], texts)
        rows = list(forged.read_entries())
        leaves = [forged.tree.node(0, i) for i in range(12)]
        root, head = forged.root(), forged.chain_head
    with _superuser(pg_url) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM ocrr_entries")
        for row, leaf in zip(rows, leaves):
            conn.execute("INSERT INTO ocrr_entries VALUES (%s, %s, %s, %s, %s, %s, %s)", (*row, leaf))
        conn.execute("UPDATE ocrr_head SET chain_head = %s, root = %s", (head, root))
    report, _ = scan_location(pg_url, "full", (signer.vkey,))
    assert not report.ok and report.first_bad == 11 and "checkpoint at size 12" in report.reason


def test_append_only_in_the_database(pg_url):
    vecs, labels, texts = _entries(5)
    with PostgresLedger.open(pg_url, signer=Signer.generate("example.com/pg-test")) as pg:
        pg.extend(vecs, labels, texts)
        pg.verify("full")  # a checkpoint row (recorded by a ledger with a signing key)
        pg.record_verification({"ok": True, "time": 1.0})
    with _superuser(pg_url) as conn:  # even the owner: the triggers refuse
        for sql in (
            "UPDATE ocrr_entries SET label = 'x' WHERE seq = 1",
            "DELETE FROM ocrr_entries WHERE seq = 4",
            "TRUNCATE ocrr_entries",
            "UPDATE ocrr_head SET size = 2",
            "DELETE FROM ocrr_head",
            "DELETE FROM ocrr_checkpoints",
            "UPDATE ocrr_verifications SET report = ''",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only|only grows"):
                conn.execute(sql)
    assert scan_location(pg_url)[0].ok


def test_the_service_role_may_append_and_read_only(pg_url):
    schema = pg_url.rsplit("%3D", 1)[1]
    role = f"svc_{schema}"
    with _superuser(pg_url) as conn:
        PostgresLedger.open(pg_url).close()  # the owner creates the tables
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"CREATE ROLE rd_{schema} LOGIN")
        conn.execute(roles_sql(schema, role, f"rd_{schema}"))
    service_url = pg_url.replace("postgres@", f"{role}@", 1)
    vecs, labels, texts = _entries(6)
    try:
        with PostgresLedger.open(service_url) as pg:
            pg.extend(vecs, labels, texts)
            pg.verify("full")
            pg.record_verification({"ok": True, "time": 1.0})
        with psycopg.connect(service_url, autocommit=True) as conn:
            for sql in ("UPDATE ocrr_entries SET label = 'x'", "DELETE FROM ocrr_entries", "TRUNCATE ocrr_entries"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                    conn.execute(sql)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # may not switch the triggers off
                conn.execute("SET session_replication_role = replica")
        reader_url = pg_url.replace("postgres@", f"rd_{schema}@", 1)
        assert scan_location(reader_url)[0].ok  # an auditor verifies with SELECT only
        with pytest.raises(OcrrError, match="permission denied"):
            PostgresLedger.open(reader_url).extend(vecs[:1], ["x"])
    finally:
        with _superuser(pg_url) as conn:
            conn.execute(f"DROP OWNED BY {role}, rd_{schema}")
            conn.execute(f"DROP ROLE {role}, rd_{schema}")


def test_a_record_with_an_id_from_outside_is_damage_not_a_blind_spot(pg_url):
    """A verification record inserted with an id above the sequence's would put every later
    record (numbered by the sequence) under each process's cursor: damage one service records
    would go unseen by the others. Read as damage instead, also by the service role, which
    has only USAGE on the sequence."""
    schema = pg_url.rsplit("%3D", 1)[1]
    role = f"svc_{schema}"
    with _superuser(pg_url) as conn:
        PostgresLedger.open(pg_url).close()
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"CREATE ROLE rd_{schema} LOGIN")
        conn.execute(roles_sql(schema, role, f"rd_{schema}"))
    service_url = pg_url.replace("postgres@", f"{role}@", 1)
    try:
        with PostgresLedger.open(service_url) as pg:
            pg.extend(*_entries(3))
            pg.record_verification({"ok": True, "reason": "ok", "time": 1.0})
            seen = pg.damage_since(-1)
            assert seen is not None and seen[1] is None  # the ledger's own records pass
            with psycopg.connect(service_url, autocommit=True) as conn:  # the service role may insert
                conn.execute(
                    "INSERT INTO ocrr_verifications (id, time, report) VALUES (%s, 0, %s)",
                    (2**62, '{"ok": true, "reason": "forged"}'),
                )
            found = pg.damage_since(seen[0])
            assert found is not None and found[1] is not None
            assert f"holds id {2**62}, which its sequence never gave" in found[1]["reason"]
    finally:
        with _superuser(pg_url) as conn:
            conn.execute(f"DROP OWNED BY {role}, rd_{schema}")
            conn.execute(f"DROP ROLE {role}, rd_{schema}")


def test_two_stores_in_one_process_see_each_others_appends(pg_url):
    vecs, labels, texts = _entries(20)
    with PostgresLedger.open(pg_url) as a, open_store(pg_url) as b:
        a.extend(vecs[:10], labels[:10], texts[:10])
        assert len(b) == 0 and b.refresh() == 10 and b.root() == a.root()
        b.extend(vecs[10:], labels[10:], texts[10:])  # b's commit takes a's entries in first
        assert a.refresh() == 10 and a.head() == b.head()
        assert a.memory is not None and [e.label for e in a.memory] == labels


def test_only_a_small_group_waits_for_others_to_join(pg_url, monkeypatch):
    """A group of a few rows waits ``gather`` seconds for concurrent appends; a batched one
    (GATHER_BELOW rows or more) already shares its WAL flush and is written at once."""
    import ocrr.ledger.postgres.store as store

    waits = []
    real_sleep = store.time.sleep
    monkeypatch.setattr(store.time, "sleep", lambda s: waits.append(s) or real_sleep(s))
    vecs, labels, texts = _entries(store.GATHER_BELOW + 1)
    with PostgresLedger.open(pg_url, gather=0.01) as led:
        led.extend(vecs[:1], labels[:1], texts[:1])
        assert waits == [0.01]
        assert led.extend(vecs[1:], labels[1:], texts[1:]) == range(1, store.GATHER_BELOW + 1)
        assert waits == [0.01]  # the batch did not wait
        assert len(led) == store.GATHER_BELOW + 1 and led.report.ok


def test_a_group_the_database_refuses_writes_nothing_and_the_next_one_goes_in(pg_url, caplog):
    """A commit is pipelined (BEGIN with the head's lock, the insert with COMMIT): a statement
    the server refuses there fails the group, writes nothing, and leaves the connection ready."""
    vecs, labels, texts = _entries(6)
    with PostgresLedger.open(pg_url, dim=DIM) as pg:  # the commits' kept connection: the next one reuses it
        pg.extend(vecs[:2], labels[:2], texts[:2])
        with _superuser(pg_url) as conn:  # a rule of the database's own that the insert breaks
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.label = 'refused' "
                "THEN RAISE EXCEPTION 'refused by the server'; END IF; RETURN NEW; END $$; "
                "CREATE TRIGGER refuse BEFORE INSERT ON ocrr_entries FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
        with pytest.raises(OcrrError, match="an append failed.*refused by the server"):
            pg.extend(vecs[2:4], ["fine", "refused"], texts[2:4])
        assert len(pg) == 2
        assert pg.extend(vecs[4:], labels[4:], texts[4:]) == range(2, 4)
        assert pg.verify() and pg.verify().size == 4
        assert [e.label for e in pg.memory or []] == labels[:2] + labels[4:]
    assert not [r for r in caplog.records if "rolling back" in r.getMessage()]  # ended by us, not the pool


def test_an_append_after_the_server_restarts_goes_in(pg_url, pg_cluster):
    """The commits keep their connection (no check's round trip per commit); one the server
    dropped fails the first round trip, which wrote nothing, and the commit runs again on a
    fresh connection, as the pool's check would have had it."""
    if not pg_cluster.local:
        pytest.skip("restarts the database server: needs the tests' own cluster")
    vecs, labels, texts = _entries(4)
    with PostgresLedger.open(pg_url, dim=DIM) as pg:
        assert pg.extend(vecs[:2], labels[:2], texts[:2]) == range(0, 2)
        kept = pg._kept
        pg_cluster.kill9()
        pg_cluster.start()
        assert pg.extend(vecs[2:], labels[2:], texts[2:]) == range(2, 4)
        assert pg._kept is not kept and pg.verify() and pg.verify().size == 4


def test_bad_urls_and_input_are_one_clear_error(pg_cluster):  # noqa: F811
    with pytest.raises(
        OcrrError, match="cannot connect to the ledger database postgresql://postgres:\\*\\*\\*@127.0.0.1:1/x"
    ):
        PostgresLedger.open("postgresql://postgres:secret@127.0.0.1:1/x")
    assert redact("postgresql://u:pw@h:5/db?x=1") == "postgresql://u:***@h:5/db?x=1"
    missing = pg_cluster.url("no_such_schema")
    with pytest.raises(OcrrError, match="names no existing schema"):
        PostgresLedger.open(missing)


def test_dimension_and_values_checked_before_writing(pg_url):
    with PostgresLedger.open(pg_url, dim=DIM) as pg:
        with pytest.raises(OcrrError, match="dimension 3"):
            pg.extend(np.zeros((1, 3), np.float32), ["a"])
        with pytest.raises(OcrrError, match="NaN"):
            pg.append(np.full(DIM, np.nan), "a")
        assert len(pg) == 0
    with pytest.raises(OcrrError, match="dimension 8, not 4"):
        PostgresLedger.open(pg_url, dim=4)


def test_checkpoint_open_trusts_what_a_full_check_vouched_for(pg_url):
    vecs, labels, texts = _entries(40)
    signer = Signer.generate("example.com/pg-test")  # only signed checkpoint records are trusted
    with PostgresLedger.open(pg_url, signer=signer) as pg:
        pg.extend(vecs[:30], labels[:30], texts[:30])
        pg.verify("full")
        pg.extend(vecs[30:], labels[30:], texts[30:])
    with PostgresLedger.open(pg_url, verify="checkpoint", signer=signer) as quick:
        assert quick.report.checked_from == 30 and quick.root() == pg.root()
    report, scan = scan_location(pg_url, "checkpoint", (signer.vkey,))
    assert report.ok and base64.b64decode(report.root) == pg.root()


def test_a_pg_dump_backup_restores_and_verifies(pg_url, pg_cluster):
    from tests.ledger.pg_cluster import PG_BIN

    if not pg_cluster.local or not (PG_BIN / "pg_dump").exists():
        pytest.skip("needs the tests' own cluster and its pg_dump/pg_restore")
    import subprocess

    schema = pg_url.rsplit("%3D", 1)[1]
    vecs, labels, texts = _entries(25)
    with PostgresLedger.open(pg_url) as pg:
        pg.extend(vecs, labels, texts)
        pg.verify("full")
        root = pg.root()
    where = ["-h", "127.0.0.1", "-p", str(pg_cluster.port), "-U", "postgres"]
    dump = pg_cluster.folder / f"{schema}.dump"
    subprocess.run([str(PG_BIN / "pg_dump"), *where, "-n", schema, "-Fc", "-f", str(dump), "postgres"], check=True)
    with _superuser(pg_url) as conn:
        conn.execute(f"CREATE DATABASE r_{schema}")
    try:
        subprocess.run(
            [str(PG_BIN / "pg_restore"), *where, "-d", f"r_{schema}", "--exit-on-error", str(dump)], check=True
        )
        restored = pg_cluster.url(schema).replace("/postgres?", f"/r_{schema}?", 1)
        report, _ = scan_location(restored)
        assert report.ok and report.size == 25 and base64.b64decode(report.root) == root
        with PostgresLedger.open(restored) as again:  # the triggers came back too
            again.append(vecs[0], "after restore")
            with _superuser(restored) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM ocrr_entries")
    finally:
        with _superuser(pg_url) as conn:
            conn.execute(f"DROP DATABASE r_{schema} WITH (FORCE)")
        dump.unlink(missing_ok=True)
