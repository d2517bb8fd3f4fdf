"""The crash tests' helper process (a clean interpreter, started by test_durable.py and test_file.py).

For every line read on stdin it forks a child that appends to a ledger file in a loop
(through ``DurableLedger``, or with ``open`` as third argument through ``Ledger.open``,
appending and then flushing), reporting each acknowledged append's last id on a pipe; kills the child with SIGKILL at
a random moment; and prints the highest acknowledged id (-1: none). Forking happens
here, in a single-threaded process, never inside pytest's own.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

import numpy as np

from ocrr.ledger import DurableLedger, Ledger

DIM = 4


def vec(i: int) -> np.ndarray:
    v = np.random.default_rng(i).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)  # a durable ledger takes unit rows only


def label(i: int) -> str:
    return f"label-{i % 7}"


def append_forever(path: str, ack_fd: int) -> None:
    led = DurableLedger.open(path)
    n = len(led)
    while True:
        m = 1 + n % 3  # single entries and small batches
        ids = led.extend(np.stack([vec(i) for i in range(n, n + m)]), [label(i) for i in range(n, n + m)])
        os.write(ack_fd, f"{ids[-1]}\n".encode())  # after the append returned: acknowledged
        n += m


def append_and_flush_forever(path: str, ack_fd: int) -> None:
    led = Ledger.open(path)
    n = len(led)
    while True:
        m = 1 + n % 3
        for i in range(n, n + m):
            led.append(vec(i), label(i))
        led.flush()
        os.write(ack_fd, f"{n + m - 1}\n".encode())  # after the flush returned: acknowledged
        n += m


def one_round(path: str, rng: np.random.Generator, writer=append_forever) -> int:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            writer(path, w)
        finally:
            os._exit(1)
    os.close(w)
    if rng.random() < 0.75:  # mostly while appending; otherwise maybe while opening and checking
        select.select([r], [], [], 10)
    time.sleep(float(rng.uniform(0.0, 0.05)))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    lines = data.split(b"\n")[:-1]  # a torn last line was never acknowledged
    return int(lines[-1]) if lines else -1


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    writer = append_and_flush_forever if sys.argv[3:] == ["open"] else append_forever
    rng = np.random.default_rng(seed)
    for _ in sys.stdin:
        print(one_round(path, rng, writer), flush=True)


if __name__ == "__main__":
    main()
