"""Replay: the storage policies every replay method shares (``buffers``), CMR's replay family and EvalOCL's methods."""
