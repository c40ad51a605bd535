"""The SQLite origin's reads: every query a read makes, each on this thread's reader connection.

apsw releases the GIL inside SQLite at every step of a statement, i.e. for every row: on a
busy server each row then waits for the GIL to come back (up to a switch interval while
another thread runs Python). Reads on the recall path therefore ask for one row, aggregated
in SQL (``json_group_array``, and ``group_concat`` for embeddings), rather than a row per
record: fetching 100 ids took 7.7 ms beside one thread running Python and 1.2 ms as one row
(0.05 ms alone, either way).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..base import RECORD_TABLES, RecordRow
from .conn import Connections
from .edge import guarded
from .rows import CLAIM_COLS, LIVE, NOT_QUARANTINED, REC_COLS, claim_row, in_chunks, record_row
from .tx import SQLiteTx


@guarded
class SQLiteReads:
    """The origin's reads (:class:`~.origin.SQLiteOrigin` is one), on the connections it is handed."""

    def __init__(self, db: Connections):
        self._db = db
        self.path = db.path

    def _r(self) -> Any:
        """This thread's read-only connection (opened on first use)."""
        return self._db.reader()

    def current_epoch(self) -> int:
        return self._db.current_epoch()

    def meta_get(self, key: str) -> str | None:
        return self._db.meta_get(key)

    def meta_items(self, prefix: str) -> dict[str, str]:
        rows = self._r().execute("SELECT k, v FROM meta WHERE substr(k, 1, ?) = ?", (len(prefix), prefix))
        return {k: v for k, v in rows}

    def path_evidence(self, handle: str) -> dict[str, bytes]:
        """What each read path kept at forget time for its probe (see paths.base.ReadPath)."""
        out: dict[str, bytes] = dict(
            self._r().execute("SELECT path, data FROM path_evidence WHERE handle=?", (handle,)).fetchall()
        )
        if not out:  # erasures recorded before path_evidence existed
            row = self._r().execute("SELECT anchors, tokens FROM evidence WHERE handle=?", (handle,)).fetchone()
            if row is not None:
                out = {"ann": row[0], "fts": row[1]}
        return out

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        return SQLiteTx(self._r(), 0).live_subject_hashes(tenant, hashes)

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        return SQLiteTx(self._r(), 0).exposed(tenant, key_hashes)

    def read(self, tenant: str, key: str, purpose: str, now: float):
        row = (
            self._r()
            .execute(
                f"SELECT {REC_COLS} FROM records r WHERE r.tenant=? AND r.key=? AND {NOT_QUARANTINED}", (tenant, key)
            )
            .fetchone()
        )
        if row is None:
            return None
        claims = [
            claim_row(c)
            for c in self._r().execute(
                f"SELECT {CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id"
                f" WHERE c.record_id=? AND c.purpose=? AND {LIVE}",
                (row[0], purpose, now),
            )
        ]
        return (record_row(row), claims) if claims else None

    def live_ids(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float) -> set[int]:
        """The ids among ``ids`` that are live for this tenant and purpose (and subject):
        the gate every index candidate passes before any text leaves the store."""
        out: set[int] = set()
        sub = " AND c.subject=?" if subject is not None else ""
        for chunk, marks in in_chunks(ids):
            args: list[Any] = [*chunk, tenant, purpose, now] + ([subject] if subject is not None else [])
            (got,) = (
                self._r()
                .execute(
                    # one row (see the module's docstring); '+r.tenant': rowid lookups for the
                    # ids, not a scan of the (tenant, key) index
                    f"SELECT json_group_array(r.id) FROM records r WHERE r.id IN ({marks}) AND +r.tenant=?"
                    f" AND {NOT_QUARANTINED}"
                    f" AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.purpose=? AND {LIVE}{sub})",
                    args,
                )
                .fetchone()
            )
            out.update(json.loads(got))
        return out

    def live_embeddings(
        self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float
    ) -> dict[int, bytes]:
        """:meth:`live_ids` and :meth:`embeddings` in one statement per chunk: each row is
        looked up once (a recall checks and reads about a hundred candidates per leg)."""
        out: dict[int, bytes] = {}
        sub = " AND c.subject=?" if subject is not None else ""
        for chunk, marks in in_chunks(ids):
            args: list[Any] = [*chunk, tenant, purpose, now] + ([subject] if subject is not None else [])
            # one row (see the module's docstring): the blobs joined, cut again by their lengths
            got, sizes, joined = (
                self._r()
                .execute(
                    "SELECT json_group_array(r.id), json_group_array(length(coalesce(r.embedding, x''))),"
                    " CAST(group_concat(coalesce(r.embedding, x''), x'') AS BLOB)"
                    f" FROM records r WHERE r.id IN ({marks}) AND +r.tenant=? AND {NOT_QUARANTINED}"
                    f" AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.purpose=? AND {LIVE}{sub})",
                    args,
                )
                .fetchone()
            )
            joined = joined or b""
            at = 0
            for rid, n in zip(json.loads(got), json.loads(sizes), strict=True):
                out[rid] = joined[at : at + n]
                at += n
        return out

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        """Rows by id; the caller has checked them with :meth:`live_ids` under the same lock."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        (got,) = (
            self._r()
            .execute(
                f"SELECT json_group_array(json_array({REC_COLS})) FROM records r WHERE r.id IN ({marks})", list(ids)
            )
            .fetchone()
        )  # one row (see the module's docstring); every column is text or a number
        return {r[0]: record_row(tuple(r)) for r in json.loads(got)}

    def live_records_by_id(
        self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None, now: float
    ) -> dict[int, RecordRow]:
        """:meth:`live_ids` and :meth:`records_by_id` in one statement: the rows of those of
        ``ids`` that are live (recall's last check of what the copy in memory chose)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        sub = " AND c.subject=?" if subject is not None else ""
        args: list[Any] = [*ids, tenant, purpose, now] + ([subject] if subject is not None else [])
        (got,) = (
            self._r()
            .execute(
                f"SELECT json_group_array(json_array({REC_COLS})) FROM records r WHERE r.id IN ({marks})"
                f" AND +r.tenant=? AND {NOT_QUARANTINED}"
                f" AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.purpose=? AND {LIVE}{sub})",
                args,
            )
            .fetchone()
        )  # one row (see the module's docstring); every column is text or a number
        return {r[0]: record_row(tuple(r)) for r in json.loads(got)}

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return self._r().execute("SELECT tenant, subject, identifiers FROM subjects").fetchall()

    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]:
        """(record id, key, why, handle, since, sources JSON) of every quarantined record."""
        return (
            self._r()
            .execute(
                "SELECT q.record_id, r.key, q.why, q.handle, q.since, r.sources FROM quarantine q"
                " JOIN records r ON r.id=q.record_id WHERE q.tenant=? ORDER BY r.key",
                (tenant,),
            )
            .fetchall()
        )

    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for chunk, marks in in_chunks(keys):
            out |= {
                r[0]
                for r in self._r().execute(
                    f"SELECT key FROM records WHERE tenant=? AND key IN ({marks})", [tenant, *chunk]
                )
            }
        return out

    def scan_keys(
        self, tenant: str, purpose: str, prefix: str, subject: str | None, after: str | None, limit: int, now: float
    ) -> list[str]:
        # BINARY collation orders UTF-8 bytes, which is code-point order: the same order as
        # the memory origin's sorted(); 'r.key >= prefix' lets the (tenant, key) index seek.
        sub = " AND c.subject=?" if subject is not None else ""
        args: list[Any] = [tenant, prefix, len(prefix), prefix, after or "", purpose, now]
        args += [subject] if subject is not None else []
        return [
            r[0]
            for r in self._r().execute(
                "SELECT r.key FROM records r WHERE r.tenant=? AND r.key>=? AND substr(r.key, 1, ?)=? AND r.key>?"
                f" AND {NOT_QUARANTINED} AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id"
                f" AND c.purpose=? AND {LIVE}{sub}) ORDER BY r.key LIMIT ?",
                [*args, limit],
            )
        ]

    def purposes(self, tenant: str) -> list[str]:
        (got,) = (
            self._r()
            .execute("SELECT json_group_array(purpose ORDER BY purpose) FROM purposes WHERE tenant=?", (tenant,))
            .fetchone()
        )  # one row: every recall asks (see the module's docstring)
        return json.loads(got)

    def changes_since(self, epoch: int, upto: int | None = None) -> list[tuple[int, int, str, str]]:
        """The change log after ``epoch`` (up to ``upto``), in order, as one row (see the
        module's docstring): a recall reads the writes its ANN delta has not seen yet."""
        bound, args = ("", (epoch,)) if upto is None else (" AND epoch<=?", (epoch, upto))
        (got,) = (
            self._r()
            .execute(
                "SELECT json_group_array(json_array(epoch, record_id, tenant, op) ORDER BY epoch, rowid)"
                f" FROM changes WHERE epoch>?{bound}",
                args,
            )
            .fetchone()
        )
        return [(e, rid, tenant, op) for e, rid, tenant, op in json.loads(got)]

    def latest_put_epoch(self, after: int) -> int | None:
        """The newest epoch after ``after`` that added or changed content, if any."""
        row = self._r().execute("SELECT max(epoch) FROM changes WHERE epoch>? AND op='put'", (after,)).fetchone()
        return row[0]

    def due_tenant(self, now: float) -> str | None:
        """A tenant with a claim whose TTL has passed, if any (uses the partial expiry index)."""
        row = (
            self._r()
            .execute(
                "SELECT r.tenant FROM claims c JOIN records r ON r.id=c.record_id"
                " WHERE c.expires_at IS NOT NULL AND c.expires_at<=? LIMIT 1",
                (now,),
            )
            .fetchone()
        )
        return row[0] if row else None

    def pending_drops(self, applied: int) -> int:
        (n,) = self._r().execute("SELECT count(*) FROM changes WHERE op='drop' AND epoch>?", (applied,)).fetchone()
        return n

    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]:
        """The embeddings of those of ``ids`` that have one, as stored."""
        out: dict[int, bytes] = {}
        for chunk, marks in in_chunks(ids):
            # one row (see the module's docstring): the blobs joined, cut again by their lengths
            got, sizes, joined = (
                self._r()
                .execute(
                    "SELECT json_group_array(id), json_group_array(length(embedding)),"
                    f" CAST(group_concat(embedding, x'') AS BLOB) FROM records WHERE id IN ({marks})"
                    " AND length(embedding) > 0",
                    chunk,
                )
                .fetchone()
            )
            at = 0
            for rid, n in zip(json.loads(got), json.loads(sizes), strict=True):
                out[rid] = joined[at : at + n]
                at += n
        return out

    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]:
        return self._r().execute("SELECT id, embedding FROM records WHERE tenant=?", (tenant,)).fetchall()

    def turn_fields(self, tenant: str) -> Iterable[tuple[int, Any, Any, Any]]:
        return (
            self._r()
            .execute(
                "SELECT id, json_extract(metadata, '$.speaker'), json_extract(metadata, '$.session'),"
                " json_extract(metadata, '$.at') FROM records WHERE tenant=? AND json_valid(metadata) ORDER BY id",
                (tenant,),
            )
            .fetchall()
        )

    def tenants(self) -> list[str]:
        return [r[0] for r in self._r().execute("SELECT DISTINCT tenant FROM records")]

    def receipt(self, handle: str) -> dict[str, Any] | None:
        row = (
            self._r()
            .execute("SELECT handle, epoch, kind, tenant_h, created_at, body FROM receipts WHERE handle=?", (handle,))
            .fetchone()
        )
        if row is None:
            return None
        return {
            "handle": row[0],
            "epoch": row[1],
            "kind": row[2],
            "tenant_h": row[3],
            "created_at": row[4],
            "body": json.loads(row[5]),
        }

    def receipts(self, tenant_h: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT handle FROM receipts" + (" WHERE tenant_h=?" if tenant_h else "") + " ORDER BY epoch"
        found = (self.receipt(h) for (h,) in self._r().execute(sql, (tenant_h,) if tenant_h else ()).fetchall())
        return [r for r in found if r is not None]

    def ledger(self) -> list[dict[str, Any]]:
        return [
            {"seq": s, "at": at, "kind": k, "handle": h, "body": b, "prev": p, "hash": hh}
            for s, at, k, h, b, p, hh in self._r().execute(
                "SELECT seq, at, kind, handle, body, prev, hash FROM ledger ORDER BY seq"
            )
        ]

    # -- evidence for verify -------------------------------------------------------------
    def evidence(self, handle: str) -> dict[str, Any] | None:
        row = (
            self._r()
            .execute(
                "SELECT tenant_h, epoch, erased_ids, quarantined_ids, anchors, tokens, fingerprints, created_at"
                " FROM evidence WHERE handle=?",
                (handle,),
            )
            .fetchone()
        )
        if row is None:
            return None
        keys = ("tenant_h", "epoch", "erased_ids", "quarantined_ids", "anchors", "tokens", "fingerprints", "created_at")
        return dict(zip(keys, row, strict=True))

    def erased_proof(self, handle: str) -> dict[str, Any] | None:
        """The newest verification of ``handle`` that proved ``erased`` (one indexed lookup
        per handle instead of reading the whole ledger)."""
        row = (
            self._r()
            .execute(
                "SELECT seq, at, kind, handle, body, prev, hash FROM ledger WHERE handle=? AND kind='verify'"
                " AND json_extract(body, '$.level')='erased' ORDER BY seq DESC LIMIT 1",
                (handle,),
            )
            .fetchone()
        )
        return (
            None
            if row is None
            else dict(zip(("seq", "at", "kind", "handle", "body", "prev", "hash"), row, strict=True))
        )

    def ack_times(self, after: int, upto: int) -> list[float]:
        """Acknowledgement times of the erasures with epochs in (after, upto]."""
        return [
            r[0] for r in self._r().execute("SELECT created_at FROM receipts WHERE epoch>? AND epoch<=?", (after, upto))
        ]

    def tenant_name(self, tenant: str) -> str | None:
        """The name kept for this tenant id, while the tenant has anything left."""
        row = self._r().execute("SELECT name FROM tenants WHERE tenant=?", (tenant,)).fetchone()
        return None if row is None else row[0]

    def residual_rows(self, ids: Sequence[int]) -> dict[str, int]:
        """Rows that still name any of these record ids, per table."""
        found: dict[str, int] = {}
        for table, col in RECORD_TABLES:
            n = 0
            for chunk, marks in in_chunks(ids):
                n += self._r().execute(f"SELECT count(*) FROM {table} WHERE {col} IN ({marks})", chunk).fetchone()[0]
            if n:
                found[table] = n
        return found

    def still_quarantined(self, ids: Sequence[int]) -> int:
        marks = ",".join("?" * len(ids))
        return (
            self._r().execute(f"SELECT count(*) FROM quarantine WHERE record_id IN ({marks})", list(ids)).fetchone()[0]
            if ids
            else 0
        )

    def count_records(self) -> int:
        return self._r().execute("SELECT count(*) FROM records").fetchone()[0]

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key (restore opens backups with them)."""
        return self._r().execute("SELECT tenant, subject, kid, key FROM subject_keys").fetchall()
