"""What ``ocrr serve`` is asked to do: one frozen, validated object.

The command line (``cli/serve.py``) and Python callers build a ``ServiceConfig``; the
service never reads argv. Every value is checked when the config is made, so a mistake is
reported before a ledger is opened or a port claimed. Options are named as the flags of
``ocrr serve`` name them (``workers`` is ``--workers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ocrr.errors import OcrrError
from ocrr.service.encoder import check_nice

MAX_WORKERS = 64


@dataclass(frozen=True)
class ServiceConfig:
    """The options of ``ocrr serve`` (see ``ocrr serve -h`` for each one's help)."""

    ledger: Path  # the durable ledger file (created if missing)
    system: str = "substrate"  # substrate spec, e.g. substrate:k=3 or bounded_fifo_1000
    seed: int = 0  # seed of a bounded substrate's eviction
    encoder: str | None = None  # encoder spec for texts (minilm, st:<model id>); None: vectors only
    encoder_nice: int | str = "idle"  # the encoder process's niceness 0-19, or "idle" (SCHED_IDLE)
    fit: str | None = None  # seed an empty ledger with this dataset's train split
    data_dir: str | None = None  # where ``fit`` looks for the dataset
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port
    token: str | None = None  # the bearer token for /correct; None: a new random one, printed
    key: Path | None = None  # Ed25519 key signing the heads (ocrr ledger keygen)
    origin: str | None = None  # the log's name in signed heads (default ocrr.invalid/<file>)
    quick_open: bool = False  # on open, rehash only the entries after the last checkpoint
    workers: int = 1  # processes answering on one port, over one ledger file

    def __post_init__(self) -> None:
        # Paths may come as strings; a frozen dataclass stores the converted value this way.
        object.__setattr__(self, "ledger", Path(self.ledger))
        if self.key is not None:
            object.__setattr__(self, "key", Path(self.key))
        if not _is_int(self.workers) or not 1 <= self.workers <= MAX_WORKERS:
            raise OcrrError(
                f"--workers takes 1 to {MAX_WORKERS} processes, got {self.workers!r}; one per core is the usual choice"
            )
        if not _is_int(self.port) or not 0 <= self.port <= 65535:
            raise OcrrError(f"--port takes 0 to 65535 (0: any free port), got {self.port!r}; pick another --port")
        if not isinstance(self.host, str) or not self.host:
            raise OcrrError(f"--host needs an address to listen on, got {self.host!r}; e.g. 127.0.0.1 or 0.0.0.0")
        if not _is_int(self.seed):
            raise OcrrError(f"--seed takes an integer, got {self.seed!r}")
        if not isinstance(self.system, str) or not self.system:
            raise OcrrError(f"--system takes a substrate spec, got {self.system!r}; e.g. substrate or substrate:k=3")
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise OcrrError("the service token is empty; give a token, or none to have a random one made")
        check_nice(self.encoder_nice)

    @property
    def verify(self) -> str:
        """How much of the ledger file is rehashed on open (``open_substrate``'s ``verify``)."""
        return "checkpoint" if self.quick_open else "full"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
