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
