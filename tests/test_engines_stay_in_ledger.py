"""No code outside ``ocrr.ledger`` names a storage engine: the service and the substrate use the
``LedgerStore`` protocol and its capabilities, and ``ocrr.ledger.location`` opens either engine."""

from __future__ import annotations

import re
from pathlib import Path

import ocrr

SRC = Path(ocrr.__file__).parent
# The table of old module paths names where each went (ocrr.audit.store is an engine's module now):
# a name in a table, not a use of the engine.
OLD_PATHS = Path("utils/moved.py")
ENGINE_NAMES = re.compile(r"PostgresLedger|DurableLedger|ledger\.postgres|ledger\.sqlite|postgres_follow")


def engine_mentions(root: Path) -> list[str]:
    """``path:line: text`` of every line outside ``root/ledger`` that names an engine."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "ledger" or path.relative_to(root) == OLD_PATHS:
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ENGINE_NAMES.search(line):
                found.append(f"{path.relative_to(root.parent)}:{lineno}: {line.strip()}")
    return found


def test_no_engine_is_named_outside_the_ledger_package():
    found = engine_mentions(SRC)
    assert not found, "engines named outside ocrr.ledger (use LedgerStore / ocrr.ledger.location):\n" + "\n".join(found)


def test_the_check_finds_an_engine_named(tmp_path):
    package = tmp_path / "ocrr"
    (package / "ledger").mkdir(parents=True)
    (package / "ledger" / "x.py").write_text("from ocrr.ledger.sqlite.store import DurableLedger\n")
    (package / "service.py").write_text("ok = 1\nif isinstance(led, PostgresLedger):\n")
    assert engine_mentions(package) == ["ocrr/service.py:2: if isinstance(led, PostgresLedger):"]
