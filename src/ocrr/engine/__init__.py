"""The experiment engine: the runner, one experiment cell, sweeps, and the tidy results they write."""
