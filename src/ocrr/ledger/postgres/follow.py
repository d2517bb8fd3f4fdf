"""A replica follows the log: a thread that takes in what other processes commit.

PostgreSQL's NOTIFY (sent by the insert trigger, payload the ledger's schema) is only a
wake-up: notifications are lost while a connection is down. So the follower re-reads from
the last entry it holds (``PostgresLedger.pull``) on every notification, at least every
``every`` seconds, and after each reconnect (``PostgresLedger.follow`` starts one); a
replica that fell behind catches up the same way. Entries that do not chain on (history
rewritten in the database) stop it and are passed to ``on_error`` (the service then fails
closed). ``on_tick`` runs after every look (the service looks there for damage other
replicas recorded, off its request path).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ocrr.errors import OcrrError
from ocrr.ledger.postgres.schema import CHANNEL
from ocrr.ledger.postgres.url import connect

__all__ = ["Followed", "Follower"]


class Followed(Protocol):
    """What a follower uses of the ledger it keeps current (a ``PostgresLedger``)."""

    url: str
    schema: str
    follower: Any

    @property
    def broken(self) -> BaseException | None: ...

    def pull(self) -> int: ...


class Follower:
    """Keeps ``ledger`` current; counts ``wakeups`` (notifications for this ledger),
    ``polls`` (timer look-ups), ``reconnects``; ``error``: the last database error (None once
    it is back); ``damage``: the OcrrError that stopped it."""

    def __init__(
        self,
        ledger: Followed,
        every: float = 1.0,
        on_error: Callable[[OcrrError], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ):
        if isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every <= 3600:
            raise OcrrError(f"the follow interval must be seconds in (0, 3600], got {every!r}")
        self.ledger, self.every, self.on_error, self.on_tick = ledger, float(every), on_error, on_tick
        self._stop = threading.Event()
        self._token = f"stop-{secrets.token_hex(8)}"  # the payload that wakes this follower to stop
        self.wakeups = self.polls = self.reconnects = 0
        self.error: str | None = None
        self.listening = threading.Event()  # set while LISTENing, after catching up
        self.damage: OcrrError | None = None
        self._thread = threading.Thread(target=self._run, name="ocrr-ledger-follower", daemon=True)
        ledger.follower = self

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and wait for the thread (woken by a notification of its own, or its timer)."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            conn = connect(self.ledger.url)
            try:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self._token))
            finally:
                conn.close()
        except OcrrError:
            pass  # the database is down: the timer ends the wait
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.every + 5)

    def _run(self) -> None:
        schema, backoff = self.ledger.schema, 0.05
        while not self._stop.is_set():
            try:
                conn = connect(self.ledger.url)
            except OcrrError as e:
                self.error = str(e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.every)
                continue
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                self._catch_up()  # what was committed while no one listened
                self.error, backoff = None, 0.05
                self.listening.set()
                while not self._stop.is_set():
                    woken = False
                    for note in conn.notifies(timeout=self.every):
                        if note.payload in (schema, self._token):
                            woken = note.payload == schema
                            break
                    if self._stop.is_set():
                        break
                    if woken:
                        self.wakeups += 1
                    else:
                        self.polls += 1
                    self._catch_up()
            except OcrrError as e:
                if self.ledger.broken is not None or self._stop.is_set():  # damage: stop following
                    self._stopped_by(e)
                    return
                self.error = str(e)
            except Exception as e:  # noqa: BLE001 - the connection broke (server restarted): reconnect
                self.error = f"the listening connection broke ({e})"
            finally:
                self.listening.clear()
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a dead connection
                    pass
            if not self._stop.is_set():
                self.reconnects += 1
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.every)

    def _catch_up(self) -> None:
        """Take in what is new (an OcrrError: damage, or the database unreachable, which the
        caller tells apart), then run ``on_tick`` (the service looks for damage others found)."""
        self.ledger.pull()
        if self.on_tick is not None:
            self.on_tick()

    def _stopped_by(self, e: OcrrError) -> None:
        if self.ledger.broken is not None:
            self.damage = e
            if self.on_error is not None:
                self.on_error(e)
