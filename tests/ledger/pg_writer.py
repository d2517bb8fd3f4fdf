"""A writer process for the PostgreSQL ledger tests: appends to the ledger at a URL and prints
``<id> <label>`` for every entry once its append is acknowledged (so what it printed is
what must survive a crash). ``count`` appends (0: until killed); a failed append (the
server down) is retried with new labels after a short pause, for at most ``GIVE_UP`` seconds
of failures in a row (then it exits, saying why, rather than leave a test waiting).

    python -m tests.ledger.pg_writer URL PREFIX COUNT
"""

from __future__ import annotations

import sys
import time
import zlib

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.postgres.store import PostgresLedger

DIM = 8
GIVE_UP = 60.0


def main(url: str, prefix: str, count: int) -> None:
    rng = np.random.default_rng(zlib.crc32(prefix.encode()))  # a different stream per writer
    ledger = PostgresLedger.open(url, dim=DIM, verify="checkpoint")
    done, k, failing_since = 0, 0, None
    while count == 0 or done < count:
        m = int(rng.integers(1, 4)) if count == 0 else min(int(rng.integers(1, 4)), count - done)
        labels = [f"{prefix}-{k + j}" for j in range(m)]
        k += m
        try:
            vecs = rng.standard_normal((m, DIM)).astype(np.float32)
            ids = ledger.extend(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), labels, [None] * m)
        except OcrrError as e:
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > GIVE_UP:
                sys.exit(f"pg_writer: appends failed for {GIVE_UP:g} s; the last: {e}")
            time.sleep(0.05)
            continue
        failing_since = None
        sys.stdout.write("".join(f"{i} {label}\n" for i, label in zip(ids, labels)))
        sys.stdout.flush()
        done += m
    ledger.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
