"""The checkpoint crash test's helper process (started by test_wal_checkpoints.py).

Opens the ledger file ``argv[1]`` with background checkpoints every ``argv[2]`` bytes, appends
``argv[3]`` entries until its checkpointer has copied the log into the file once, then keeps
appending ``argv[3]`` at a time (checkpoints running beside the commits), printing each last
acknowledged id, until it is killed with SIGKILL.
"""

from __future__ import annotations

import sys

import numpy as np

from ocrr.ledger import DurableLedger

DIM = 16


def vec(i: int) -> np.ndarray:
    v = np.random.default_rng(i).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)  # a durable ledger takes unit rows only


def label(i: int) -> str:
    return f"label-{i % 7}"


def append(led: DurableLedger, count: int) -> int:
    n = len(led)
    ids = led.extend(np.stack([vec(i) for i in range(n, n + count)]), [label(i) for i in range(n, n + count)])
    return ids[-1]


def main() -> None:
    path, every, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    led = DurableLedger.open(path)
    led.wal.every = every
    last = append(led, count)
    if not led.wal.wait(1, timeout=60):
        raise SystemExit("no checkpoint ran")
    print(f"checkpointed {last}", flush=True)
    while True:  # killed somewhere in here: in a commit, a checkpoint, or both
        print(f"acked {append(led, count)}", flush=True)


if __name__ == "__main__":
    main()
