"""The one error type users see: a short message that names the fix."""


class OcrrError(Exception):
    """An error the user can cause and fix.

    The CLI prints ``str(error)`` and exits with status 2, never a traceback.
    Messages end with what to do about it.
    """


class NotFittedError(OcrrError):
    """A system was asked to predict, correct or report before ``fit`` gave it a seed state.

    Raised by ``ocrr.systems.base.System._require_fitted``, whose message names the fix
    (call ``fit(seed_batch)`` first).
    """


class LedgerIntegrityError(OcrrError):
    """What storage holds does not match what the ledger holds or signed (rows edited,
    removed or inserted, a rewound or forked copy, a second writer): the ledger fails closed.

    Not the client's fault: the service answers 503 with the reason and stays read-only until
    an operator restores the storage (docs/ledger.md, "When the service fails closed").
    ``first_bad`` is the first entry that does not match, when known.
    """

    def __init__(self, reason: str, first_bad: int | None = None):
        super().__init__(reason)
        self.reason, self.first_bad = reason, first_bad


class LedgerStorageError(OcrrError):
    """Storage could not be read or written (disk full, permissions, a database out of reach):
    nothing was lost or half-written, and the server answers 5xx, never 4xx."""


class SettingsError(OcrrError):
    """Settings that cannot work together, found only once a process has loaded what they
    name (an encoder whose vectors are not as wide as the ledger's): the same settings give the
    same error on every try, so a service's supervisor stops at once instead of restarting the
    worker that found it."""
