"""The erasure ledger: append-only, hash-chained, and free of personal data.

Keys, subjects and tenants enter it only as keyed hashes (HMAC-SHA256 under a per-store
secret), so the ledger can be handed to an auditor without handing over whose data it was.
Each entry's hash covers the previous entry's hash, so a removed, reordered or altered
entry breaks the chain at a place :func:`verify_chain` names.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from ..origin.ledger import ChainCheck, verify_chain

__all__ = ["SECRET_KEY", "ChainCheck", "Hasher", "verify_chain"]

SECRET_KEY = "ledger.secret"


class Hasher:
    """Keyed hashes of identifying values, stable for one store."""

    def __init__(self, secret: bytes):
        self._secret = secret

    @staticmethod
    def new_secret() -> str:
        return secrets.token_hex(32)

    def __call__(self, *parts: str) -> str:
        msg = "\x1f".join(parts).encode("utf-8")
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()[:32]
