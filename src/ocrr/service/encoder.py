"""The service's text encoder, in a process of its own.

A transformer encoding one sentence runs hundreds of small torch ops, each releasing and
re-taking the GIL; inside the service process it would compete with every request for
that lock (a predict by text then waits many times its own CPU time under load:
docs/reference/measurements.md). In
its own process it uses another core and the service only waits on a pipe. One request
at a time goes to the model (a lock), which is also what a small box can afford.

Protocol on the child's stdin/stdout: once loaded, one JSON line (``{"ok": true, "n": 0,
"d": 0, "id": ..., "dim": ...}``: the encoder's id and the width of its vectors); then one
JSON line (a list of texts) in; one JSON line out (``{"ok": true, "n": n, "d": d}`` followed
by n x d little-endian float32, or ``{"ok": false, "error": "..."}``). The child is
``python -c CHILD SPEC NICE PARENT``: started with ``-m ocrr.service.encoder``, runpy would
warn at every start, because the package ``ocrr.service`` (its config) has imported this
module before runpy executes it.

The child dies with its parent (``orphans.die_with_parent``), at once, even when the parent
is SIGKILLed while the child is busy loading the model or encoding and would not read the
end of its input for seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np

from ocrr.encoders import make_encoder, parse_encoder_spec
from ocrr.errors import OcrrError
from ocrr.service.orphans import die_with_parent

# What the child runs: this module imported like any other, then its ``child`` entry point.
CHILD = "import sys; from ocrr.service.encoder import child; sys.exit(child(sys.argv[1:]))"


def check_nice(nice: int | str) -> int | str:
    """``nice`` when it is a niceness 0-19 or ``"idle"``; else the error naming the fix."""
    if nice != "idle" and (isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19):
        raise OcrrError(
            f"--encoder-nice {nice!r}: give a niceness 0-19, or 'idle' (run only on an otherwise free core)"
        )
    return nice


def check_encoder_spec(spec: str) -> str:
    """``spec`` when the encoder process could start it (a known encoder, its options valid, one
    that encodes texts); else the error naming the fix. Only parses: the model loads in that
    process, so a typo is refused before the ledger is opened, not after."""
    try:
        entry, _ = parse_encoder_spec(spec)
    except OcrrError as e:
        raise OcrrError(f"--encoder {spec}: {e}") from None
    if entry.dataset_level:
        raise OcrrError(
            f"--encoder {spec} reads vectors per dataset, not texts, and the service encodes each request's "
            "texts: give a text encoder (e.g. --encoder minilm), or none to take vectors only"
        )
    return spec


class EncoderProcess:
    """``encode(texts) -> (n, d) float32`` answered by a child process running ``spec``."""

    def __init__(self, spec: str, nice: int | str = 0):
        """``nice``: the child's niceness increment (0..19), or ``"idle"``: Linux's SCHED_IDLE
        class, which runs the model only on a core nothing else of normal priority wants (where
        there is no such class: niceness 19). Either lets the service's own threads (predicts by
        vector, commits) take a contended core first; see ``_lower_priority``. Make it on a
        thread that lives as long as the process (the child dies when that thread ends)."""
        check_nice(nice)
        self.id = spec
        self.encoder_id: str | None = None  # the encoder's own id (its embedding-cache key), from the child
        self.dim: int | None = None  # the width of its vectors, from the child's warm-up
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, spec, str(nice), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None  # both PIPE
        self._to_child, self._from_child = self._proc.stdin, self._proc.stdout
        header = self._header()  # waits for the model to load
        if not header.get("ok"):
            self.close()
            raise OcrrError(header.get("error", f"the encoder {spec!r} did not start"))
        self.encoder_id, self.dim = header.get("id"), header.get("dim")

    def _header(self) -> dict:
        line = self._from_child.readline()
        if not line:
            return {"ok": False, "error": f"the encoder process for {self.id!r} stopped; restart the service"}
        return json.loads(line)

    def encode(self, texts, progress=None) -> np.ndarray:
        with self._lock:
            try:
                self._to_child.write(json.dumps(list(texts)).encode() + b"\n")
                self._to_child.flush()
            except (BrokenPipeError, OSError):
                raise OcrrError(f"the encoder process for {self.id!r} stopped; restart the service") from None
            header = self._header()
            if not header.get("ok"):
                raise OcrrError(header["error"])
            n, d = header["n"], header["d"]
            raw = self._from_child.read(4 * n * d)
        return np.frombuffer(raw, "<f4").reshape(n, d).astype(np.float32)

    def close(self) -> None:
        if self._proc.stdin and not self._proc.stdin.closed:
            self._proc.stdin.close()  # the child's loop ends at end of input
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _reply(out, obj: dict, payload: bytes = b"") -> None:
    out.write(json.dumps(obj).encode() + b"\n" + payload)
    out.flush()


def _lower_priority(nice: int | str) -> None:
    """Make this process yield a core to the service's threads.

    Under the service benchmark's standard mix (benchmarks/bench_service.py), a predict by
    vector's p99 is lower with SCHED_IDLE than with niceness 10 (docs/reproductions/service.md,
    "What the defaults rest on"). A niced
    task still runs its share of each scheduling period, and a request thread woken on its
    core can wait for that; a SCHED_IDLE task is preempted at once by any other."""
    if nice == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # threads started later inherit it
            return
        except (AttributeError, OSError):  # not Linux, or a sandbox that forbids it: the next best
            nice = 19
    if nice and hasattr(os, "nice"):
        os.nice(int(nice))


def main(spec: str, nice: int | str = 0) -> int:
    """The child: load the encoder (one torch thread), then answer until stdin ends."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything a library prints must not corrupt the protocol
    _lower_priority(nice)
    try:
        encoder = make_encoder(spec)  # checks the spec before anything heavy loads
        import torch

        torch.set_num_threads(1)
        warm = encoder.encode(["warm up"])  # load the model now, not on the first request
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises OcrrError
        _reply(out, {"ok": False, "error": f"cannot load encoder {spec!r}: {e}"})
        return 1
    # (n, d: no vectors follow; dim: the vectors' width, which the service checks against its ledger's)
    _reply(out, {"ok": True, "n": 0, "d": 0, "id": encoder.id, "dim": int(np.shape(warm)[1])})
    for line in sys.stdin.buffer:
        try:
            vecs = np.ascontiguousarray(encoder.encode(json.loads(line)), "<f4")
        except Exception as e:  # noqa: BLE001
            _reply(out, {"ok": False, "error": f"encoding failed: {e}"})
            continue
        _reply(out, {"ok": True, "n": vecs.shape[0], "d": vecs.shape[1]}, vecs.tobytes())
    return 0


def child(argv: list[str]) -> int:
    """The child's command line (``SPEC [NICE [PARENT]]``, as ``EncoderProcess`` passes it) to
    ``main``, once bound to the life of its parent (the pid PARENT)."""
    if len(argv) > 2:
        # SIGKILL: the child holds nothing to save, and a busy one must not finish its work first.
        die_with_parent(int(argv[2]), signal.SIGKILL)
    level = argv[1] if len(argv) > 1 else "0"
    return main(argv[0], level if level == "idle" else int(level))
