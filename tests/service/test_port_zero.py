"""`ocrr serve --port 0` (one process) serves on a free port and prints that port, not 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN  # noqa: E402


def test_port_zero_prints_the_port_it_answers_on(tmp_path):
    cmd = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(tmp_path / "l.db"), "--port", "0"]
    proc = subprocess.Popen(cmd, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # the address is said once the ledger is open
            found = re.search(r"review page: (http://127\.0\.0\.1:(\d+))/", line)
            if found:
                break
        else:
            pytest.fail(f"ocrr serve exited ({proc.wait()}) without saying where it answers")
        url, port = found.group(1), int(found.group(2))
        assert port != 0
        deadline = time.monotonic() + 60
        while True:  # another process's start: nothing to wait on but its answer
            try:
                assert requests.get(f"{url}/health", timeout=5).status_code == 200
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "nothing answered on the port printed"
                time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
