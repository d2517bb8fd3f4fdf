"""`ocrr serve --witness`: the options checked at the door, and the witnessed head shared through
its file, verified by whichever process serves /checkpoint (in-process here; the witnesses and
the whole story against real processes are in test_witnessed_service.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from tests.service.service_helpers import free_port, open_state, running, seed  # noqa: E402

from ocrr.errors import LedgerIntegrityError, OcrrError  # noqa: E402
from ocrr.ledger.cosignature import Cosigner, attach_cosignatures  # noqa: E402
from ocrr.ledger.heads import Signer  # noqa: E402
from ocrr.service import ServiceConfig  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402
from ocrr.service.witnessing import witnessed_path  # noqa: E402

W1 = Cosigner.generate("witness.example/w1")
W2 = Cosigner.generate("witness.example/w2")
ORIGIN = "example.com/witnessing-test"


@pytest.mark.parametrize(
    "options, words",
    [
        ({"witnesses": ("http://127.0.0.1:1",)}, "is not URL=VKEY"),
        ({"witnesses": (f"127.0.0.1:1={W1.vkey}",)}, "must start with http:// or https://"),
        ({"witnesses": ("http://127.0.0.1:1=witness+00+AAAA",)}, "bad witness verifier key"),
        ({"witnesses": (f"http://a:1={W1.vkey}", f"http://b:1={W1.vkey}")}, "is given twice"),
        ({"witnesses": (f"http://a:1={W1.vkey}",), "quorum": 2}, "--quorum takes 1 to the number of witnesses"),
        ({"witnesses": (f"http://a:1={W1.vkey}",), "quorum": 0}, "--quorum must be an integer ≥ 1 or none, got 0"),
        ({"quorum": 1}, "--quorum counts witnesses: give them with --witness"),
    ],
)
def test_bad_witness_options_are_refused_naming_the_fix(tmp_path, options, words):
    with pytest.raises(OcrrError, match=words):
        ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem", **options)


def test_witnesses_need_a_key_and_the_quorum_defaults_to_all_of_them(tmp_path):
    two = (f"http://127.0.0.1:8780/={W1.vkey}", f"http://127.0.0.1:8781={W2.vkey}")
    with pytest.raises(OcrrError, match="--witness cosigns the checkpoints the service signs: give --key"):
        ServiceConfig(ledger=tmp_path / "l.db", witnesses=two)
    config = ServiceConfig(ledger=tmp_path / "l.db", key=tmp_path / "k.pem", witnesses=two)
    assert config.quorum == 2
    assert config.witnesses == (("http://127.0.0.1:8780", W1.vkey), ("http://127.0.0.1:8781", W2.vkey))


def _witnessed_state(tmp_path):
    """A seeded service whose witnesses are down (nothing listens at their URLs)."""
    signer = Signer.generate(ORIGIN)
    key = tmp_path / "log.pem"
    if not key.exists():
        signer.save(key)
    signer = Signer.load(key, ORIGIN)
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    options = {"key": key, "origin": ORIGIN, "check_every": 0, "quorum": 1}
    options["witnesses"] = tuple(f"{url}={w.vkey}" for url, w in zip(urls, (W1, W2)))
    return signer, open_state(tmp_path / "ledger.db", **options), witnessed_path(key, None)


def test_the_witnessed_head_is_served_only_as_its_file_verifies(tmp_path):
    signer, state, path = _witnessed_state(tmp_path)
    seed(state)
    size = len(state.substrate)
    with running(create_app(state)) as url:
        r = requests.get(f"{url}/checkpoint", timeout=10)
        assert r.status_code == 503
        assert "no checkpoint has been cosigned by 1 of the 2 witnesses yet" in r.json()["detail"]
        assert requests.get(f"{url}/head", timeout=10).json()["size"] == size  # the log-signed head still
        note = signer.checkpoint(size, state.substrate.ledger.root(size))
        cosigned = attach_cosignatures(note, W1.cosign(note))
        path.write_text(cosigned)
        r = requests.get(f"{url}/checkpoint", timeout=10)
        assert r.status_code == 200 and r.text == cosigned
        metrics = requests.get(f"{url}/metrics", timeout=10).text
        assert f"ocrr_witnessed_size {float(size)}\n" in metrics and "ocrr_witness_lag_entries 0.0\n" in metrics
        path.write_text(note)  # the log's signature alone: below the quorum
        r = requests.get(f"{url}/checkpoint", timeout=10)
        assert r.status_code == 503 and "is refused" in r.json()["detail"] and "fewer than the quorum" in r.text
        other = Signer.generate(ORIGIN).checkpoint(size, state.substrate.ledger.root(size))  # another key
        path.write_text(attach_cosignatures(other, W1.cosign(other)))
        r = requests.get(f"{url}/checkpoint", timeout=10)
        assert r.status_code == 503 and "is refused" in r.json()["detail"]
        path.write_text(cosigned)
        assert requests.get(f"{url}/checkpoint", timeout=10).text == cosigned
        assert requests.get(f"{url}/health", timeout=10).status_code == 200


def test_a_ledger_that_does_not_extend_its_witnessed_head_is_not_served(tmp_path):
    signer, state, path = _witnessed_state(tmp_path)
    seed(state)
    size = len(state.substrate)
    ahead = signer.checkpoint(size + 1, b"\x07" * 32)  # a head the ledger does not hold (rewound since)
    path.write_text(attach_cosignatures(ahead, W1.cosign(ahead)))
    with running(create_app(state)) as url:
        r = requests.get(f"{url}/checkpoint", timeout=10)
        assert r.status_code == 503 and "rewound or forked" in r.json()["detail"]
        assert requests.get(f"{url}/health", timeout=10).status_code == 503  # failed closed
    with pytest.raises(LedgerIntegrityError, match=f"not serving ledger .*rewound or forked.*move {path}"):
        _witnessed_state(tmp_path)


def test_without_witnesses_nothing_changes(tmp_path):
    key = tmp_path / "log.pem"
    Signer.generate(ORIGIN).save(key)
    state = open_state(tmp_path / "ledger.db", key=key, origin=ORIGIN, check_every=0)
    seed(state)
    assert state.witnessed is None
    with running(create_app(state)) as url:
        assert requests.get(f"{url}/checkpoint", timeout=10).text.startswith(f"{ORIGIN}\n{len(state.substrate)}\n")
        assert "ocrr_witness" not in requests.get(f"{url}/metrics", timeout=10).text
    assert state.witnessing is None and not witnessed_path(key, None).exists()
