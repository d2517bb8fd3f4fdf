"""ocrr: the Online Correction Recovery benchmark and library."""

from ocrr.utils import moved as _moved

__version__ = "0.1.0"

_moved.install()  # old module paths (ocrr.experiment, ...) name their new home


def __getattr__(name: str):
    # ocrr.open_substrate without importing the systems (and torch) on `import ocrr`.
    if name == "open_substrate":
        from ocrr.systems.substrate.persistent import open_substrate

        return open_substrate
    raise AttributeError(f"module 'ocrr' has no attribute {name!r}")
