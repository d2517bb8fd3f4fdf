"""The scale study: the substrate from 10k to 10M entries (exact and approximate search)."""
