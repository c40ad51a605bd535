"""The store's hash secret on PostgreSQL: in the operator's KEK file, never in the database
(issue #34 item 3; schema migration 7).

Every keyed hash a store makes is made with one secret (:class:`efface.erasure.ledger.Hasher`,
:func:`efface.keyed_hash.keyed_hash`): the tenant ids every row carries, the subject hashes of
the ledger, receipts and ``data_keys.subject_h``, the keyed hashes of backups' exposure, the
fingerprints of the erasure evidence and the word index's token keys. Beside the hashes, the
secret is a dictionary away from what they stand for: whoever holds both can hash a guessed
tenant or subject name and look for it. So on PostgreSQL it lives where the name key
(:mod:`.names`) and the KEK do, in the KEK file (:mod:`.kekfile`), and the database keeps
only its check value (``meta`` :data:`SECRET_ID_META`, an HMAC under the secret of a fixed
label: it tells the right file from a wrong one and says nothing of the secret).

**Moving an older database's.** Before migration 7 the secret was the ``meta`` row
:data:`efface.origin.ledger.SECRET_META`, in hex. :func:`open_hash_secret` moves it, under the
KEK file's advisory lock (:data:`.keys.KEYS_LOCK`: one process at a time, each re-reading both
sides once it holds the lock): **the file first** (the same value: every hash, the ledger's
chain and every receipt stay valid), **then the database**, in one transaction with an epoch
of its own (kind :data:`MOVED_KIND`) that records the check value and deletes the row. A
crash between the two leaves the row and a file holding the same value: the next open finds
them equal and finishes the move. The epoch owes a maintenance run
(:mod:`.maintenance`), which then rewrites ``meta`` too (``VACUUM FULL``), checkpoints and
switches the WAL past its retention, so the row's old bytes leave ``base/`` and ``pg_wal/``
(where the server's data directory is readable, tests scan them: tests/postgres/test_secret.py).
``ANALYZE`` may have sampled the row into ``pg_statistic`` before migration 7 (which stops it):
the move drops ``meta.v``'s statistics and the maintenance rewrites that catalog too, which
needs superuser or ``MAINTAIN`` on it (PostgreSQL 17+: the ``pg_maintain`` role); without
either, its report says so.
What replicas, archived WAL and backups taken before keep of the row is out of efface's reach.

**A file without it** for a database that names one (a copy from before the move, another
store's file) is :class:`.errors.KeyFileMismatch`, never a new secret: a new one would make
every tenant id, subject hash and fingerprint the store holds unfindable.
"""

from __future__ import annotations

import secrets
import time
import warnings
from typing import TYPE_CHECKING

from ..ledger import SECRET_META
from . import epochs
from .errors import KeyFileCreated, KeyFileMismatch
from .kekfile import KekFile, hash_secret_id

if TYPE_CHECKING:
    import psycopg

SECRET_ID_META = "hash_secret_id"
"""Meta key: the check value of the store's hash secret (never the secret)."""
MOVED_KIND = "secret.moved"
"""The ``mutations.kind`` of the epoch that moved an older database's secret into the file:
the maintenance owes a run after it, which rewrites ``meta``."""
STATISTICS_DROPPED = "hash_secret.statistics_dropped"
"""Meta key set by the move when ``pg_statistic`` held values sampled from ``meta`` (the secret's
row may be among them): the maintenance then rewrites ``pg_statistic`` too, where its role may."""
SECRET_BYTES = 32


def _meta(conn: psycopg.Connection, schema: str, key: str) -> str | None:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def _write(file: KekFile, secret: bytes, why: str) -> None:
    try:
        file.write(list(file.keys().values()), hash_secret=secret)
    except OSError as e:
        raise KeyFileMismatch(
            f"the key file {file.path} has no hash secret yet and efface cannot add one ({e.strerror}): "
            "make the file writable by this process for one start"
        ) from None
    warnings.warn(
        f"efface {why} {file.path}: back this file up again. Every server of this store must read the same file; "
        "without it, no tenant, subject or key of the store can be found by its name.",
        KeyFileCreated,
        stacklevel=4,
    )


def open_hash_secret(conn: psycopg.Connection, file: KekFile, schema: str, wait_s: float) -> bytes:
    """The store's hash secret from the KEK file, checked against the database's check value;
    made on a store's first use, moved from an older database's ``meta`` (module docstring).
    Called on an autocommit connection holding :data:`.keys.KEYS_LOCK`; ``wait_s``: how long
    to wait for this host's copy of the file to catch up with another server's write."""
    s = schema
    in_db = _meta(conn, s, SECRET_META)
    held = file.hash_secret()
    if in_db is not None:  # an older database: move it (the file first, then the database)
        try:
            secret = bytes.fromhex(in_db)
        except ValueError:
            secret = b""
        if len(secret) < 16:
            raise KeyFileMismatch("the database's hash secret is malformed: this is not a store efface wrote")
        if held is None:
            _write(file, secret, "moved the store's hash secret out of the database into")
        elif held != secret:
            raise KeyFileMismatch(
                f"the key file {file.path} holds another hash secret than this store's (another store's file): "
                "name the store's own file",
                expected=hash_secret_id(secret),
            )
        with epochs.transaction(conn, MOVED_KIND, None, time.time(), schema=s):
            sampled = conn.execute(
                "SELECT 1 FROM pg_stats WHERE schemaname = %s AND tablename = 'meta' AND attname = 'v'", (s,)
            ).fetchone()
            if sampled is not None:
                # ANALYZE sampled meta's values (the secret's row among them) into pg_statistic
                # before migration 7: changing the column's type (to itself) drops the column's
                # statistics; the maintenance then rewrites pg_statistic where it may
                conn.execute(f"ALTER TABLE {s}.meta ALTER COLUMN v TYPE text")
                conn.execute(
                    f"INSERT INTO {s}.meta(k, v) VALUES (%s, '1') ON CONFLICT (k) DO NOTHING", (STATISTICS_DROPPED,)
                )
            conn.execute(
                f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (SECRET_ID_META, hash_secret_id(secret)),
            )
            conn.execute(f"DELETE FROM {s}.meta WHERE k = %s", (SECRET_META,))
        return secret
    named = _meta(conn, s, SECRET_ID_META)
    if named is not None:
        deadline = time.monotonic() + wait_s
        while (held is None or hash_secret_id(held) != named) and time.monotonic() < deadline:
            time.sleep(0.05)  # another server wrote it; this host's copy of the file may lag
            held = file.hash_secret()
        if held is None or hash_secret_id(held) != named:
            raise KeyFileMismatch(
                f"the key file {file.path} does not hold the hash secret this store's tenant ids and subject hashes "
                "are made with (another store's file, or a copy from before efface moved the secret into it): "
                "name the store's current file (efface will not make a new secret: the store's hashes would "
                "stop matching)",
                expected=named,
            )
        return held
    if held is None:  # a store's first use (a file made before this efface has none yet)
        held = secrets.token_bytes(SECRET_BYTES)
        _write(file, held, "added the store's hash secret to")
    conn.execute(
        f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING", (SECRET_ID_META, hash_secret_id(held))
    )
    return held
