"""A throwaway PostgreSQL cluster for the tests, and one fresh schema per test.

``pg_cluster`` (session-scoped) runs ``initdb`` and ``pg_ctl`` from the Debian server
packages (``$OCRR_PG_BIN``, default /usr/lib/postgresql/15/bin) in a folder of its own on a
free port of 127.0.0.1, as user ``postgres`` when the tests run as root (initdb refuses
root), and removes it at the end. ``$OCRR_TEST_PG_DSN`` (a URL of a role that may create
schemas) uses that server instead; tests that kill the server then skip. Without either,
the tests skip with the fix. ``pg_url``: a URL whose search_path is a new, empty schema.

Use in a test module: ``from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pytest

PG_BIN = Path(os.environ.get("OCRR_PG_BIN", "/usr/lib/postgresql/15/bin"))
_FIX = (
    "install the PostgreSQL server (Debian: apt-get install postgresql-15; or set OCRR_PG_BIN to its bin folder) "
    "and pip install -e '.[postgres]', or set OCRR_TEST_PG_DSN to a server's URL"
)


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A PostgreSQL server the tests own (``local``) or one they were pointed at."""

    def __init__(self, dsn: str | None = None):
        self.local = dsn is None
        self.folder: Path | None = None
        if dsn is not None:
            self.dsn = dsn
            return
        self.folder = Path(tempfile.mkdtemp(prefix="ocrr-pg-"))
        os.chmod(self.folder, 0o755)  # the server's user must reach it (pytest's own temp root is 0700)
        self.data = self.folder / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(
            [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]
        )
        self.start()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str]) -> None:
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=on -c max_connections=200"
        self._run(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.folder / "log"), "-w", "start"]
        )

    def kill9(self) -> None:
        """SIGKILL the server and every backend of it (a crash: the next start recovers from the WAL)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True
        ).stdout.split()
        for p in [pid, *map(int, children)]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in [pid, *map(int, children)]):
            time.sleep(0.02)

    def stop(self) -> None:
        if not self.local or self.folder is None:
            return
        try:
            self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, schema: str) -> str:
        sep = "&" if "?" in self.dsn else "?"
        return f"{self.dsn}{sep}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture(scope="session")
def pg_cluster():
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip(f"psycopg is not installed: {_FIX}")
    dsn = os.environ.get("OCRR_TEST_PG_DSN")
    if dsn is None:
        if not (PG_BIN / "initdb").exists():
            pytest.skip(f"no PostgreSQL server binaries at {PG_BIN}: {_FIX}")
        if os.geteuid() == 0 and (shutil.which("runuser") is None or not _has_user("postgres")):
            pytest.skip("running as root needs runuser and a 'postgres' user to run initdb: " + _FIX)
    cluster = Cluster(dsn)
    yield cluster
    cluster.stop()


def new_schema(cluster: Cluster) -> str:
    import psycopg

    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return schema


def drop_schema(cluster: Cluster, schema: str) -> None:
    import psycopg

    try:
        with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    except psycopg.Error:
        pass


@pytest.fixture
def pg_url(pg_cluster):
    """A URL on a new, empty schema of the test cluster (dropped afterwards)."""
    schema = new_schema(pg_cluster)
    yield pg_cluster.url(schema)
    drop_schema(pg_cluster, schema)
