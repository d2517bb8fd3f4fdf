"""The service's encoder process starts without runpy's RuntimeWarning (it used to be
``python -m ocrr.service.encoder``, a module its own package had already imported)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_starting_the_encoder_process_prints_no_warning():
    # In a process of its own, so the encoder child's stderr (inherited) can be read. An
    # unknown encoder fails fast inside the child, after the child's start-up has run.
    script = textwrap.dedent(
        """
        from ocrr.errors import OcrrError
        from ocrr.service.encoder import EncoderProcess

        try:
            EncoderProcess("nonsense")
        except OcrrError as e:
            print(e)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "unknown encoder 'nonsense'" in done.stdout  # the child ran and answered
    assert "RuntimeWarning" not in done.stderr, done.stderr
