"""What encoding cost: measured when vectors are computed, kept beside them in the cache.

The encoder-swap study reports it per 1,000 sentences. It is a measurement, not a result:
it varies with the machine and its load, so it never enters a run's results or task ids.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ocrr.utils.files import atomic_write_text


@dataclass(frozen=True)
class EncodingCost:
    encoder: str  # the encoder id
    texts: int
    load_seconds: float  # building the model (0 when it was already loaded)
    encode_seconds: float  # the texts alone
    threads: int  # compute threads of the process while it encoded
    machine: str  # platform and processor count, to read the seconds by

    @property
    def seconds_per_1k(self) -> float:
        return 1000.0 * self.encode_seconds / self.texts if self.texts else float("nan")

    @property
    def sentences_per_second(self) -> float:
        return self.texts / self.encode_seconds if self.encode_seconds > 0 else float("inf")


def threads_in_use() -> int:
    """torch's thread count when torch is loaded (ocrr pins it), else the processor count."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else int(os.cpu_count() or 1)


def machine() -> str:
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus"


def cost_path(vectors_path: Path) -> Path:
    return vectors_path.with_suffix(".cost.json")


def save_cost(vectors_path: Path, cost: EncodingCost) -> None:
    atomic_write_text(cost_path(vectors_path), json.dumps(asdict(cost), indent=2, sort_keys=True) + "\n")


def load_cost(vectors_path: Path) -> EncodingCost | None:
    """The cost recorded when these vectors were computed (None: vectors from an older ocrr)."""
    try:
        data = json.loads(cost_path(vectors_path).read_text(encoding="utf-8"))
        return EncodingCost(**data)
    except (OSError, ValueError, TypeError):
        return None
