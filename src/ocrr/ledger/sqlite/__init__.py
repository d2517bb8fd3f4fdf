"""The SQLite engine: a ledger in one file (WAL, ``synchronous=FULL``), the embedded default.

``schema`` (the file's tables, the connection, converting old files), ``scan`` (reading a
file back and checking it), ``locks`` (one writer per file, whatever name it is reached
by), ``store`` (``DurableLedger``, the durable store: group commit, several processes),
``wal`` (its log copied into the file by a thread of its own, not inside a commit),
``file`` (``Ledger``, the in-memory chain with its file) and ``transfer`` (building a file
from a JSONL export).
"""
