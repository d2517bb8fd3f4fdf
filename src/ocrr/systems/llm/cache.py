"""llm_icl's answer cache: every scored (model, prompt, candidates, method) kept in SQLite.

A rerun, another seed reaching the same prompt, or the same eval item asked again at the next
checkpoint with the same neighbours costs a dictionary look-up instead of a forward pass. The
key is a SHA-256 of the canonical JSON of everything the scores depend on: the backend's
identity (a GGUF file's hash, or an endpoint's URL and model name), the scoring method, the
prompt and the candidate continuations in order. Values are the scores as JSON (floats written
by ``repr``, so read back bit for bit): a hit gives exactly what a fresh call gave.

Several processes (sweep workers) may share one file: it is opened in WAL mode with a busy
timeout, and a key is written once (``INSERT OR IGNORE``). ``AnswerCache(None)`` keeps the
answers in memory only. ``CallStats`` counts calls, hits, tokens and model seconds, for
progress lines; it never goes into results (a rerun's hits differ from the first run's).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ocrr.errors import OcrrError
from ocrr.utils.paths import cache_root

SCHEMA = "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, scores TEXT NOT NULL, tokens INTEGER NOT NULL)"


def default_cache_path() -> Path:
    return cache_root() / "llm" / "answers.sqlite"


def answer_key(identity: str, method: str, prompt: str, candidates: Sequence[str]) -> str:
    payload = json.dumps([identity, method, prompt, list(candidates)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


class AnswerCache:
    """Scores by key, in memory and (given a path) in an SQLite file that outlives the process."""

    def __init__(self, path: str | Path | None):
        self.path = None if path is None else Path(path).expanduser()
        self._memory: dict[str, tuple[tuple[float, ...], int]] = {}
        self._db: sqlite3.Connection | None = None
        self.asked: set[str] | None = None  # the keys asked for, once ``record_keys`` is called

    def record_keys(self) -> set[str]:
        """From now on, note every key asked for (a rerun can then tell which answers it used);
        returns the set, filled as ``get`` is called."""
        self.asked = set()
        return self.asked

    def _connection(self) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        if self._db is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(SCHEMA)
            except (OSError, sqlite3.Error) as err:
                raise OcrrError(
                    f"llm_icl cannot open its answer cache {self.path}: {err}. Pass a writable file as "
                    "llm_icl:cache=/path/answers.sqlite, or llm_icl:cache=none to keep answers in memory only."
                ) from None
            self._db = db
        return self._db

    def get(self, key: str) -> tuple[tuple[float, ...], int] | None:
        if self.asked is not None:
            self.asked.add(key)
        if key in self._memory:
            return self._memory[key]
        db = self._connection()
        if db is None:
            return None
        row = db.execute("SELECT scores, tokens FROM answers WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        found = (tuple(float(x) for x in json.loads(row[0])), int(row[1]))
        self._memory[key] = found
        return found

    def put(self, key: str, scores: Sequence[float], tokens: int) -> None:
        self._memory[key] = (tuple(scores), tokens)
        db = self._connection()
        if db is not None:
            text = "[" + ",".join(repr(float(x)) for x in scores) + "]"
            db.execute("INSERT OR IGNORE INTO answers VALUES (?, ?, ?)", (key, text, tokens))

    def __len__(self) -> int:
        db = self._connection()
        if db is None:
            return len(self._memory)
        return int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


@dataclass
class CallStats:
    """Scoring requests so far: answered by the model (calls) or the cache (hits)."""

    calls: int = 0
    hits: int = 0
    single: int = 0  # queries whose neighbours agreed on one label: nothing to score
    tokens: int = 0
    seconds: float = 0.0

    @property
    def hit_rate(self) -> float:
        asked = self.calls + self.hits
        return self.hits / asked if asked else float("nan")

    @property
    def ms_per_call(self) -> float:
        return 1000 * self.seconds / self.calls if self.calls else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")

    def line(self) -> str:
        return (
            f"llm_icl: {self.calls} model calls ({self.ms_per_call:.0f} ms each, "
            f"{self.tokens_per_second:.0f} tokens/s), "
            f"{self.hits} cache hits ({100 * self.hit_rate:.0f} %), {self.single} single-label answers"
        )


class Progress:
    """A stats line on ``stream`` at most every ``every`` seconds (0: never)."""

    def __init__(self, every: float, stream: TextIO | None = None):
        self.every = every
        self.stream = stream
        self._last = time.monotonic()

    def tick(self, stats: CallStats) -> None:
        if self.every > 0 and time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            print(stats.line(), file=self.stream or sys.stderr, flush=True)
