"""How ``ocrr witness serve`` is configured: its state file, its key and name, and the logs it witnesses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ocrr.errors import OcrrError
from ocrr.ledger.heads import check_vkey

__all__ = ["WitnessConfig", "logs_of", "parse_log"]


@dataclass(frozen=True)
class WitnessConfig:
    state: Path
    key: Path
    name: str
    logs: dict[str, str] = field(default_factory=dict)  # origin -> the log's verifier key
    host: str = "127.0.0.1"
    port: int = 8780
    new_state: bool = False


def parse_log(text: str) -> tuple[str, str]:
    """``ORIGIN=VKEY`` or ``VKEY`` (its name is the origin) -> (origin, vkey)."""
    origin, sep, vkey = text.partition("=")
    if not sep:
        origin, vkey = "", text
    vkey = check_vkey(vkey)
    name = vkey.split("+", 1)[0]
    if origin and origin != name:
        raise OcrrError(
            f"--log {text!r}: the origin {origin!r} is not the name of its key {name!r} (a checkpoint's origin is "
            "the name its log signs it under); pass ORIGIN=VKEY with the log's own vkey"
        )
    return name, vkey


def logs_of(options: list[str]) -> dict[str, str]:
    """The --log options as {origin: vkey}; one key per origin."""
    logs: dict[str, str] = {}
    for text in options:
        origin, vkey = parse_log(text)
        if logs.get(origin, vkey) != vkey:
            raise OcrrError(f"--log names two keys for the log {origin!r}; pass one")
        logs[origin] = vkey
    if not logs:
        raise OcrrError("no log to witness: pass --log ORIGIN=VKEY (the log's verifier key) once per log")
    return logs
