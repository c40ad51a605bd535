"""The erasure ledger: append-only, hash-chained, and free of personal data.

Keys, subjects and tenants enter it only as keyed hashes (HMAC-SHA256 under a per-store
secret, parts length-prefixed by :mod:`efface.keyed_hash` so no two tuples share one), so
the ledger can be handed to an auditor without handing over whose data it was. A tenant
appears as its id, the keyed hash of its name, which is also the ``tenant`` of every origin
row (see :class:`efface.store.Store`).

Each entry's hash covers the previous entry's hash, so a removed, reordered or altered
entry breaks the chain at a place :func:`verify_chain` names.
"""

from __future__ import annotations

import secrets

from ..keyed_hash import keyed_hash
from ..origin.ledger import SECRET_META, ChainCheck, verify_chain

__all__ = ["SECRET_KEY", "ChainCheck", "Hasher", "verify_chain"]

SECRET_KEY = SECRET_META


class Hasher:
    """Keyed hashes of identifying values, stable for one store."""

    def __init__(self, secret: bytes):
        self._secret = secret

    @staticmethod
    def new_secret() -> str:
        return secrets.token_hex(32)

    def __call__(self, *parts: str) -> str:
        """The keyed hash of ``parts``, length-prefixed (see :mod:`efface.keyed_hash`)."""
        return keyed_hash(self._secret, *parts)
