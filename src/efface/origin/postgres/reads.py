"""The PostgreSQL origin's reads (:class:`efface.origin.base.Reads`), unsealing what they return.

Each read runs on the connection :meth:`PgReads._reading` gives: the thread's snapshot
(a REPEATABLE READ transaction held for an ``Origin.snapshot()`` block), or else a pooled
autocommit connection, whose every statement sees the newest committed state.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pgvector import Vector

from ...vectors import F16
from ..base import ClaimRow, RecordRow, turn_fields
from . import epochs
from .sealing import Sealer

if TYPE_CHECKING:
    import psycopg

LIVE = "(c.expires_at IS NULL OR c.expires_at > %s)"
NOT_QUARANTINED = "NOT EXISTS (SELECT 1 FROM {s}.quarantine q WHERE q.record_id = r.id)"
REC_COLS = "r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.updated_at"
CLAIM_COLS = "c.id, c.record_id, r.key, c.subject, c.purpose, c.basis, c.expires_at"


def vector_bytes(v: Any) -> bytes:
    """A ``vector`` column's value in the store's stored form (:mod:`efface.vectors`: a tag,
    then half precision), ``b""`` for none. The column holds the halves widened to float32,
    so this gives back the very bytes written."""
    if v is None:
        return b""
    values = np.asarray(v.to_numpy() if isinstance(v, Vector) else v, dtype=np.float32)
    half = values.astype("<f2")
    if not np.array_equal(half.astype(np.float32), values):  # written as float32 (an older store's form)
        return values.astype("<f4").tobytes()
    return F16 + half.tobytes()


def to_vector(stored: bytes) -> np.ndarray | None:
    """The store's stored form of a vector as the ``vector`` column's float32 values."""
    if not stored:
        return None
    if len(stored) % 2 and stored[:1] == F16:
        return np.frombuffer(stored, dtype="<f2", offset=1).astype(np.float32)
    return np.frombuffer(stored, dtype="<f4")  # a float32 row of a store written before half precision


def record_aad(column: str, tenant: str, key: str) -> str:
    return f"records.{column}|{tenant}|{key}"


def unseal_record(sealer: Sealer, conn: psycopg.Connection, row: Sequence[Any]) -> RecordRow:
    """A :class:`RecordRow` from ``(id, tenant, key, text, metadata, sources, updated_at)`` as stored."""
    rid, tenant, key, text, metadata, sources, updated_at = row
    return RecordRow(
        int(rid),
        tenant,
        key,
        sealer.open(conn, text, record_aad("text", tenant, key)),
        sealer.open(conn, metadata, record_aad("metadata", tenant, key)),
        sealer.open(conn, sources, record_aad("sources", tenant, key)),
        float(updated_at),
    )


def live_filter(s: str, subject: str | None) -> str:
    """The conditions for a record live for a tenant and purpose (and subject): arguments
    ``ids, tenant, purpose, now[, subject]``."""
    return (
        f"r.id = ANY(%s) AND r.tenant = %s AND {NOT_QUARANTINED.format(s=s)} AND EXISTS (SELECT 1 FROM {s}.claims c"
        f" WHERE c.record_id = r.id AND c.purpose = %s AND {LIVE}" + (" AND c.subject = %s)" if subject else ")")
    )


class PgReads:
    """The reads; the origin supplies :attr:`_s` (its schema), :attr:`_sealer` and :meth:`_reading`."""

    _s: str
    _sealer: Sealer

    def _reading(self) -> contextlib.AbstractContextManager[psycopg.Connection]:  # pragma: no cover
        raise NotImplementedError

    # Results in binary: a vector's text form costs more to parse than the rest of a recall.
    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as conn:
            return conn.execute(sql.format(s=self._s), args, binary=True).fetchall()

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        with self._reading() as conn:
            return conn.execute(sql.format(s=self._s), args, binary=True).fetchone()

    # -- records and claims
    def read(self, tenant: str, key: str, purpose: str, now: float) -> tuple[RecordRow, list[ClaimRow]] | None:
        with self._reading() as conn:
            s = self._s
            row = conn.execute(
                f"SELECT {REC_COLS} FROM {s}.records r WHERE r.tenant = %s AND r.key = %s AND "
                + NOT_QUARANTINED.format(s=s),
                (tenant, key),
            ).fetchone()
            if row is None:
                return None
            claims = [
                ClaimRow(*c)
                for c in conn.execute(
                    f"SELECT {CLAIM_COLS} FROM {s}.claims c JOIN {s}.records r ON r.id = c.record_id"
                    f" WHERE c.record_id = %s AND c.purpose = %s AND {LIVE} ORDER BY c.id",
                    (row[0], purpose, now),
                )
            ]
            return (unseal_record(self._sealer, conn, row), claims) if claims else None

    def live_ids(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float) -> set[int]:
        return set(self.live_embeddings(ids, tenant, purpose, subject, now, vectors=False))

    def live_embeddings(
        self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float, *, vectors: bool = True
    ) -> dict[int, bytes]:
        if not ids:
            return {}
        args: list[Any] = [list(ids), tenant, purpose, now] + ([subject] if subject else [])
        col = "r.embedding" if vectors else "NULL"
        rows = self._all(f"SELECT r.id, {col} FROM {{s}}.records r WHERE {live_filter(self._s, subject)}", args)
        return {int(i): vector_bytes(v) for i, v in rows}

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        if not ids:
            return {}
        with self._reading() as conn:
            rows = conn.execute(f"SELECT {REC_COLS} FROM {self._s}.records r WHERE r.id = ANY(%s)", (list(ids),))
            return {int(r[0]): unseal_record(self._sealer, conn, r) for r in rows}

    def purposes(self, tenant: str) -> list[str]:
        return [r[0] for r in self._all("SELECT purpose FROM {s}.purposes WHERE tenant = %s ORDER BY 1", (tenant,))]

    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]:
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT r.id, r.key, q.why, q.handle, q.since, r.sources, r.tenant FROM {self._s}.quarantine q"
                f' JOIN {self._s}.records r ON r.id = q.record_id WHERE q.tenant = %s ORDER BY r.key COLLATE "C"',
                (tenant,),
            ).fetchall()
            return [
                (int(i), k, why, h, float(t), self._sealer.open(conn, src, record_aad("sources", ten, k)))
                for i, k, why, h, t, src, ten in rows
            ]

    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]:
        rows = self._all("SELECT key FROM {s}.records WHERE tenant = %s AND key = ANY(%s)", (tenant, list(keys)))
        return {r[0] for r in rows}

    def scan_keys(
        self, tenant: str, purpose: str, prefix: str, subject: str | None, after: str | None, limit: int, now: float
    ) -> list[str]:
        s = self._s
        where = [
            "r.tenant = %s",
            'r.key COLLATE "C" >= %s',
            "starts_with(r.key, %s)",
            NOT_QUARANTINED.format(s=s),
            f"EXISTS (SELECT 1 FROM {s}.claims c WHERE c.record_id = r.id AND c.purpose = %s AND {LIVE}"
            + (" AND c.subject = %s)" if subject else ")"),
        ]
        args: list[Any] = [tenant, prefix, prefix, purpose, now] + ([subject] if subject else [])
        if after is not None:
            where.append('r.key COLLATE "C" > %s')
            args.append(after)
        rows = self._all(
            f'SELECT r.key FROM {s}.records r WHERE {" AND ".join(where)} ORDER BY r.key COLLATE "C" LIMIT %s',
            [*args, limit],
        )
        return [r[0] for r in rows]

    # -- subjects and keys
    def all_subjects(self) -> list[tuple[str, str, str]]:
        with self._reading() as conn:
            rows = conn.execute(f"SELECT tenant, subject, identifiers FROM {self._s}.subjects").fetchall()
            return [(t, subj, self._sealer.open(conn, ident, f"subjects|{t}|{subj}")) for t, subj, ident in rows]

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        rows = self._all(
            "SELECT subject_h FROM {s}.data_keys WHERE tenant = %s AND subject_h = ANY(%s)", (tenant, list(hashes))
        )
        return {r[0] for r in rows}

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        rows = self._all(
            "SELECT subject_h FROM {s}.backup_exposure WHERE tenant = %s AND key_h = ANY(%s)",
            (tenant, list(key_hashes)),
        )
        return {r[0] for r in rows}

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key the store asked for (a tenant's
        own key and keys the store never named are left out: they seal nothing it backs up)."""
        rows = self._all(
            "SELECT tenant, subject, kid, wrapped, kek_id FROM {s}.data_keys WHERE subject_h IS NOT NULL"
            " AND subject IS NOT NULL ORDER BY created_at, kid"
        )
        unwrap = self._sealer.keys.unwrap_row
        return [(t, subj, bytes(kid), unwrap(kek, bytes(kid), bytes(w))) for t, subj, kid, w, kek in rows]

    # -- the change log and epochs
    def current_epoch(self) -> int:
        with self._reading() as conn:
            return epochs.current(conn, schema=self._s)

    def changes_since(self, epoch: int, upto: int | None = None) -> list[tuple[int, int, str, str]]:
        if upto is None:
            rows = self._all(
                "SELECT epoch, record_id, tenant, op FROM {s}.changes WHERE epoch > %s ORDER BY seq", (epoch,)
            )
        else:
            rows = self._all(
                "SELECT epoch, record_id, tenant, op FROM {s}.changes WHERE epoch > %s AND epoch <= %s ORDER BY seq",
                (epoch, upto),
            )
        return [(int(e), int(i), t, op) for e, i, t, op in rows]

    def latest_put_epoch(self, after: int) -> int | None:
        row = self._one("SELECT max(epoch) FROM {s}.changes WHERE epoch > %s AND op = 'put'", (after,))
        return None if row is None or row[0] is None else int(row[0])

    def pending_drops(self, applied: int) -> int:
        return int(self._one("SELECT count(*) FROM {s}.changes WHERE op = 'drop' AND epoch > %s", (applied,))[0])

    def due_tenant(self, now: float) -> str | None:
        row = self._one(
            "SELECT r.tenant FROM {s}.claims c JOIN {s}.records r ON r.id = c.record_id"
            " WHERE c.expires_at IS NOT NULL AND c.expires_at <= %s ORDER BY c.expires_at, c.id LIMIT 1",
            (now,),
        )
        return None if row is None else row[0]

    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]:
        if not ids:
            return {}
        rows = self._all("SELECT id, embedding FROM {s}.records WHERE id = ANY(%s)", (list(ids),))
        return {int(i): vector_bytes(v) for i, v in rows}

    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]:
        rows = self._all("SELECT id, embedding FROM {s}.records WHERE tenant = %s ORDER BY id", (tenant,))
        return [(int(i), vector_bytes(v)) for i, v in rows]

    def turn_fields(self, tenant: str) -> Iterable[tuple[int, Any, Any, Any]]:
        # sealed: opened here, then read as the other origins read them
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT id, key, metadata FROM {self._s}.records WHERE tenant = %s ORDER BY id", (tenant,)
            ).fetchall()
            opened = [(int(i), self._sealer.open(conn, m, record_aad("metadata", tenant, k))) for i, k, m in rows]
        return [turn_fields(i, m) for i, m in opened]

    def count_records(self) -> int:
        return int(self._one("SELECT count(*) FROM {s}.records")[0])

    def tenants(self) -> list[str]:
        return [r[0] for r in self._all("SELECT tenant FROM {s}.records GROUP BY tenant ORDER BY min(id)")]

    def tenant_name(self, tenant: str) -> str | None:
        with self._reading() as conn:
            row = conn.execute(f"SELECT name FROM {self._s}.tenants WHERE tenant = %s", (tenant,)).fetchone()
            return None if row is None else self._sealer.open(conn, row[0], f"tenants|{tenant}")

    # -- receipts, ledger, evidence
    def receipt(self, handle: str) -> dict[str, Any] | None:
        rows = self._all(
            "SELECT handle, epoch, kind, tenant_h, created_at, body::text FROM {s}.receipts WHERE handle = %s",
            (handle,),
        )
        return _receipt(rows[0]) if rows else None

    def receipts(self, tenant_h: str | None = None) -> list[dict[str, Any]]:
        cols = "SELECT handle, epoch, kind, tenant_h, created_at, body::text FROM {s}.receipts"
        order = " ORDER BY epoch, created_at, handle"
        if tenant_h:
            return [_receipt(r) for r in self._all(cols + " WHERE tenant_h = %s" + order, (tenant_h,))]
        return [_receipt(r) for r in self._all(cols + order)]

    def ledger(self) -> list[dict[str, Any]]:
        return [
            _ledger(r) for r in self._all("SELECT seq, at, kind, handle, body, prev, hash FROM {s}.ledger ORDER BY seq")
        ]

    def evidence(self, handle: str) -> dict[str, Any] | None:
        cols = ("tenant_h", "epoch", "erased_ids", "quarantined_ids", "anchors", "tokens", "fingerprints", "created_at")
        row = self._one(f"SELECT {', '.join(cols)} FROM {{s}}.evidence WHERE handle = %s", (handle,))
        if row is None:
            return None
        return {c: bytes(v) if isinstance(v, memoryview) else v for c, v in zip(cols, row, strict=True)}

    def path_evidence(self, handle: str) -> dict[str, bytes]:
        return {
            p: bytes(d) for p, d in self._all("SELECT path, data FROM {s}.path_evidence WHERE handle = %s", (handle,))
        }

    def erased_proof(self, handle: str) -> dict[str, Any] | None:
        for row in self._all(
            "SELECT seq, at, kind, handle, body, prev, hash FROM {s}.ledger WHERE handle = %s AND kind = 'verify'"
            " ORDER BY seq DESC",
            (handle,),
        ):
            if json.loads(row[4]).get("level") == "erased":
                return _ledger(row)
        return None

    def ack_times(self, after: int, upto: int) -> list[float]:
        rows = self._all(
            "SELECT created_at FROM {s}.receipts WHERE epoch > %s AND epoch <= %s ORDER BY epoch", (after, upto)
        )
        return [float(r[0]) for r in rows]

    def residual_rows(self, ids: Sequence[int]) -> dict[str, int]:
        wanted = list(set(ids))
        counts = {}
        for table, col in (
            ("records", "id"),
            ("claims", "record_id"),
            ("lineage", "record_id"),
            ("mentions", "record_id"),
            ("quarantine", "record_id"),
            ("reasons", "record_id"),
        ):
            n = int(self._one(f"SELECT count(*) FROM {{s}}.{table} WHERE {col} = ANY(%s)", (wanted,))[0])
            if n:
                counts[table] = n
        return counts

    def still_quarantined(self, ids: Sequence[int]) -> int:
        return int(self._one("SELECT count(*) FROM {s}.quarantine WHERE record_id = ANY(%s)", (list(set(ids)),))[0])

    def meta_get(self, key: str) -> str | None:
        row = self._one("SELECT v FROM {s}.meta WHERE k = %s", (key,))
        return None if row is None else row[0]

    def meta_items(self, prefix: str) -> dict[str, str]:
        rows = self._all("SELECT k, v FROM {s}.meta WHERE left(k, %s) = %s", (len(prefix), prefix))
        return {k: v for k, v in rows}


def _receipt(row: Sequence[Any]) -> dict[str, Any]:
    handle, epoch, kind, tenant_h, at, body = row
    return {
        "handle": handle,
        "epoch": int(epoch),
        "kind": kind,
        "tenant_h": tenant_h,
        "created_at": float(at),
        "body": json.loads(body),
    }


def _ledger(row: Sequence[Any]) -> dict[str, Any]:
    seq, at, kind, handle, body, prev, digest = row
    return {
        "seq": int(seq),
        "at": float(at),
        "kind": kind,
        "handle": handle,
        "body": body,
        "prev": prev,
        "hash": digest,
    }
