"""Subject names and record keys on PostgreSQL: never in clear in the database (issue #34 item 3).

A subject's name and a record's key are personal data (``user:alice@example.com/notes``). What
a delete leaves in heap pages, the WAL, replicas and backups is out of efface's reach, and a
key shred does nothing for a value stored in clear. So (:mod:`.schema`, migration 6):

* every column that *names* a subject or a key holds a keyed hash of it under the **name key**
  (:meth:`.keys.Keys.name_h`, a secret of the operator's KEK file, never in the database, kept
  across KEK rotations so lookups never change): ``claims.subject``, ``mentions.subject``,
  ``subjects.subject``, ``data_keys.subject``; ``records.key``, ``lineage.source_key``;
* where efface gives a name back (claims, the subjects of a tenant, backups, a scan of keys),
  it opens a sealed copy: ``data_keys.name``, the subject's name sealed with its own data key
  (so it is shredded with the key, which is destroyed when the subject's last claim goes),
  and ``records.key_sealed``, the key sealed with the record's data key.

What this costs: a hash cannot be searched by prefix or sorted by the clear key, so
``scan_keys``, ``quarantined`` and a forget by prefix open the tenant's keys in this process
and filter and order them here (one AES-GCM open per record of the tenant).

What stays: with the KEK file *and* a copy of the database, someone can test whether a
guessed name was a subject (its hash). Without the file, a hash tells nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import StoreDamaged
from ..base import ClaimRow
from .keys import name_aad
from .schema import MIGRATE_LOCK, NAMES_IN_CLEAR
from .sealing import Sealer

if TYPE_CHECKING:
    import psycopg


REWRITE_KIND = "names"
"""The ``mutations.kind`` of the epoch :func:`rewrite_clear_names` runs in: the maintenance
owes a run after it, as after an erasure."""


def key_aad(tenant: str) -> str:
    """What a record's sealed key (``records.key_sealed``) is bound to: its tenant (its text,
    bound to the clear key, fails to open if a sealed key is moved to another row)."""
    return f"records.key|{tenant}"


def claim_cols(s: str) -> str:
    """The columns :func:`claim_row` reads, for ``claims c JOIN records r``."""
    return (
        "c.id, c.record_id, r.tenant, r.key_sealed, c.subject, (SELECT d.name FROM "
        + s
        + ".data_keys d WHERE d.tenant = r.tenant AND d.subject = c.subject), c.purpose, c.basis, c.expires_at"
    )


def subject_name(sealer: Sealer, conn: psycopg.Connection, tenant: str, subject_nh: str, sealed: Any) -> str:
    """A subject's name from its data key's row (``data_keys.name``)."""
    if sealed is None:  # every subject a row names has its data key: a damaged store
        raise StoreDamaged("a row names a subject whose data key is gone")
    return sealer.open(conn, sealed, name_aad(tenant, subject_nh))


def claim_row(sealer: Sealer, conn: psycopg.Connection, row: Sequence[Any]) -> ClaimRow:
    """A :class:`ClaimRow` from a row of :func:`claim_cols`, its key and subject opened."""
    cid, rid, tenant, key_sealed, nh, name, purpose, basis, expires_at = row
    return ClaimRow(
        int(cid),
        int(rid),
        sealer.open(conn, key_sealed, key_aad(tenant)),
        subject_name(sealer, conn, tenant, nh, name),
        purpose,
        basis,
        expires_at,
    )


def subject_names(
    sealer: Sealer, conn: psycopg.Connection, s: str, tenant: str, hashes: Sequence[str]
) -> dict[str, str]:
    """hash -> name of the subjects of ``tenant`` with those hashes that have a data key."""
    rows = conn.execute(
        f"SELECT subject, name FROM {s}.data_keys WHERE tenant = %s AND subject = ANY(%s) AND name IS NOT NULL",
        (tenant, list(hashes)),
    ).fetchall()
    return {nh: sealer.open(conn, name, name_aad(tenant, nh)) for nh, name in rows}


def pending(conn: psycopg.Connection, s: str) -> bool:
    """Whether migration 6 left clear names for :func:`rewrite_clear_names`."""
    return conn.execute(f"SELECT 1 FROM {s}.meta WHERE k = %s", (NAMES_IN_CLEAR,)).fetchone() is not None


def _mapped(conn: psycopg.Connection, sql: str, pairs: Sequence[tuple[str, str, str]]) -> None:
    """Run an ``UPDATE ... FROM m`` where ``m(tenant, name, nh)`` are ``pairs``."""
    if pairs:
        cols = [list(c) for c in zip(*pairs, strict=True)]
        conn.execute(
            sql.replace(
                "{m}", "(SELECT unnest(%s::text[]), unnest(%s::text[]), unnest(%s::text[])) m(tenant, name, nh)"
            ),
            cols,
        )


def rewrite_clear_names(conn: psycopg.Connection, sealer: Sealer, s: str, now: float) -> int:
    """Migration 6's data step, in the caller's transaction (one with an epoch of its own, so
    the next maintenance rewrites the tables and the clear names' old bytes leave the files):
    every subject name and record key a database written before it holds in clear becomes its
    keyed hash, with a sealed copy where efface gives it back (module docstring). Runs once,
    under the migration's advisory lock; returns how many rows it rewrote."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
    if not pending(conn, s):
        return 0  # another server did it
    keys, done = sealer.keys, 0
    # data keys first: each keeps its subject's name sealed with itself
    for kid, tenant, subject in conn.execute(
        f"SELECT kid, tenant, subject FROM {s}.data_keys WHERE subject IS NOT NULL AND name IS NULL"
    ).fetchall():
        nh = keys.name_h("subject", tenant, subject)
        conn.execute(
            f"UPDATE {s}.data_keys SET subject = %s, name = %s WHERE kid = %s",
            (nh, sealer.seal(conn, bytes(kid), subject, name_aad(tenant, nh)), kid),
        )
        done += 1
    # every subject a row names, each given a data key holding its name if it had none
    named = conn.execute(
        f"SELECT r.tenant, c.subject FROM {s}.claims c JOIN {s}.records r ON r.id = c.record_id"
        f" UNION SELECT tenant, subject FROM {s}.mentions UNION SELECT tenant, subject FROM {s}.subjects"
    ).fetchall()
    pairs = [(t, n, keys.name_h("subject", t, n)) for t, n in named]
    for t, n, _nh in pairs:
        keys.ensure_subject(conn, t, n, now)
    _mapped(
        conn,
        f"UPDATE {s}.claims c SET subject = m.nh FROM {s}.records r, {{m}}"
        " WHERE r.id = c.record_id AND m.tenant = r.tenant AND m.name = c.subject",
        pairs,
    )
    for table in ("mentions", "subjects"):
        _mapped(
            conn,
            f"UPDATE {s}.{table} x SET subject = m.nh FROM {{m}} WHERE m.tenant = x.tenant AND m.name = x.subject",
            pairs,
        )
    done += len(pairs)
    # record keys: hashed, and sealed with the record's data key
    rows = conn.execute(f"SELECT id, tenant, key, sealed_by FROM {s}.records WHERE key_sealed IS NULL").fetchall()
    if rows:
        conn.cursor().executemany(
            f"UPDATE {s}.records SET key = %s, key_sealed = %s WHERE id = %s",
            [(keys.name_h("key", t, k), sealer.seal(conn, bytes(kid), k, key_aad(t)), rid) for rid, t, k, kid in rows],
        )
    sources = conn.execute(f"SELECT DISTINCT tenant, source_key FROM {s}.lineage").fetchall()
    _mapped(
        conn,
        f"UPDATE {s}.lineage x SET source_key = m.nh FROM {{m}} WHERE m.tenant = x.tenant AND m.name = x.source_key",
        [(t, k, keys.name_h("key", t, k)) for t, k in sources],
    )
    conn.execute(f"DELETE FROM {s}.meta WHERE k = %s", (NAMES_IN_CLEAR,))
    return done + len(rows) + len(sources)
