"""Keyed hashes standing in for personal values (keys, subjects, tenants, paths).

One encoding for every keyed hash the store and the gate make: each part is written as its
UTF-8 length in 8 bytes big-endian, then its bytes (docs/concepts.md §8). A separator would not do:
the parts are caller-chosen strings that may contain it, so tenant ``a\\x1fb`` with key ``c``
would hash like tenant ``a`` with key ``b\\x1fc``, and a restore could skip a record never
erased, or the ledger conflate two records. With lengths in front no two different tuples
of parts share an encoding.
"""

from __future__ import annotations

import hmac

__all__ = ["encode", "keyed_hash"]


def encode(*parts: str) -> bytes:
    """The unambiguous encoding of ``parts``: for each, 8 bytes of length, then the bytes."""
    out = bytearray()
    for part in parts:
        raw = part.encode("utf-8")
        out += len(raw).to_bytes(8, "big")
        out += raw
    return bytes(out)


def keyed_hash(secret: bytes, *parts: str) -> str:
    """HMAC-SHA256 of :func:`encode` (``parts``) under ``secret``, as 32 hex digits."""
    return hmac.digest(secret, encode(*parts), "sha256").hex()[:32]
