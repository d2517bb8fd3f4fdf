"""Hybrids: a ledger memory beside a trained head (kNN-LM, MbPA++, the consolidating memory)."""
