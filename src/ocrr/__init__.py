"""ocrr: the Online Correction Recovery benchmark and library."""

__version__ = "0.1.0"
