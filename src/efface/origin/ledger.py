"""The ledger's hash-chain rule: every origin writes it, every auditor replays it."""

from __future__ import annotations

import hashlib
import json

GENESIS = "0" * 64
"""The ``prev`` of the first entry."""


def chain_hash(prev: str, seq: int, at: float, kind: str, handle: str | None, body: str) -> str:
    """The ledger's link: sha256 over the previous hash and this entry's canonical fields."""
    payload = json.dumps([prev, seq, repr(at), kind, handle, body], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
