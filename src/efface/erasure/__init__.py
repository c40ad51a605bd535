"""Erasure machinery: keyed hashing and the hash-chained ledger, the compactor."""
