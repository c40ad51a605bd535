"""Sealing the origin's content with per-subject data keys, in this process (docs/concepts.md §9).

What is sealed, with which key, bound (AES-GCM associated data) to where it is stored:

=====================  ==============================  =====================================
value                  key                             bound to
=====================  ==============================  =====================================
record text, metadata  the data key of the subject     ``records.<column>|tenant|key``
and sources            whose write stored it
                       (``records.sealed_by``)
a stated reason        the record's key at the time    ``reasons|record id|reason hash``
subject identifiers    the subject's data key          ``subjects|tenant|subject``
tenant name, policy    the tenant's own key (a data    ``tenants|tenant``, ``policies|tenant``
reason                 key of subject ``''``)
a record's key         the record's (``sealed_by``)    ``records.key|tenant``
a subject's name       the subject's data key          ``data_keys.name|tenant|name hash``
=====================  ==============================  =====================================

Subject names and record keys are looked up by keyed hashes, never in clear (:mod:`.names`).

When a subject's key is destroyed while values it sealed still live (a record another
subject still claims, a registration kept), the origin seals them again under a live key
first (:meth:`efface.origin.postgres.tx.PostgresTx.destroy_subject_keys`).

Unwrapped data keys are cached in this process by kid (one unwrap per key, not per value);
a key destroyed by this process leaves the cache at once, and the cache is emptied whenever
the change log shows another process erased something (:meth:`Sealer.forget_all`).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...errors import StoreDamaged
from .keys import KID_LEN, NONCE_LEN, SEAL_VERSION, Keys

if TYPE_CHECKING:
    import psycopg

TENANT_SUBJECT = ""
"""The subject a tenant's own key is filed under (no subject has an empty name)."""


def kid_of(sealed: bytes) -> bytes:
    """The kid a sealed value names."""
    return bytes(sealed[1 : 1 + KID_LEN])


class Sealer:
    """Seals and opens values with data keys, caching the unwrapped keys."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self._cache: dict[bytes, AESGCM] = {}
        self._mu = threading.Lock()

    def _aead(self, conn: psycopg.Connection, kid: bytes) -> AESGCM:
        aead = self._cache.get(kid)
        if aead is None:
            aead = AESGCM(self.keys.data_key(conn, kid))
            with self._mu:
                self._cache[kid] = aead
        return aead

    def hold(self, kid: bytes, unwrap: Callable[[], bytes]) -> None:
        """Cache the data key ``kid`` from ``unwrap()`` unless it is cached already (keys read
        with the rows they open, as a snapshot's closing read does)."""
        if kid not in self._cache:
            aead = AESGCM(unwrap())
            with self._mu:
                self._cache[kid] = aead

    def seal(self, conn: psycopg.Connection, kid: bytes, value: str, aad: str) -> bytes:
        nonce = secrets.token_bytes(NONCE_LEN)
        body = self._aead(conn, kid).encrypt(nonce, value.encode("utf-8"), aad.encode("utf-8"))
        return SEAL_VERSION + kid + nonce + body

    def open(self, conn: psycopg.Connection, sealed: bytes | memoryview, aad: str) -> str:
        """The value; :class:`.errors.DataKeyDestroyed` once its key is gone,
        :class:`efface.errors.StoreDamaged` if it was altered or moved."""
        sealed = bytes(sealed)
        if sealed[:1] != SEAL_VERSION or len(sealed) < 1 + KID_LEN + NONCE_LEN + 16:
            raise StoreDamaged("a sealed value is malformed")
        head = 1 + KID_LEN
        try:
            plain = self._aead(conn, sealed[1:head]).decrypt(
                sealed[head : head + NONCE_LEN], sealed[head + NONCE_LEN :], aad.encode("utf-8")
            )
        except InvalidTag:
            raise StoreDamaged("a sealed value fails authentication (altered, or moved from another row)") from None
        return plain.decode("utf-8")

    def subject_h(self, tenant: str, subject: str) -> str:
        """What stands for ``subject`` of ``tenant`` in the database (:mod:`.names`)."""
        return self.keys.name_h("subject", tenant, subject)

    def key_h(self, tenant: str, key: str) -> str:
        """What stands for the record key ``key`` of ``tenant`` in the database (:mod:`.names`)."""
        return self.keys.name_h("key", tenant, key)

    def forget(self, kid: bytes) -> None:
        with self._mu:
            self._cache.pop(kid, None)

    def forget_all(self) -> None:
        with self._mu:
            self._cache.clear()
