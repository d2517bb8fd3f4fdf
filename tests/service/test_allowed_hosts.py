"""DNS rebinding: a page on another site whose name the attacker points at 127.0.0.1 makes
the browser send it requests with that name in ``Host``. ``ocrr serve`` answers only the
names of ``--allowed-hosts`` (by default the loopback names and the address it listens on),
and refuses any other with 400 naming the option."""

from __future__ import annotations

import time

import pytest
import requests
from service_helpers import TOKEN, free_port, serve_workers, wait_for_workers

from ocrr.errors import OcrrError
from ocrr.service.config import ServiceConfig


def test_the_default_is_the_loopback_names_and_the_address_listened_on(tmp_path):
    loopback = ("localhost", "127.0.0.1", "[::1]")
    assert ServiceConfig(ledger=tmp_path / "l.db").allowed_hosts == loopback
    assert ServiceConfig(ledger=tmp_path / "l.db", host="127.0.0.2").allowed_hosts == (*loopback, "127.0.0.2")
    assert ServiceConfig(ledger=tmp_path / "l.db", host="::1").allowed_hosts == loopback
    wildcard = ServiceConfig(ledger=tmp_path / "l.db", host="0.0.0.0", insecure_public=True)
    assert wildcard.allowed_hosts == loopback  # every address: which names reach it is the operator's to say


def test_given_names_are_normalised_and_bad_ones_refused_naming_the_option(tmp_path):
    given = ServiceConfig(ledger=tmp_path / "l.db", allowed_hosts=("Ocrr.Example.com", "::1", "*.corp.example"))
    assert given.allowed_hosts == ("ocrr.example.com", "[::1]", "*.corp.example")
    assert ServiceConfig(ledger=tmp_path / "l.db", allowed_hosts=("*",)).allowed_hosts == ("*",)
    for bad in ("example.com:8000", "a*.example.com", "", "exa mple.com", "http://example.com"):
        with pytest.raises(OcrrError, match=r"--allowed-hosts"):
            ServiceConfig(ledger=tmp_path / "l.db", allowed_hosts=(bad,))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_request_for_another_name_is_refused_with_400_naming_the_option(tmp_path, workers):
    port = free_port()
    proc = serve_workers(
        tmp_path / "l.db", port, "--allowed-hosts", "localhost,127.0.0.1,ocrr.example.com", workers=workers
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_workers(url, proc, workers, time.monotonic() + 120)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for host in ("localhost", f"localhost:{port}", "ocrr.example.com", "OCRR.example.com:80"):
            assert requests.get(f"{url}/health", headers={"Host": host}, timeout=10).status_code == 200, host
        for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.attacker.example", "[::1]"):
            for method, path, body in (("GET", "/health", None), ("POST", "/predict", {"vectors": [[1.0]]})):
                r = requests.request(method, url + path, json=body, headers={"Host": host, **auth}, timeout=10)
                assert r.status_code == 400, (host, path, r.status_code)
                assert "--allowed-hosts" in r.json()["detail"], r.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
