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

**Per store, derived.** A store made by this efface has no secret of its own in the file: it
is derived from the file's name key and the store's id (``meta`` :data:`STORE_ID_META`, random,
made at the store's first use; :func:`derived`), so a file backed up before the store's first
use holds it already, and two stores whose operator gives them one file still hash differently
(a ledger of one cannot be matched against the other's, as with two embedded stores).

**Moving an older database's.** Before migration 7 the secret was the ``meta`` row
:data:`efface.origin.ledger.SECRET_META`, in hex, and cannot be derived: :func:`open_hash_secret`
moves it into the file (``hash_secrets``, under the store's id), under the
KEK file's advisory lock (:data:`.kekring.KEYS_LOCK`: one process at a time, each re-reading both
sides once it holds the lock): **the file first** (the same value: every hash, the ledger's
chain and every receipt stay valid), **then the database**, in one transaction with an epoch
of its own (kind :data:`MOVED_KIND`) that records the check value and deletes the row. A
crash between the two leaves the row and a file holding the same value: the next open finds
them equal and finishes the move. The epoch owes a maintenance run (:mod:`.maintenance`),
which then rewrites ``meta`` too (``VACUUM FULL``), checkpoints and switches the WAL past its
retention, so the row's old bytes leave ``base/`` and ``pg_wal/`` (where the server's data
directory is readable, tests scan them: tests/postgres/test_secret.py). ``ANALYZE`` may have
sampled the row into ``pg_statistic`` before migration 7 (which stops it): the move drops
``meta.v``'s statistics and the maintenance rewrites that catalog too, which needs superuser
or ``MAINTAIN`` on it (PostgreSQL 17+: the ``pg_maintain`` role); without either, its report
says so. What replicas, archived WAL and backups taken before keep of the row is out of
efface's reach.

**A file without it** for a database that names one (a copy from before the move, another
store's file) is :class:`.errors.KeyFileMismatch`, never a new secret: a new one would make
every tenant id, subject hash and fingerprint the store holds unfindable.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import warnings
from typing import TYPE_CHECKING

from ...keyed_hash import encode
from ..ledger import SECRET_META
from . import epochs
from .errors import KeyFileCreated, KeyFileMismatch
from .kekfile import KekFile, hash_secret_id

if TYPE_CHECKING:
    import psycopg

STORE_ID_META = "store_id"
"""Meta key: the store's id, under which the KEK file keeps its hash secret (not a secret)."""
SECRET_ID_META = "hash_secret_id"
"""Meta key: the check value of the store's hash secret (never the secret)."""
MOVED_KIND = "secret.moved"
"""The ``mutations.kind`` of the epoch that moved an older database's secret into the file:
the maintenance owes a run after it, which rewrites ``meta``."""
STATISTICS_DROPPED = "hash_secret.statistics_dropped"
"""Meta key set by the move when ``pg_statistic`` held values sampled from ``meta`` (the secret's
row may be among them): the maintenance then rewrites ``pg_statistic`` too, where its role may."""


def derived(name_key: bytes, store: str) -> bytes:
    """The hash secret of store ``store`` made by this efface: HMAC-SHA256 under the file's
    name key of a label and the store's id (encoded as every keyed hash is, apart from the name
    hashes by its label)."""
    return hmac.new(name_key, encode("store-hash-secret", store), hashlib.sha256).digest()


def _meta(conn: psycopg.Connection, schema: str, key: str) -> str | None:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def _store_id(conn: psycopg.Connection, schema: str) -> str:
    """The store's id, made (and committed) at its first use."""
    have = _meta(conn, schema, STORE_ID_META)
    if have is not None:
        return have
    conn.execute(
        f"INSERT INTO {schema}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING",
        (STORE_ID_META, secrets.token_hex(16)),
    )
    got = _meta(conn, schema, STORE_ID_META)
    assert got is not None
    return got


def _write(file: KekFile, store: str, secret: bytes, why: str) -> None:
    try:
        file.add_hash_secret(store, secret)
    except OSError as e:
        raise KeyFileMismatch(
            f"the key file {file.path} has no hash secret for this store yet and efface cannot add one "
            f"({e.strerror}): make the file writable by this process for one start"
        ) from None
    warnings.warn(
        f"efface {why} {file.path}: back this file up again. Every server of this store must read the same file; "
        "without it, no tenant, subject or key of the store can be found by its name.",
        KeyFileCreated,
        stacklevel=4,
    )


def _move(conn: psycopg.Connection, file: KekFile, s: str, store: str, in_db: str) -> bytes:
    """Migration 7's data step (module docstring): the file first, then the database."""
    try:
        secret = bytes.fromhex(in_db)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise KeyFileMismatch("the database's hash secret is malformed: this is not a store efface wrote")
    held = file.hash_secret(store)
    if held is None:
        _write(file, store, secret, "moved the store's hash secret out of the database into")
    elif held != secret:
        raise KeyFileMismatch(
            f"the key file {file.path} holds another hash secret for this store than the database's: "
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


def open_hash_secret(conn: psycopg.Connection, file: KekFile, schema: str, name_key: bytes, wait_s: float) -> bytes:
    """The store's hash secret, checked against the database's check value: derived from
    ``name_key`` (the file's, checked already) for a store made by this efface, the file's
    copy for one moved out of an older database's ``meta`` (moved here if it has not been:
    module docstring). Called on an autocommit connection holding :data:`.kekring.KEYS_LOCK`;
    ``wait_s``: how long to wait for this host's copy of the file to catch up with another
    server's move."""
    s = schema
    store = _store_id(conn, s)
    in_db = _meta(conn, s, SECRET_META)
    if in_db is not None:  # an older database
        return _move(conn, file, s, store, in_db)
    named = _meta(conn, s, SECRET_ID_META)
    held = file.hash_secret(store) or derived(name_key, store)
    if named is None:  # the store's first use
        conn.execute(
            f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING",
            (SECRET_ID_META, hash_secret_id(held)),
        )
        return held
    deadline = time.monotonic() + wait_s
    while hash_secret_id(held) != named and time.monotonic() < deadline:
        time.sleep(0.05)  # another server moved it; this host's copy of the file may lag
        held = file.hash_secret(store) or derived(name_key, store)
    if hash_secret_id(held) != named:
        raise KeyFileMismatch(
            f"the key file {file.path} does not hold the hash secret this store's tenant ids and subject hashes "
            "are made with (another store's file, or a copy from before efface moved the secret into it): "
            "name the store's current file (efface will not make a new secret: the store's hashes would "
            "stop matching)",
            expected=named,
        )
    return held
