"""What the service serves (``ServiceState``) and how ``build_state`` opens it from a config.

The state is built before the app: the ledger is opened and checked, the encoder loaded
and the ledger seeded (``--fit``) before any request can arrive. ``create_app`` then adds
what answers requests (the predict pool, the counters).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ocrr.data import load_dataset
from ocrr.data.records import Dataset
from ocrr.encoders.base import l2_normalise
from ocrr.encoders.cache import cache_path, load_cached, save_cached, texts_sha256
from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError, SettingsError
from ocrr.ledger.heads import Signer
from ocrr.ledger.location import default_origin_of, display
from ocrr.ledger.proofs import b64
from ocrr.ledger.scan import LedgerReport
from ocrr.ledger.signed_state import SignedState, default_state_path, recorded_origin
from ocrr.ledger.store import LedgerStore
from ocrr.service.check_apart import quick_check
from ocrr.service.config import ServiceConfig
from ocrr.service.encoder import EncoderProcess
from ocrr.service.metrics import Counters, Scrape
from ocrr.service.rehash_trusted import WARM_UP
from ocrr.service.shared_rows import RowsRoom, SharedRows
from ocrr.service.witnessing import WitnessedFile, Witnessing, witnessed_path
from ocrr.systems.substrate.persistent import PersistentSubstrate, open_checked, open_substrate

#: Entries older than the last checkpoint the background check rehashes per tick, in turn:
#: all of them every ceil(entries / this) ticks (docs/reference/measurements.md).
CHECK_SLICE = 8_000
#: The slice is rehashed this many entries at a time, with a rest after each (``CHECK_REST``
#: times as long as the step took): rehashed at once it held the interpreter lock, which this
#: worker's requests need too, for tens of milliseconds (docs/reproductions/service-at-scale.md).
CHECK_STEP = 100
CHECK_REST = 3.0
#: Seconds between the predict path's looks for damage another worker recorded in the file.
DAMAGE_POLL = 1.0
_REASON_SHOWN = 500  # characters of a reason read from storage that /health and 503s repeat
#: A replica on a database ledger re-reads the log at least this often (NOTIFY wakes it sooner).
FOLLOW_EVERY = 1.0


@dataclass
class ServiceState:
    """What the app serves: the substrate, an optional encoder and signer, the token."""

    substrate: PersistentSubstrate
    token: str
    encoder: Any = None  # has .encode(list[str]) -> (n, d) float32; None: vectors only
    signer: SignedState | None = None  # signs only heads that extend what its key signed before
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
    # Fail closed: once the file is found tampered with (or disagreeing with what this process
    # holds), the report that showed it; the service then refuses to predict, correct or sign
    # until restarted on a good file.
    damage: dict | None = None
    verify_every: float = 30.0  # /verify rehashes the file at most this often, while it does not change
    check_every: float = 0.0  # seconds between background checks of the file (0: none)
    # (monotonic time, report, what the file looked like: routes._unchanged_since) of the last full /verify
    last_full: tuple[float, dict, tuple | None] | None = None
    verify_lock: threading.Lock = field(default_factory=threading.Lock)
    # Damage is shared through the file's verification records (``LedgerStore.damage_since``):
    # the id of the latest record already looked at (at start: the latest one then, so damage
    # recorded before the start, which the start's check found gone, is not honoured).
    damage_seen: int = -1
    damage_polled: float = 0.0  # monotonic time of the latest look (the predict path looks once a second)
    # The background check rehashes this many entries older than its checkpoint per tick, in
    # turn (``slice_at``: where the next slice starts), so all are rehashed every
    # ceil(entries / check_slice) ticks.
    check_slice: int = CHECK_SLICE
    slice_at: int = 0
    # Each cycle of that rolling rehash starts with the quick check of the whole file (its
    # columns read, the tree rebuilt: a cost that grows with the ledger), so that it costs
    # per tick about what a slice does; the open's own check stands for the first cycle's.
    # Only the first worker (slot 0) reads the whole file: the others honour the damage it
    # records, and N reads at once would cost N times the memory and the disk.
    quick_check_due: bool = False
    _prefix: tuple[int, str] | None = None  # (size, root b64) of the last prefix reported by /predict
    # ocrr serve --witness: the witnesses (url, vkey), the witnessed head every worker serves at
    # /checkpoint, and (in one process: the only one, or worker 0) what obtains the cosignatures.
    witnesses: tuple[tuple[str, str], ...] = ()
    witnessed: WitnessedFile | None = None
    witnessing: Witnessing | None = None
    log: Callable[[str], None] = print
    # Entries the open took on trust (a quick open's, under a signed checkpoint) that this
    # process rehashes once it serves (``rehash_trusted.py``); 0 when none, or when the
    # supervisor of ``--workers N`` rehashes them in the memory it shares.
    trusted: int = 0
    rehash_after: float = WARM_UP  # seconds from the start until it does (--rehash-after)

    def fail(self, report: dict, share: bool = True) -> None:
        """Go read-only and unhealthy over ``report`` (the first damage found stays) and, with
        ``share``, record it in the file, where every other worker honours it."""
        with self.lock:
            if self.damage is not None:
                return
            self.damage = report
        if share:
            try:
                self.substrate.ledger.record_verification({**report, "ok": False, "time": time.time()})
            except Exception:  # noqa: BLE001 - a file that cannot be written: this process fails closed still
                pass

    def found_by_rehash(self, report: dict) -> None:
        """The outcome of rehashing what the quick open took on trust (``rehash_trusted.py``):
        damage fails the service closed; an intact outcome is recorded in the file."""
        if not report["ok"]:
            self.fail(report)
            return
        try:
            self.substrate.ledger.record_verification(report)
        except Exception:  # noqa: BLE001 - a read-only file: the outcome is logged still
            pass

    def honour_shared_damage(self, wait: bool = True) -> None:
        """Fail closed over damage another worker (or an earlier check) recorded in the file
        since this service started. ``wait=False``: skip the look if the file's watching
        connection is busy now (the predict path never waits for it)."""
        if self.damage is not None:
            return
        found = self.substrate.ledger.damage_since(self.damage_seen, wait=wait)
        if found is None:
            return
        self.damage_seen, bad = found
        if bad is not None:
            self.fail(_as_recorded(bad), share=False)

    def notice_damage(self) -> None:
        """The predict path's look for shared damage: at most once a second, never waiting."""
        now = time.monotonic()
        if now - self.damage_polled >= DAMAGE_POLL:
            self.damage_polled = now
            self.honour_shared_damage(wait=False)

    def damage_reason(self) -> str | None:
        """Why the service refuses to serve (None: it serves)."""
        d = self.damage
        if d is None:
            return None
        where = f" at entry {d['first_bad']}" if d.get("first_bad") is not None else ""
        shown = display(self.substrate.ledger.path)
        return (
            f"the ledger file was found damaged{where}: {d.get('reason')}. The service is read-only until "
            f"an operator restores the file and restarts it (run `ocrr ledger verify {shown}`)"
        )

    def check_file(self, verify: str = "checkpoint", rest: Callable[[float], bool] | None = None) -> dict:
        """Check the file (``checkpoint``: only what follows the last full check, and that
        checkpoint itself, plus the next ``check_slice`` older entries in turn; ``full``: all
        of it, recording a checkpoint if intact), and that what this process holds agrees
        with it; honour damage other workers recorded; fail closed on damage. ``rest``: waits
        the seconds it is given between steps of the slice, and says True when the service
        stops (None: no rests). Returns the report as a dict (as /verify answers it). A
        database that cannot be reached is no damage: the report says so (``ok`` false,
        ``unreachable`` true) and nothing fails closed."""
        self.honour_shared_damage()
        led = self.substrate.ledger
        try:
            led.refresh()  # what other workers committed: the file holds at least what memory holds
        except OcrrError as e:
            if _unreachable(led, e):
                return _unreachable_report(led, e)
            out = failure_report(e, len(led))
            self.fail(out)
            return out
        held = len(led)
        try:
            if verify == "checkpoint" and not self._starts_cycle(held):
                out = _held_report(led, held)  # the tail (checked by the refresh above) and a slice
            else:
                report = quick_check(led) if verify == "checkpoint" else led.verify("full")
                out = report.to_dict()
                if report:
                    out = self._disagreement(report, held) or out
            if out["ok"] and verify == "checkpoint":
                out = self._check_old_slice(held, rest) or out
        except OcrrError as e:
            if not _unreachable(led, e):
                raise
            return _unreachable_report(led, e)
        if not out["ok"]:
            self.fail(out)
        return out

    def _starts_cycle(self, held: int) -> bool:
        """Whether this background tick starts a cycle of the rolling rehash and, in the first
        worker, reads the whole file too: every tick while the ledger fits in one slice."""
        due = self.slot == 0 and self.quick_check_due and (self.slice_at == 0 or self.slice_at >= held)
        self.quick_check_due = True  # (the first tick's cycle: the open checked the whole file)
        return due

    def _check_old_slice(self, held: int, rest: Callable[[float], bool] | None = None) -> dict | None:
        """Rehash the next ``check_slice`` entries (cycling over all ``held``), ``CHECK_STEP``
        at a time with ``rest`` between steps; a damage report if one differs from what this
        process holds."""
        lo = self.slice_at if self.slice_at < held else 0
        hi = min(lo + self.check_slice, held)
        self.slice_at = hi if hi < held else 0
        rested = None if rest is None else (lambda took: rest(CHECK_REST * took))  # True: the service stops
        found = self.substrate.ledger.check_slice(lo, hi, step=CHECK_STEP, rest=rested)
        if found is not None:
            return {"ok": False, "size": held, "first_bad": found[0], "reason": found[1]}
        return None

    def _disagreement(self, report: LedgerReport, held: int) -> dict | None:
        """A damage report if the (intact) file disagrees with the entries held in memory."""
        led = self.substrate.ledger
        if report.size < held:
            reason = f"the file holds {report.size} entries but {held} were committed: entries were removed"
            return {**report.to_dict(), "ok": False, "first_bad": report.size, "reason": reason}
        if report.size > len(led):
            led.refresh()
        if report.size and report.size <= len(led):
            if b64(led.root(report.size)) != report.root:
                reason = "the file's Merkle root differs from the entries this service holds (history rewritten)"
                return {**report.to_dict(), "ok": False, "first_bad": None, "reason": reason}
        return None

    def prefix_headers(self, before: int) -> dict[str, str]:
        """What a prediction was answered from, for a client to hold a replica to:
        ``X-Ocrr-Ledger-Size`` and ``X-Ocrr-Ledger-Root`` of the log's prefix, when the ledger
        held ``before`` entries (read before the search) and still does; if entries came in
        during the search, only the range of sizes the answer lies in (``before-after``)."""
        led = self.substrate.ledger
        after = len(led)
        if after != before:
            return {"X-Ocrr-Ledger-Size": f"{before}-{after}"}
        cached = self._prefix
        if cached is None or cached[0] != after:
            with led.lock.read():
                root = b64(led.root(after))
            cached = self._prefix = (after, root)
        return {"X-Ocrr-Ledger-Size": str(after), "X-Ocrr-Ledger-Root": cached[1]}

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
        entries, witnessed = len(self.substrate.ledger), None
        if self.witnessed is not None:
            head, _ = self.witnessed.load()
            witnessed = None if head is None else head.size
        uptime = time.time() - self.started
        return Scrape(totals, entries, self.workers, uptime, self.witnessed is not None, witnessed).text()

    def start_witnessing(self) -> None:
        """Start obtaining cosignatures (``ocrr serve --witness``; one process per service)."""
        if self.witnessed is None or self.signer is None or self.witnessing is not None:
            return
        counters = self._counters()

        def failed(reason: str) -> None:
            self.fail({"ok": False, "size": len(self.substrate), "first_bad": None, "reason": reason})

        self.witnessing = Witnessing(
            self.signer,
            self.substrate.ledger,
            list(self.witnesses),
            self.witnessed,
            self.log,
            damaged=lambda: self.damage is not None,
            fail=failed,
            publish=counters.publish,
        )
        self.witnessing.start()


def failure_report(e: OcrrError, held: int) -> dict:
    """The damage report of an error met taking in what storage holds: an integrity failure
    names its first bad entry; any other names the first entry this process does not hold."""
    first_bad = e.first_bad if isinstance(e, LedgerIntegrityError) else held
    reason = e.reason if isinstance(e, LedgerIntegrityError) else str(e)
    return {"ok": False, "size": held, "first_bad": first_bad, "reason": reason}


def build_state(
    config: ServiceConfig,
    encoder: Any = None,
    log: Callable[[str], None] = print,
    damage_after: int | None = None,
    predicts: bool = True,
    shared: SharedRows | RowsRoom | None = None,
) -> ServiceState:
    """Open everything the service serves: the signer, the substrate (its ledger checked),
    the encoder, and seed an empty ledger with ``config.fit``. ``encoder``: an encoder object
    to use in this process instead of ``config.encoder``'s own process (tests, notebooks).
    Without ``config.token``, the state gets a new random one. ``damage_after``: the id of the
    latest verification record when the service started (a worker gets its supervisor's);
    damage recorded after it is honoured (default: the latest record now). ``predicts=False``:
    the ledger is checked as for serving but the substrate does not learn its entries (the
    supervisor of ``--workers N``, whose workers each open it; no ``config.fit``). ``shared``:
    the entries that supervisor checked (``service/shared_rows.py``): the substrate is built
    from them, and only the entries committed since are read from the ledger; for the
    supervisor itself (``predicts=False``), the shared memory its rows are read into."""
    signer = load_signer(config)
    if config.token is None and config.on_database:
        config.token_path  # noqa: B018 - refuses, naming the fix, before the database is opened
    if signer is not None:
        _check_signed_record(config, signer)
    # Said once, by the starting process (a worker it starts gets its damage_after).
    if signer is None and damage_after is None and (config.verify == "checkpoint" or config.workers > 1):
        log(
            f"ledger {display(config.ledger)}: no --key, so no checkpoint record can be authenticated: every "
            "open (workers' included) and every background check rehashes all entries; start with --key to "
            "trust the records it signs"
        )
    with ExitStack() as opened:  # on an error, closes what was opened; else handed to the state
        if predicts:
            known = None if shared is None else shared.known_prefix()
            sub = open_substrate(
                config.ledger,
                config.system,
                seed=config.seed,
                verify=config.verify,
                grow_ahead=True,
                signer=signer,
                index_file=config.index_file,
                known=known,
            )
            del known  # (its lists are the substrate's now)
            opened.enter_context(sub)
            if isinstance(shared, SharedRows):
                shared.lend_codes(sub)
        else:
            if config.fit is not None:
                raise ValueError("predicts=False cannot seed the ledger (config.fit)")
            known = None if shared is None else shared.known_prefix()  # (of no entries: where rows are read into)
            # A saved index is refused once here, not by every worker in turn.
            sub = open_checked(
                config.ledger,
                config.system,
                seed=config.seed,
                verify=config.verify,
                signer=signer,
                known=known,
                index_file=config.index_file,
            )
            del known
            opened.enter_context(sub)
        guarded = None if signer is None else opened.enter_context(_signing_state(config, signer, sub, log))
        if encoder is not None:
            encoder = SerialEncoder(encoder)
        elif config.encoder is not None:  # a spec: the model runs in its own process (see service/encoder.py)
            encoder = EncoderProcess(config.encoder, nice=config.nice)
            opened.callback(encoder.close)
        if encoder is not None:
            _check_encoder_fits(config, encoder, sub.ledger.dim)
        if config.fit is not None:
            if len(sub):
                log(f"--fit {config.fit}: the ledger already holds {len(sub)} entries; not seeding it again")
            else:
                _seed_from_dataset(sub, config, encoder, log)
        close = opened.pop_all().close
    token = config.token or _new_token(config, log)
    if damage_after is None:
        seen = sub.ledger.damage_since(-1)
        damage_after = seen[0] if seen is not None else -1
    state = ServiceState(
        substrate=sub,
        token=token,
        encoder=encoder,
        signer=guarded,
        close=close,
        verify_every=config.verify_every,
        check_every=config.check_every,
        damage_seen=damage_after,
        log=log,
        trusted=sub.ledger.report.checked_from if predicts and shared is None else 0,
        rehash_after=config.rehash_delay,
    )
    if config.witnesses and signer is not None:
        assert config.key is not None and config.quorum is not None  # ServiceConfig checked both
        state.witnesses = config.witnesses
        state.witnessed = WitnessedFile(
            witnessed_path(config.key, config.signed_state),
            signer.vkey,
            [v for _, v in config.witnesses],
            config.quorum,
        )
        _check_witnessed(state, config)
    follow(state, sub.ledger)
    return state


def _check_witnessed(state: ServiceState, config: ServiceConfig) -> None:
    """Refuse a ledger that does not extend the head its witnesses cosigned (rewound or forked
    since); a witnessed head that no longer verifies or meets the quorum is only said."""
    assert state.witnessed is not None
    head, why = state.witnessed.load()
    if why and state.witnessed.path.exists():
        state.log(f"witnessing: {why}")
    if head is None:
        return
    try:
        state.witnessed.current(state.substrate.ledger)
    except LedgerIntegrityError as e:
        state.close()
        raise LedgerIntegrityError(
            f"not serving ledger {display(config.ledger)}: {e}. Only if going back is deliberate, move "
            f"{state.witnessed.path} aside (clients and witnesses holding the later checkpoint will refuse "
            "this log)"
        ) from None


@contextmanager
def _signing_state(
    config: ServiceConfig, signer: Signer, sub: PersistentSubstrate, log: Callable[[str], None]
) -> Iterator[SignedState]:
    """The signer, through the record of what its key signed: a ledger that does not extend
    it (rewound or forked since) is refused here, before anything is served or signed."""
    try:
        state = SignedState.open(signer, _signed_state_path(config), sub.ledger, log)
    except LedgerIntegrityError as e:
        raise LedgerIntegrityError(f"not serving ledger {display(config.ledger)}: {e}") from None
    try:
        yield state
    finally:
        state.close()


def load_signer(config: ServiceConfig) -> Signer | None:
    """--key under the log it signs for: --origin; else the origin its record of signed heads
    names (the one `ocrr ledger keygen` made the key for, or its first signature's); else the
    ledger's default name. A record naming another origin than --origin is refused when the
    ledger opens (``_check_signed_record``)."""
    if config.key is None:
        return None
    signer = Signer.load(config.key, config.origin or default_origin_of(config.ledger))
    if config.origin is None:
        made_for = recorded_origin(signer, _signed_state_path(config))
        if made_for is not None and made_for != signer.origin:
            signer = Signer.load(config.key, made_for)
    return signer


def _check_signed_record(config: ServiceConfig, signer: Signer) -> None:
    """``SignedState.check_record``: a record of another key or log refused before the ledger is
    read (at ten million entries its open takes a minute or more), with ``_signing_state``'s words."""
    try:
        SignedState.check_record(signer, _signed_state_path(config))
    except LedgerIntegrityError as e:
        raise LedgerIntegrityError(f"not serving ledger {display(config.ledger)}: {e}") from None


def _signed_state_path(config: ServiceConfig) -> Path:
    assert config.key is not None  # a signer is loaded from --key
    return Path(config.signed_state or default_state_path(config.key))


def follow(state: ServiceState, ledger: LedgerStore, every: float = FOLLOW_EVERY) -> object | None:
    """A replica on a database ledger keeps its index current: the store's follower (if its
    engine has one: ``LedgerStore.follow``) takes in what the other replicas commit (on NOTIFY,
    at least every ``every`` s, after reconnecting); entries that do not chain on make this
    replica fail closed and tell the others; damage another replica recorded is looked for
    on every tick (not on the predict path). A file's readers refresh instead: None."""

    def damaged(e: OcrrError) -> None:
        state.fail({"ok": False, "size": len(ledger), "first_bad": ledger.broken_at, "reason": str(e)})

    return ledger.follow(every, on_error=damaged, on_tick=state.honour_shared_damage)


def _unreachable(led: LedgerStore, e: OcrrError) -> bool:
    """Whether ``e``, raised by ``led``, was its storage being out of reach (not damage: a store
    that found damage has failed closed, ``broken``)."""
    return isinstance(e, LedgerStorageError) and led.broken is None


def _unreachable_report(led: LedgerStore, e: OcrrError) -> dict:
    return {"ok": False, "unreachable": True, "size": len(led), "first_bad": None, "reason": f"not checked: {e}"}


def _held_report(led: LedgerStore, held: int) -> dict:
    """What a background tick that does not read the whole file reports: what this process
    holds, which the refresh before it found the file's tail to agree with."""
    report = LedgerReport(
        True,
        held,
        None,
        "the file's tail agrees with the entries held; the whole file is read at each cycle of the rolling check",
        root=b64(led.root(held)) if held else None,
        chain_head=b64(led.entry_hash(held - 1)) if held else None,
    )
    return report.to_dict()


def _new_token(config: ServiceConfig, log: Callable[[str], None]) -> str:
    """A new random token (256 bits), written to ``config.token_path`` (mode 0600), never to a
    log: the log names the file."""
    token = secrets.token_urlsafe(32)
    path = config.token_path
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as e:
        raise OcrrError(
            f"cannot write the generated token to {path} ({e}); set OCRR_TOKEN or --token-file instead"
        ) from e
    log(f"bearer token: in {path} (mode 0600; set OCRR_TOKEN or --token-file to choose one)")
    return token


class SerialEncoder:
    """One encode at a time (a model is not made for concurrent calls, and on a small box
    parallel calls only thrash the CPU); loads the model before the first request."""

    def __init__(self, encoder):
        self.inner, self.lock = encoder, threading.Lock()
        self.encoder_id: str | None = getattr(encoder, "id", None)  # its embedding-cache key, if it has one
        self.dim = int(np.shape(self.encode(["warm up"]))[1])  # the width of its vectors: checked against the ledger's

    def encode(self, texts, progress=None):
        with self.lock:
            try:
                return self.inner.encode(texts, progress=progress)
            except Exception as e:  # noqa: BLE001 - the client sent texts this encoder cannot take
                raise OcrrError(f"the encoder failed on these texts ({e}); send plain text or vectors") from e


def _check_encoder_fits(config: ServiceConfig, encoder, dim: int | None, held: str | None = None) -> None:
    """Refuse, naming both widths and the fix, an encoder whose vectors are not as wide as the
    ledger's (``dim``; None: an empty ledger, which takes any): every text request would be a 400.
    ``held``: what holds those vectors, if not the ledger (a dataset to seed it from)."""
    width = getattr(encoder, "dim", None)
    if dim is None or width is None or width == dim:
        return
    named = f"--encoder {config.encoder}" if config.encoder is not None else "the encoder"
    if held is not None:
        raise SettingsError(
            f"{named} makes vectors of dimension {width}, but {held} carries vectors of dimension {dim}, so "
            "no text request could be answered from it; drop the encoder (the service then takes vectors), "
            "or seed with a dataset of texts"
        )
    raise SettingsError(
        f"{named} makes vectors of dimension {width}, but ledger {display(config.ledger)} holds vectors of "
        f"dimension {dim}, so every text request would be refused; serve it with the encoder its vectors "
        "were made with (or without --encoder, taking vectors), or serve another ledger with this encoder"
    )


def _seed_from_dataset(sub: PersistentSubstrate, config: ServiceConfig, encoder, log) -> None:
    assert config.fit is not None  # (called for --fit)
    name = config.fit
    dataset = load_dataset(name, data_dir=config.data_dir)
    train = dataset.train
    if train.vecs is not None:
        vecs = train.vecs
        if encoder is not None:  # before anything is stored: the ledger would hold them for good
            _check_encoder_fits(config, encoder, int(np.shape(vecs)[1]), held=f"--fit {name}")
    elif encoder is None:
        raise OcrrError(f"--fit {name} needs an encoder for its texts; add --encoder minilm")
    else:
        vecs = l2_normalise(_train_vectors(dataset, encoder, log))
    sub.correct(vecs, list(train.labels), list(train.texts) if train.texts is not None else None)
    log(f"seeded the ledger with {len(train)} {name} train items ({len(set(train.labels))} labels)")


def _train_vectors(dataset: Dataset, encoder, log: Callable[[str], None]) -> np.ndarray:
    """The train texts' vectors as this service's encoder makes them: from the embedding cache
    file a previous start wrote under the encoder's id, else encoded now and cached there. Not
    from ``ocrr run``'s file: a run encodes with every thread the machine gives it, the service's
    encoder with one, and the last bits of the vectors differ, so the seeded ledger (its root)
    would depend on whether a run came first."""
    assert dataset.train.texts is not None  # a split without vectors has texts (Split)
    texts = list(dataset.train.texts)
    encoder_id = getattr(encoder, "encoder_id", None)
    if not isinstance(encoder_id, str):  # an encoder without an id has no cache key
        log(f"encoding {len(texts)} {dataset.name} train texts…")
        return np.asarray(encoder.encode(texts), np.float32)
    path = cache_path(encoder_id, texts_sha256(texts))
    cached = load_cached(path, len(texts))
    if cached is not None:
        log(f"{len(texts)} {dataset.name} train texts: vectors from the embedding cache ({encoder_id})")
        return cached
    log(f"encoding {len(texts)} {dataset.name} train texts…")
    vecs = np.asarray(encoder.encode(texts), np.float32)
    try:
        save_cached(path, vecs)
    except OSError as e:  # a read-only cache costs the next start the encoding, nothing else
        log(f"could not cache the train vectors ({e}); the next start encodes them again")
    return vecs


def _as_recorded(report: dict) -> dict:
    """A damage report read from the ledger's storage, in the shape this service states one:
    an entry number or none, and a reason of bounded length, said to come from storage
    (another worker wrote it there, or whoever can write the storage did)."""
    first_bad, reason = report.get("first_bad"), report.get("reason")
    return {
        "ok": False,
        "size": report.get("size") if type(report.get("size")) is int else None,
        "first_bad": first_bad if type(first_bad) is int else None,
        "reason": f"recorded in the ledger's storage: {str(reason)[:_REASON_SHOWN]}",
    }
