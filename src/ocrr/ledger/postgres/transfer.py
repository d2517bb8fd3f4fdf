"""Import a JSONL export (``ocrr.ledger.transfer``'s format) into a PostgreSQL ledger.

The target schema must hold no entries. The whole import, the creation of the tables
included, is one transaction under the head row's lock: every line is checked as it is read
(its hash, its link, the header's size, root and chain head, and what the caller expects:
``expect_size``/``expect_root`` or a signed checkpoint), and anything wrong rolls it all
back, so the database holds the complete, checked log or nothing of it (no tables either,
nor a dimension fixed by the refused export). Export needs nothing of its own:
``ocrr.ledger.location.export_lines`` reads either store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.group_commit import check_batch
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.postgres.schema import create_schema
from ocrr.ledger.postgres.store import PostgresLedger
from ocrr.ledger.postgres.url import connect, redact
from ocrr.ledger.proofs import b64
from ocrr.ledger.transfer import checked_header, checked_rows, expectations, parse_entry, parse_line, read_export
from ocrr.ledger.verify import entry_bytes, leaf_hash

__all__ = ["import_into_database"]

_CHUNK = 4096
_ROWS = (
    "INSERT INTO ocrr_entries (seq, label, text, vector, prev_hash, hash, leaf) SELECT * FROM "
    "unnest(%b::bigint[], %b::text[], %b::text[], %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[])"
)


def import_into_database(
    src,
    url: str,
    *,
    expect_size: int | None = None,
    expect_root: bytes | str | None = None,
    checkpoint: str | None = None,
    verifier_key: str | None = None,
) -> PostgresLedger:
    """Load the export ``src`` into the empty ledger at ``url``, checked hash for hash, in one
    transaction; return the ledger, open (trusted up to the checkpoint the import records)."""
    import psycopg

    src = Path(src).expanduser()
    want = expectations(expect_size, expect_root, checkpoint, verifier_key)
    with read_export(src, None) as lines:
        conn = connect(url)
        try:
            header = parse_line(next(lines, ""), src, 1)
            dim = checked_header(header, src, want)
            with conn.transaction():  # the tables too: a refused import leaves the schema as it found it
                create_schema(conn, dim)
                held = conn.execute("SELECT size, dim FROM ocrr_head FOR UPDATE").fetchone()
                if held[0] or conn.execute("SELECT EXISTS (SELECT 1 FROM ocrr_entries)").fetchone()[0]:
                    raise OcrrError(
                        f"{redact(url)} already holds a ledger of {held[0]} entries; import into an empty schema "
                        "(ledgers are append-only)"
                    )
                if held[1] is not None and dim is not None and held[1] != dim:
                    raise OcrrError(f"{redact(url)} is set up for dimension {held[1]}, the export holds {dim}")
                tree, prev, n = _load(conn, lines, src, dim)
                _check_result(src, header, want, n, tree, prev)
                if n:
                    conn.execute(
                        "UPDATE ocrr_head SET size = %s, chain_head = %s, root = %s, dim = coalesce(dim, %s)",
                        (n, prev, tree.root(), dim),
                    )
                    conn.execute(
                        "INSERT INTO ocrr_checkpoints VALUES (%s, %s, %s, extract(epoch from now()))",
                        (n, prev, tree.root()),
                    )
        except psycopg.Error as e:
            raise OcrrError(f"import into {redact(url)} failed ({str(e).strip()}); nothing was imported") from None
        finally:
            conn.close()
    return PostgresLedger.open(url, verify="checkpoint")


def _load(conn, lines: Iterator[str], src: Path, dim: int | None) -> tuple[MerkleTree, bytes, int]:
    """Insert every entry line, checked; return the tree, the chain head and the count."""
    tree, prev, n, lineno = MerkleTree(), GENESIS, 0, 1
    batch: list[tuple] = []
    for line in lines:
        lineno += 1
        batch.append(parse_entry(parse_line(line, src, lineno), n + len(batch), src, lineno))
        if len(batch) == _CHUNK:
            prev, n = _insert(conn, batch, tree, prev, n, src, dim)
    if batch:
        prev, n = _insert(conn, batch, tree, prev, n, src, dim)
    return tree, prev, n


def _insert(conn, batch: list, tree: MerkleTree, prev: bytes, n: int, src: Path, dim: int | None) -> tuple[bytes, int]:
    try:
        vecs = np.stack([b[0] for b in batch])
    except ValueError:
        raise OcrrError(f"{src}: entries {n}..{n + len(batch) - 1} have vectors of different sizes") from None
    labels, texts = [b[1] for b in batch], [b[2] for b in batch]
    vecs = check_batch(checked_rows(vecs, dim, src, n), labels, texts, dim)
    cols: list[list] = [[] for _ in range(7)]
    for j, (vec, label, text) in enumerate(zip(vecs, labels, texts)):
        raw = vec.astype("<f4").tobytes()
        pre = entry_bytes(n, label, text, raw, prev)
        digest = hashlib.sha256(pre).digest()
        if digest != batch[j][3]:
            raise OcrrError(
                f"{src}: entry {n} does not hash to the value its line records "
                "(label, text, vector or an earlier entry edited)"
            )
        leaf = leaf_hash(pre)
        for col, value in zip(cols, (n, label, text, raw, prev, digest, leaf)):
            col.append(value)
        prev, n = digest, n + 1
    tree.extend(cols[6])  # the leaves
    conn.execute(_ROWS, cols)
    batch.clear()
    return prev, n


def _check_result(src: Path, header: dict, want: list, n: int, tree: MerkleTree, prev: bytes) -> None:
    if n != header.get("size") or b64(tree.root()) != header.get("root") or b64(prev) != header.get("chain_head"):
        raise OcrrError(
            f"{src}: the imported entries do not give the size, root and chain head its header records "
            "(lines missing or edited); the export is not trustworthy"
        )
    for what, size, root in want:
        if size is not None and n != size:
            raise OcrrError(f"{src} holds {n} entries but {what} has {size}; import refused")
        if root is not None and tree.root() != root:
            raise OcrrError(
                f"{src}: the root of its {n} entries is {b64(tree.root())}, but {what} has {b64(root)}: "
                "the entries differ from the log you expected (forged or another log); import refused"
            )
