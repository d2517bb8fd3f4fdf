"""How ``ocrr witness serve`` is configured: its state file, its key and name, and the logs it witnesses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ocrr.errors import OcrrError
from ocrr.ledger.heads import check_vkey
from ocrr.specs import Option

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

    def __post_init__(self) -> None:
        PORT.check("ocrr witness serve", "--port", self.port, hint="0: any free port. See 'ocrr witness serve --help'.")


PORT = Option(default=8780, kind=int, low=0, high=65535, help="port; 0: any free port")  # as `ocrr serve --port`


def parse_log(text: str) -> tuple[str, str]:
    """``ORIGIN=VKEY`` or ``VKEY`` (its name is the origin) -> (origin, vkey). An origin may
    hold '=' itself: the split is where the origin is the key's name."""
    try:
        vkey = check_vkey(text)  # VKEY alone (its key id covers its name: no ORIGIN= prefix passes)
        return vkey.split("+", 1)[0], vkey
    except OcrrError:
        splits = [i for i, c in enumerate(text) if c == "="]
        if not splits:
            raise
    for i in splits:
        if text[i + 1 :].split("+", 1)[0] == text[:i]:
            vkey = check_vkey(text[i + 1 :])
            return text[:i], vkey
    if "+" not in text[: splits[0]]:
        origin, name = text[: splits[0]], text[splits[0] + 1 :].split("+", 1)[0]
        raise OcrrError(
            f"--log {text!r}: the origin {origin!r} is not the name of its key {name!r} (a checkpoint's origin is "
            "the name its log signs it under); pass ORIGIN=VKEY with the log's own vkey"
        )
    return text, check_vkey(text)  # raises: neither a vkey nor ORIGIN=VKEY


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
