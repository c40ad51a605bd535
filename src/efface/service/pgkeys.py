"""A PostgreSQL store's API keys, in the store's own database: :class:`PgKeyRing`.

The same :class:`~efface.service.keys.Ring` as an embedded store's key ring (same keys, same
checks, same listing), kept in the ``api_keys`` table of the store's schema, so every efface
server of the store sees a key created or revoked by any other server or by
``efface keys --origin URL`` **from its next request**: :meth:`PgKeyRing.resolve` reads the
key's row on every request (one indexed read on a pooled connection; nothing is cached, so
there is no invalidation to miss).

What a row holds:

* ``id``: the key's public id; ``secret_h``: the SHA-256 of the whole key (hex), never the key;
* ``tenant``: the tenant's id (the store's keyed hash of its name, as in every other table),
  so ``efface keys list --tenant T`` is one indexed read;
* ``sealed``: the tenant's name and the key's label, sealed (AES-256-GCM, in this process)
  with a data key of the key's own (``data_keys`` row of tenant ``''`` and subject hash
  ``api-key:<id>``), wrapped by the store's key-encryption key like every data key. The server
  needs the tenant's name to act for the key, and the database never holds it in clear.

Revoking a key deletes its row and destroys its data key in one transaction (noted in
``destroyed_keys``): the sealed name left in heap pages or WAL becomes useless at the next
key-encryption-key rotation, as a subject's content does. Forgetting a tenant leaves its keys
working, as on an embedded store (revoke them to stop them).

The ring opens an existing store only: its schema, its KEK and its keyed-hash secret (both in
the KEK file) are made when the store is first opened (``efface serve --origin URL`` or
``efface.open(URL)``); before that, :class:`~efface.errors.NotFound` says so.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..erasure.ledger import SECRET_KEY, Hasher
from ..errors import NotFound, OriginUnreachable
from ..on_postgres import check_url
from ..origin.postgres import schema as pg_schema
from ..origin.postgres.errors import DataKeyDestroyed
from ..origin.postgres.hashsecret import SECRET_ID_META
from ..origin.postgres.keys import Keys
from .keys import ApiKey, checked, digest, key_id_of, matches, new_token, parse

RING_TENANT = ""
"""The ``data_keys.tenant`` of API keys' data keys: no tenant's (a tenant's id is a 32-digit
hash), so forgetting a tenant never touches them and no listing of subjects' keys shows them."""


def _subject(kid: str) -> str:
    return f"api-key:{kid}"


def _aad(kid: str) -> bytes:
    return f"api_keys|{kid}".encode()


def redact(url: str) -> str:
    """``url`` with its password (in the URL or as ``password=``) replaced by ``***``, for messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(url)
    except Exception:
        return "(a PostgreSQL URL)"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


class PgKeyRing:
    """A PostgreSQL store's :class:`~efface.service.keys.Ring` (see the module docstring).
    Thread-safe: each call takes a connection from a small pool, and is one transaction."""

    remote = True

    def __init__(
        self,
        url: str,
        *,
        kek_file: str | os.PathLike[str] | None = None,
        schema: str = pg_schema.DEFAULT_SCHEMA,
        pool_size: int = 4,
    ) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        check_url(url)
        self._s = pg_schema.check_name(schema)
        self._keys = Keys(kek_file, schema=self._s)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                if pg_schema.schema_version(conn, self._s) is None:
                    raise NotFound(
                        "this database holds no efface store yet: open it once first (efface serve --origin URL), "
                        "then manage its keys"
                    )
                pg_schema.migrate(conn, dim=self._dim(conn), schema=self._s)  # a newer efface's columns
                opened = conn.execute(
                    f"SELECT 1 FROM {self._s}.meta WHERE k = ANY(%s)", ([SECRET_KEY, SECRET_ID_META],)
                ).fetchone()
                if opened is None:
                    raise NotFound(
                        "this database's efface store was never opened: open it once first "
                        "(efface serve --origin URL), then manage its keys"
                    )
                # KeyFileMissing / KeyFileMismatch: never a new key or hash secret for a store
                self._keys.open(conn)
            self._hash = Hasher(self._keys.hash_secret())
            self._pool = ConnectionPool(
                url, min_size=1, max_size=pool_size, kwargs={"autocommit": True}, open=True, timeout=30
            )
        except psycopg.Error as e:
            raise OriginUnreachable(
                f"the PostgreSQL database of the key ring could not be used ({type(e).__name__}): check the URL's "
                "host, port, database and credentials, and that the server runs, then try again"
            ) from None

    def _dim(self, conn: Any) -> int:
        row = conn.execute(f"SELECT v FROM {self._s}.meta WHERE k = 'embedding_dim'").fetchone()
        if row is None:
            raise NotFound("this database's efface store has no embedding dimension recorded: open it once first")
        return int(row[0])

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, PoolTimeout) as e:
            raise OriginUnreachable(
                f"the key ring's PostgreSQL database could not be reached ({type(e).__name__}); try again"
            ) from None

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PgKeyRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tenant_id(self, tenant: str) -> str:
        return self._hash("tenant", tenant)

    def create(self, tenant: str, *, label: str | None = None) -> tuple[str, ApiKey]:
        """A new key for ``tenant``: returns the key (shown only now) and its listing."""
        tenant, label = checked(tenant, label)
        kid, token = new_token()
        now = time.time()
        body = json.dumps({"tenant": tenant, "label": label}).encode()
        with self._conn() as conn, conn.transaction():
            dek = self._keys.ensure(conn, RING_TENANT, _subject(kid), now)
            conn.execute(
                f"INSERT INTO {self._s}.api_keys(id, tenant, secret_h, created_at, sealed) VALUES (%s,%s,%s,%s,%s)",
                (kid, self._tenant_id(tenant), digest(token).hex(), now, self._keys.seal(conn, dek, body, _aad(kid))),
            )
        return token, ApiKey(kid, tenant, label, now)

    def _listing(self, conn: Any, kid: str, sealed: bytes, created_at: float) -> ApiKey:
        doc = json.loads(self._keys.open_sealed(conn, bytes(sealed), _aad(kid)))
        return ApiKey(kid, doc["tenant"], doc["label"], float(created_at))

    def list(self, *, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or one tenant's), oldest first."""
        sql = f"SELECT id, sealed, created_at FROM {self._s}.api_keys WHERE revoked_at IS NULL"
        args: tuple = ()
        if tenant is not None:
            checked(tenant, None)
            sql += " AND tenant = %s"
            args = (self._tenant_id(tenant),)
        with self._conn() as conn, conn.transaction():
            rows = conn.execute(sql + " ORDER BY created_at, id", args).fetchall()
            return [self._listing(conn, kid, sealed, at) for kid, sealed, at in rows]

    def revoke(self, key_id: str) -> ApiKey:
        """Delete a key by its id (or by the whole key), and destroy its data key: it stops
        working on every server from its next request."""
        kid = key_id_of(key_id)
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                f"SELECT sealed, created_at FROM {self._s}.api_keys WHERE id = %s FOR UPDATE", (kid,)
            ).fetchone()
            if row is None:
                raise NotFound("no such key id: see `efface keys list`")
            listed = self._listing(conn, kid, row[0], row[1])
            conn.execute(f"DELETE FROM {self._s}.api_keys WHERE id = %s", (kid,))
            self._keys.destroy(conn, RING_TENANT, _subject(kid), time.time())
        return listed

    def resolve(self, token: str | None) -> str | None:
        """The tenant a presented key acts for, or None (malformed, unknown or revoked): read
        from the database on every call, so a revocation anywhere counts from the next one."""
        kid = parse(token)
        if kid is None or token is None:
            return None
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT secret_h, sealed FROM {self._s}.api_keys WHERE id = %s AND revoked_at IS NULL", (kid,)
            ).fetchone()
            if row is None or not matches(bytes.fromhex(row[0]), token):
                return None
            try:
                doc = json.loads(self._keys.open_sealed(conn, bytes(row[1]), _aad(kid)))
            except DataKeyDestroyed:  # revoked between the two reads
                return None
        return str(doc["tenant"])
