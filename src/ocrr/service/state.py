"""What the service serves (``ServiceState``) and how ``build_state`` opens it from a config.

The state is built before the app: the ledger is opened and checked, the encoder loaded
and the ledger seeded (``--fit``) before any request can arrive. ``create_app`` then adds
what answers requests (the predict pool, the counters).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ocrr.data import load_dataset
from ocrr.encoders.base import l2_normalise
from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, default_origin
from ocrr.service.config import ServiceConfig
from ocrr.service.encoder import EncoderProcess
from ocrr.service.metrics import Counters, prometheus_text
from ocrr.systems.persistent import PersistentSubstrate, open_substrate


@dataclass
class ServiceState:
    """What the app serves: the substrate, an optional encoder and signer, the token."""

    substrate: PersistentSubstrate
    token: str
    encoder: Any = None  # has .encode(list[str]) -> (n, d) float32; None: vectors only
    signer: Signer | None = None
    started: float = field(default_factory=time.time)
    close: Any = None  # called on shutdown (default: close the substrate)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: Any = None  # the app's PredictPool (for /metrics)
    # ocrr serve --workers N: this process's slot, N, and the counter table the workers share
    # (service/supervisor.py); with one process, a private table.
    slot: int = 0
    workers: int = 1
    shared: Any = None
    counters: Counters | None = None  # made by create_app, which knows the routes

    def record_request(self, path: str, status: int, seconds: float) -> None:
        """Count one answered request, and publish this worker's gauges with it."""
        pool, led, counters = self.pool, self.substrate.ledger, self._counters()
        with self.lock:
            counters.request(path, status, seconds)
            counters.publish(
                commits=led.commits,
                searches=pool.passes,
                pooled=pool.requests,
                full_scans=pool.shortlist.fallbacks if pool.shortlist else 0,
                followed=led.followed,
            )

    def _counters(self) -> Counters:
        assert self.counters is not None, "create_app makes the counters before any request"
        return self.counters

    def metrics_text(self) -> str:
        """``/metrics``: every worker's counters, summed."""
        counters = self._counters()
        with self.lock:
            counters.publish(commits=self.substrate.ledger.commits)  # this worker's, current
            totals = counters.totals()
        return prometheus_text(totals, len(self.substrate.ledger), self.workers, time.time() - self.started)


def build_state(config: ServiceConfig, encoder: Any = None, log: Callable[[str], None] = print) -> ServiceState:
    """Open everything the service serves: the signer, the substrate (its ledger checked),
    the encoder, and seed an empty ledger with ``config.fit``. ``encoder``: an encoder object
    to use in this process instead of ``config.encoder``'s own process (tests, notebooks).
    Without ``config.token``, the state gets a new random one."""
    signer = Signer.load(config.key, config.origin or default_origin(config.ledger)) if config.key is not None else None
    with ExitStack() as opened:  # on an error, closes what was opened; else handed to the state
        sub = opened.enter_context(open_substrate(config.ledger, config.system, seed=config.seed, verify=config.verify))
        if encoder is not None:
            encoder = SerialEncoder(encoder)
        elif config.encoder is not None:  # a spec: the model runs in its own process (see service/encoder.py)
            encoder = EncoderProcess(config.encoder, nice=config.encoder_nice)
            opened.callback(encoder.close)
        if config.fit is not None:
            if len(sub):
                log(f"--fit {config.fit}: the ledger already holds {len(sub)} entries; not seeding it again")
            else:
                _seed_from_dataset(sub, config.fit, encoder, config.data_dir, log)
        close = opened.pop_all().close
    token = config.token or secrets.token_urlsafe(24)
    return ServiceState(substrate=sub, token=token, encoder=encoder, signer=signer, close=close)


class SerialEncoder:
    """One encode at a time (a model is not made for concurrent calls, and on a small box
    parallel calls only thrash the CPU); loads the model before the first request."""

    def __init__(self, encoder):
        self.inner, self.lock = encoder, threading.Lock()
        self.encode(["warm up"])

    def encode(self, texts, progress=None):
        with self.lock:
            try:
                return self.inner.encode(texts, progress=progress)
            except Exception as e:  # noqa: BLE001 - the client sent texts this encoder cannot take
                raise OcrrError(f"the encoder failed on these texts ({e}); send plain text or vectors") from e


def _seed_from_dataset(sub: PersistentSubstrate, name: str, encoder, data_dir: str | None, log) -> None:
    dataset = load_dataset(name, data_dir=data_dir)
    train = dataset.train
    if train.vecs is not None:
        vecs = train.vecs
    elif encoder is None:
        raise OcrrError(f"--fit {name} needs an encoder for its texts; add --encoder minilm")
    else:
        assert train.texts is not None  # a split without vectors has texts (Split)
        log(f"encoding {len(train)} {name} train texts…")
        vecs = l2_normalise(np.asarray(encoder.encode(list(train.texts)), np.float32))
    sub.correct(vecs, list(train.labels), list(train.texts) if train.texts is not None else None)
    log(f"seeded the ledger with {len(train)} {name} train items ({len(set(train.labels))} labels)")
