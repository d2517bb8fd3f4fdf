"""`ocrr client head|predict|correct|audit`: JSON out, exit 0 when everything verified, 1 on an
inconsistency (with its evidence), 2 for a usage error or a service out of reach."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
pytest.importorskip("requests")

from tests.client.client_helpers import TOKEN, Log, add_entries, free_port, unit_vectors  # noqa: E402

from ocrr.cli.main import main  # noqa: E402


def _run(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(["client", *argv])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


def test_correct_head_audit_and_a_fork_from_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCRR_TOKEN", TOKEN)
    log = Log(tmp_path)
    (tmp_path / "vkey").write_text(log.vkey + "\n")
    (tmp_path / "vectors.json").write_text(json.dumps(unit_vectors(2, 1).tolist()))
    common = ["--url", log.url, "--vkey", str(tmp_path / "vkey"), "--state", str(tmp_path / "head.json")]
    with log.serving(tmp_path / "a.db"):
        code, out, _ = _run(capsys, "correct", *common, "--vectors", str(tmp_path / "vectors.json"), "--label", "a",
                            "--label", "b")  # fmt: skip
        assert code == 0 and out["ok"] and out["ids"] == [0, 1] and out["checkpoint"]["size"] == 2
        code, out, _ = _run(capsys, "predict", *common, "--vectors", str(tmp_path / "vectors.json"))
        assert code == 0 and [p["label"] for p in out["predictions"]] == ["a", "b"]
        code, out, _ = _run(capsys, "audit", *common)
        assert code == 0 and (out["size"], out["entries_rehashed"]) == (2, 2)
        code, out, _ = _run(capsys, "head", *common)
        assert code == 0 and out["checkpoint"]["size"] == 2
        held = out["checkpoint"]["checkpoint"]
    with log.serving(tmp_path / "b.db") as url:  # another history under the same key and URL
        add_entries(url, 2, seed=9)
        code, out, err = _run(capsys, "head", *common)
    assert code == 1 and out["ok"] is False and out["error"] == "ForkDetected"
    assert out["evidence"]["held_checkpoint"] == held and out["evidence"]["seen_checkpoint"] != held
    assert "fork: the log signed two different trees of 2 entries" in err


def test_usage_errors_and_a_service_out_of_reach_exit_2(tmp_path, capsys):
    log = Log(tmp_path)
    with pytest.raises(SystemExit) as usage:
        main(["client", "head", "--vkey", log.vkey])  # no --url
    assert usage.value.code == 2
    capsys.readouterr()
    state = ["--state", str(tmp_path / "head.json")]
    code, out, err = _run(capsys, "head", "--url", log.url, "--vkey", "not-a-key-file", *state)
    assert code == 2 and out is None and "--vkey 'not-a-key-file' is neither a verifier key" in err
    code, out, err = _run(capsys, "head", "--url", f"http://127.0.0.1:{free_port()}", "--vkey", log.vkey, *state)
    assert code == 2 and out is None and "cannot reach the service" in err
