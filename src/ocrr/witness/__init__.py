"""``ocrr witness``: a C2SP tlog-witness (c2sp.org/tlog-witness) for ocrr ledgers and any other
log publishing C2SP checkpoints.

For each log it is configured with (origin and verifier key), the witness remembers the
latest checkpoint it cosigned, and cosigns a new one only if the log signed it and a
consistency proof shows it extends the remembered one; it answers only once the new
checkpoint is on disk. So it never cosigns two checkpoints of one log that disagree, even
across restarts and kills, and it keeps the log-signed evidence of any disagreement it refused.

Modules: ``request`` (the add-checkpoint body, strictly parsed and bounded), ``state`` (the
durable, single-writer record of what it cosigned, and the protocol's checks), ``app`` (the
HTTP interface), ``config`` and ``server`` (running it).
"""
