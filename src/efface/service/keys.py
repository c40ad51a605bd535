"""API keys, each bound to exactly one tenant, kept only as hashes.

A key looks like ``efk_<id>_<secret>``: ``id`` (12 hex digits) names the key in listings and
revocations and is not secret; ``secret`` is 32 random bytes. The key ring keeps the SHA-256 of
the whole key (a key has 256 bits of entropy, so a plain digest cannot be reversed by guessing),
never the key itself: it is shown once, by ``create``.

Every key ring does what :class:`Ring` declares; the server (:mod:`.http`, :mod:`.mcp`) and
the CLI use nothing else, so a store's ring is chosen once, where the store is:

* :class:`KeyRing`, an embedded store's: its own SQLite file (``DIR.keys.db`` beside the store
  directory by default), so ``efface keys create|list|revoke`` works while a server holds the
  store open, and a server sees a revocation on the next request. The tenant name is kept here
  because the server needs it to act for the key; revoking a key deletes its row
  (``secure_delete``), tenant name included.
* :class:`efface.service.pgkeys.PgKeyRing`, a PostgreSQL store's: the store's database, so
  every server of the store sees a key created or revoked anywhere from its next request.

What a key looks like, what is checked at creation and how a presented key is parsed are
here, shared by both (:func:`checked`, :func:`new_token`, :func:`key_id_of`, :func:`parse`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import apsw

from .. import validate as v
from ..errors import EffaceError, InvalidInput, NotFound

PREFIX = "efk_"
_KEY = re.compile(r"^efk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})\Z")
_ID = re.compile(r"^[0-9a-f]{12}\Z")
KEYS_FILE = "keys.db"
BUSY_TIMEOUT_MS = 15_000
"""How long a call waits for another process (another ``efface keys``, a server) to finish
its write to the ring before it gives up with :class:`KeyRingBusy`. A write is one short
transaction, so a wait this long means something holds the file locked."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    label TEXT,
    created_at REAL NOT NULL
);
"""


class KeyRingDamaged(EffaceError):
    """The key ring file cannot be read: restore it or create new keys in a new file."""


class KeyRingBusy(EffaceError):
    """Another process kept the key ring locked longer than :data:`BUSY_TIMEOUT_MS`: nothing
    was changed; try again (the ring itself is fine)."""


_BUSY = (
    f"the key ring is busy: another process kept it locked for {BUSY_TIMEOUT_MS // 1000} s; nothing was "
    "changed, try again"
)


@contextmanager
def _unless_busy() -> Iterator[None]:
    """A lock held past the busy timeout becomes :class:`KeyRingBusy`, never a raw SQLite error
    (nor :class:`KeyRingDamaged`: a busy file is not a damaged one)."""
    try:
        yield
    except (apsw.BusyError, apsw.LockedError):
        raise KeyRingBusy(_BUSY) from None


@dataclass(frozen=True)
class ApiKey:
    """One key as listed: never its secret."""

    id: str
    """The key's public identifier (the 12 hex digits after ``efk_``)."""
    tenant: str
    """The one tenant the key acts for."""
    label: str | None
    """A free note given at creation (who or what holds the key)."""
    created_at: float
    """Seconds since the epoch."""


def key_path(store_dir: str | os.PathLike) -> str:
    """Where a store's key ring lives by default: ``DIR.keys.db`` beside the store's directory,
    not inside it. The ring names tenants, and ``verify`` scans every file of the store for an
    erased tenant's or subject's bytes: a ring inside would read as residue."""
    path = os.path.abspath(os.path.expanduser(os.fspath(store_dir))).rstrip(os.sep)
    return f"{path}.{KEYS_FILE}"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


digest = _digest
"""The SHA-256 of a whole key: what a ring keeps instead of the key."""


def checked(tenant: object, label: object) -> tuple[str, str | None]:
    """``tenant`` and ``label`` as a ring takes them for a new key, or :class:`InvalidInput`."""
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidInput("tenant must be a non-empty string")
    v.name(tenant, "tenant")  # as the store takes it: a key for a tenant it refuses is no use
    if label is not None and (not isinstance(label, str) or len(label) > 200):
        raise InvalidInput("label must be a string of at most 200 characters")
    if label is not None:
        v.reason(label, "label", blank=True)
    return tenant, label


def new_token() -> tuple[str, str]:
    """A fresh key and its id: ``(id, "efk_<id>_<secret>")``."""
    kid = secrets.token_hex(6)
    return kid, f"{PREFIX}{kid}_{secrets.token_urlsafe(32)}"


def key_id_of(key_id: object) -> str:
    """The id named by ``key_id`` (an id, or a whole key), or :class:`InvalidInput`."""
    m = _KEY.match(key_id) if isinstance(key_id, str) else None
    kid = m.group(1) if m else key_id
    if not isinstance(kid, str) or not _ID.match(kid):
        raise InvalidInput("give a key id (12 hex digits, as `efface keys list` shows it) or the key itself")
    return kid


def parse(token: object) -> str | None:
    """The id of a well-formed presented key, else None."""
    if not isinstance(token, str):
        return None
    m = _KEY.match(token)
    return None if m is None else m.group(1)


def matches(stored: bytes, token: str) -> bool:
    """Whether ``token`` is the key whose digest is ``stored`` (in constant time)."""
    return hmac.compare_digest(stored, _digest(token))


class Ring(Protocol):
    """What a key ring does; the server and the CLI use nothing else. Every call is one
    transaction of the ring's storage, and a key created or revoked through one ring object
    is honoured or refused by every other over the same storage from its next call."""

    remote: bool
    """True when :meth:`resolve` makes a network round trip (the server calls it off its
    event loop then); False for a local file."""

    def create(self, tenant: str, *, label: str | None = None) -> tuple[str, ApiKey]:
        """A new key for ``tenant``: returns the key (shown only now) and its listing."""
        ...

    def list(self, *, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or one tenant's), oldest first."""
        ...

    def revoke(self, key_id: str) -> ApiKey:
        """Delete a key by its id (or by the whole key): it stops working at once."""
        ...

    def resolve(self, token: str | None) -> str | None:
        """The tenant a presented key acts for, or None (malformed, unknown or revoked)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Ring: ...

    def __exit__(self, *exc: object) -> None: ...


class KeyRing:
    """An embedded store's :class:`Ring`: create, list, revoke and resolve API keys in a
    SQLite file. Thread-safe; every call is one transaction."""

    remote = False

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        try:
            self._db = apsw.Connection(self.path)
            # Before anything touches the file: two `efface keys create` at once (or one beside
            # a server) take turns instead of failing on the other's lock. Making a new ring WAL
            # and creating its table both take that lock.
            self._db.setbusytimeout(BUSY_TIMEOUT_MS)
            self._db.execute("PRAGMA secure_delete=ON")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
        except (apsw.BusyError, apsw.LockedError):
            self._db.close()  # opening never locks: only the statements after it can be busy
            raise KeyRingBusy(_BUSY) from None
        except apsw.Error as e:
            raise KeyRingDamaged(
                f"the key ring cannot be opened ({type(e).__name__}): restore it from a copy, "
                "or move it away and create new keys"
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> KeyRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self, tenant: str, *, label: str | None = None) -> tuple[str, ApiKey]:
        """A new key for ``tenant``: returns the key (shown only now) and its listing."""
        tenant, label = checked(tenant, label)
        kid, token = new_token()
        now = time.time()
        with self._lock, _unless_busy():
            self._db.execute(
                "INSERT INTO api_keys(id, digest, tenant, label, created_at) VALUES (?,?,?,?,?)",
                (kid, _digest(token), tenant, label, now),
            )
        return token, ApiKey(kid, tenant, label, now)

    def list(self, *, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or one tenant's), oldest first."""
        sql = "SELECT id, tenant, label, created_at FROM api_keys"
        args: tuple = ()
        if tenant is not None:
            v.name(tenant, "tenant")
            sql += " WHERE tenant = ?"
            args = (tenant,)
        with self._lock, _unless_busy():
            rows = list(self._db.execute(sql + " ORDER BY created_at, id", args))
        return [ApiKey(*row) for row in rows]

    def revoke(self, key_id: str) -> ApiKey:
        """Delete a key by its id (or by the whole key): it stops working at once."""
        kid = key_id_of(key_id)
        with self._lock, _unless_busy():
            row = next(
                iter(self._db.execute("SELECT id, tenant, label, created_at FROM api_keys WHERE id=?", (kid,))), None
            )
            if row is None:
                raise NotFound("no such key id: see `efface keys list`")
            self._db.execute("DELETE FROM api_keys WHERE id=?", (kid,))
            # secure_delete zeroed the row in its page; the WAL still holds the page as it was
            # (the tenant name with it) until a checkpoint: copy it back and empty the WAL now.
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return ApiKey(*row)

    def resolve(self, token: str | None) -> str | None:
        """The tenant a presented key acts for, or None (malformed, unknown or revoked)."""
        kid = parse(token)
        if kid is None or token is None:
            return None
        with self._lock, _unless_busy():
            row = next(iter(self._db.execute("SELECT digest, tenant FROM api_keys WHERE id=?", (kid,))), None)
        if row is None or not matches(row[0], token):
            return None
        return row[1]
