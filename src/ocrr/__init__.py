"""ocrr: the Online Correction Recovery benchmark and library."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ocrr.open_substrate without importing the systems (and torch) on `import ocrr`.
    if name == "open_substrate":
        from ocrr.systems.persistent import open_substrate

        return open_substrate
    raise AttributeError(f"module 'ocrr' has no attribute {name!r}")
