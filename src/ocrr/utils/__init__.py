"""Small helpers every layer may use: atomic files, cache paths, thread pinning, a reader-writer lock."""
