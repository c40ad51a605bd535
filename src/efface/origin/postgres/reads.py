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
from psycopg.adapt import Loader
from psycopg.pq import Format

from ...vectors import F16
from ..base import RECORD_TABLES, ClaimRow, RecordRow
from ..fields import turn_fields
from . import epochs
from .names import claim_cols, claim_row, key_aad, subject_name
from .rows import AHEAD_NONE, REC_COLS, ahead_branch, ahead_row, record_aad, unseal_record
from .sealing import Sealer

if TYPE_CHECKING:
    import psycopg

LIVE = "(c.expires_at IS NULL OR c.expires_at > %s)"
NOT_QUARANTINED = "NOT EXISTS (SELECT 1 FROM {s}.quarantine q WHERE q.record_id = r.id)"

PURPOSES_SEEN = 100_000
"""(tenant, purpose) pairs :meth:`PgReads.knows_purpose` remembers at most (forgotten all at once past it)."""

HNSW_SETTINGS = {"hnsw.ef_search": "50", "hnsw.iterative_scan": "relaxed_order"}
"""Set on every connection of the origin (pgvector 0.8): the search width of a query (recall's
vector statement asks the graph for 50 candidates, :data:`NEAR_SHARE`: the least width that
returns them in one pass; 50 at 50 cost 1.2 ms less of the server's CPU a recall at 100k
records than 100 at 100, quality in docs/postgres.md), and iterative scans, so a query whose
filters (tenant, purpose, subject, expiry, quarantine) drop rows goes on through the graph
until it has ``n`` live ones (up to pgvector's ``hnsw.max_scan_tuples``) instead of returning
fewer. ``relaxed_order``: the rows may come slightly out of distance order, which costs nothing
here (recall scores every candidate by exact cosine)."""

NEAR_SHARE = 2
"""Recall's vector statement (:meth:`PgReads.nearest_scored`) asks the graph for ``n // NEAR_SHARE`` of the ``n``."""

GENERIC_FROM = 20_000
"""Records (as this process's word index counts them) from which recall's vector statement
runs on a generic plan for a tenant holding at least half of them (:data:`PLANNED_GENERIC`)."""

PLANNED_GENERIC = "set_config('plan_cache_mode', 'force_generic_plan', true)"
""":data:`PLANNED_IN_SNAPSHOT`'s place in the snapshot recall's vector statement begins for such a
tenant: its plan made once per connection (planning cost 0.33 ms of the server's CPU a recall at
100k records), the HNSW walk that a plan for its own arguments makes too. A smaller tenant's is
planned for its own arguments (an exact scan of its rows may be better: docs/postgres.md)."""

PLANNED_IN_SNAPSHOT = "set_config('plan_cache_mode', 'force_custom_plan', true)"
"""Set for the transaction of each snapshot (in the ``SELECT`` that takes it): a prepared
statement in it is planned for its own arguments every time (:data:`PLANNED_GENERIC` aside). So
recall's vector statement (:meth:`PgReads.nearest_scored`) is prepared inside a snapshot: the
server parses it once per connection instead of once a recall (about 0.5 ms of the server's
CPU at 100k records), and a generic plan, made without the tenant and the limit, which may
leave the HNSW index for a scan of every row, is not used."""


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


class _RawVector(Loader):
    """A ``vector`` value in binary as it came (a dimension, 2 bytes unused, big-endian
    float32s), for :func:`stored_many` to convert many at once."""

    format = Format.BINARY

    def load(self, data: Any) -> bytes:
        return bytes(data)


def stored_many(raws: Sequence[bytes | None]) -> list[bytes]:
    """:func:`vector_bytes` of many binary ``vector`` values (:class:`_RawVector`) in one numpy
    pass: per row, the conversions cost more than the rest of a recall's reads."""
    present = [r for r in raws if r]
    if not present:
        return [b""] * len(raws)
    dim = int.from_bytes(present[0][:2], "big")
    m = np.frombuffer(b"".join(r[4:] for r in present), dtype=">f4").reshape(len(present), dim).astype(np.float32)
    half = m.astype("<f2")
    exact = (half.astype(np.float32) == m).all(axis=1)
    done = iter(
        F16 + half[i].tobytes() if exact[i] else m[i].astype("<f4").tobytes()  # float32: an older store's form
        for i in range(len(present))
    )
    return [next(done) if r else b"" for r in raws]


def to_vector(stored: bytes) -> np.ndarray | None:
    """The store's stored form of a vector as the ``vector`` column's float32 values."""
    if not stored:
        return None
    if len(stored) % 2 and stored[:1] == F16:
        return np.frombuffer(stored, dtype="<f2", offset=1).astype(np.float32)
    return np.frombuffer(stored, dtype="<f4")  # a float32 row of a store written before half precision


def live_filter(s: str, subject: str | None) -> str:
    """The conditions for a record live for a tenant and purpose (and subject): arguments
    ``ids, tenant, purpose, now[, subject's name hash]``."""
    return f"r.id = ANY(%s) AND {live_claim(s, subject)}"


def live_claim(s: str, subject: str | None, *, named: bool = False) -> str:
    """The conditions for the record ``r`` live for a tenant and purpose (and subject):
    arguments ``tenant, purpose, now[, subject's name hash]`` (``named``: the placeholders
    ``%(tenant)s``, ``%(purpose)s``, ``%(now)s``, ``%(subject)s``). Its claims are looked up
    through their index, record by record (a subquery the planner keeps as it is): as an
    ``EXISTS``, a hundred candidates were joined to a scan of every claim (2 ms at 10k records,
    0.35 ms so)."""
    t, p, now, subj = ("%(tenant)s", "%(purpose)s", "%(now)s", "%(subject)s") if named else ("%s",) * 4
    return (
        f"r.tenant = {t} AND {NOT_QUARANTINED.format(s=s)} AND (SELECT true FROM {s}.claims c"
        f" WHERE c.record_id = r.id AND c.purpose = {p} AND (c.expires_at IS NULL OR c.expires_at > {now})"
        + (f" AND c.subject = {subj} LIMIT 1)" if subject else " LIMIT 1)")
    )


def id_array(ids: Iterable[int]) -> str:
    """Record ids as one ``bigint[]`` literal (cast in the statement: ``%s::bigint[]``): one
    string to send, where psycopg dumps a list of ints element by element (and chooses each
    one's type), a tenth of a millisecond of a recall's CPU for a hundred ids."""
    return "{" + ",".join(map(str, map(int, ids))) + "}"


class PgReads:
    """The reads; the origin supplies :attr:`_s` (its schema), :attr:`_sealer` and :meth:`_reading`."""

    _s: str
    _sealer: Sealer
    _purposes_seen: set[tuple[str, str]]
    """(tenant, purpose) pairs this process has seen written (:meth:`knows_purpose`)."""

    def _reading(self) -> contextlib.AbstractContextManager[psycopg.Connection]:  # pragma: no cover
        raise NotImplementedError

    def snapshot_epoch(self) -> int | None:  # pragma: no cover
        """The epoch of this thread's snapshot, inside one; else None (the origin's)."""
        raise NotImplementedError

    def _snapshot_rows(  # pragma: no cover
        self, sql: str, args: Any, *, generic: bool = False, last: bool = False
    ) -> list[Any]:
        """Rows of ``sql``: prepared in this thread's snapshot (with its ``BEGIN`` if it has not
        begun: a deferred snapshot, whose statements then run on generic plans if ``generic``:
        :data:`PLANNED_GENERIC`, and which may end with it if ``last``), else unprepared on a
        pooled connection (the origin's)."""
        raise NotImplementedError

    def _holding_ahead(self) -> dict[int, tuple[Any, ...]] | None:  # pragma: no cover
        """Rows read ahead for this thread's snapshot's closing read (:mod:`.rows`); None outside one."""
        raise NotImplementedError

    def _dominant(self, tenant: str) -> bool:  # pragma: no cover
        """Whether ``tenant`` holds at least half of a store of :data:`GENERIC_FROM` records or
        more, as this process's word index counts them (the origin's)."""
        raise NotImplementedError

    # Results in binary: a vector's text form costs more to parse than the rest of a recall.
    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as conn:
            return conn.execute(sql.format(s=self._s), args, binary=True).fetchall()

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        with self._reading() as conn:
            return conn.execute(sql.format(s=self._s), args, binary=True).fetchone()

    def _vectors(self, sql: str, args: Sequence[Any], *, prepare: bool | None = None) -> dict[int, bytes]:
        """``(id, embedding)`` rows as ids and stored vectors, in the rows' order."""
        with self._reading() as conn:
            cur = conn.cursor(binary=True)
            cur.adapters.register_loader("vector", _RawVector)
            rows = cur.execute(sql.format(s=self._s), args, prepare=prepare).fetchall()
        return dict(zip((int(r[0]) for r in rows), stored_many([r[1] for r in rows]), strict=True))

    # -- records and claims
    def read(self, tenant: str, key: str, purpose: str, now: float) -> tuple[RecordRow, list[ClaimRow]] | None:
        with self._reading() as conn:
            s = self._s
            row = conn.execute(
                f"SELECT {REC_COLS} FROM {s}.records r WHERE r.tenant = %s AND r.key = %s AND "
                + NOT_QUARANTINED.format(s=s),
                (tenant, self._sealer.key_h(tenant, key)),
            ).fetchone()
            if row is None:
                return None
            claims = [
                claim_row(self._sealer, conn, c)
                for c in conn.execute(
                    f"SELECT {claim_cols(s)} FROM {s}.claims c JOIN {s}.records r ON r.id = c.record_id"
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
        args: list[Any] = [list(ids), tenant, purpose, now] + (
            [self._sealer.subject_h(tenant, subject)] if subject else []
        )
        if not vectors:
            rows = self._all(f"SELECT r.id FROM {{s}}.records r WHERE {live_filter(self._s, subject)}", args)
            return {int(r[0]): b"" for r in rows}
        return self._vectors(
            f"SELECT r.id, r.embedding FROM {{s}}.records r WHERE {live_filter(self._s, subject)}", args
        )

    # -- vectors: pgvector's HNSW index (efface.paths.indexed.OriginVectors searches it)
    def nearest(
        self, vector: np.ndarray, n: int, tenant: str, purpose: str, subject: str | None, now: float
    ) -> dict[int, bytes]:
        """Up to ``n`` live records nearest to ``vector`` (cosine), each with its stored vector
        (:func:`vector_bytes`), through the HNSW index on ``records.embedding``, the live
        conditions checked in the same statement
        (pgvector's iterative scan goes on through the graph while they filter rows out:
        :data:`HNSW_SETTINGS`). In a snapshot, in it: what the same recall resolves and reads."""
        s = self._s
        args: list[Any] = [tenant, purpose, now] + ([self._sealer.subject_h(tenant, subject)] if subject else [])
        sql = (
            f"SELECT r.id, r.embedding FROM {s}.records r WHERE r.tenant = %s AND r.embedding IS NOT NULL"
            f" AND {NOT_QUARANTINED.format(s=s)} AND EXISTS (SELECT 1 FROM {s}.claims c"
            f" WHERE c.record_id = r.id AND c.purpose = %s AND {LIVE}" + (" AND c.subject = %s)" if subject else ")")
        )
        query = np.asarray(vector, dtype=np.float32)
        # never a prepared statement: a generic plan, made without the tenant and the limit,
        # may leave the index for a scan of every row; a custom plan costs well under a millisecond
        return self._vectors(sql + " ORDER BY r.embedding <=> %s LIMIT %s", [*args, query, n], prepare=False)

    def nearest_scored(
        self,
        vector: np.ndarray,
        n: int,
        tenant: str,
        purpose: str,
        subject: str | None,
        now: float,
        also: Sequence[int],
        ahead: Sequence[int] = (),
    ) -> tuple[dict[int, float | None], dict[int, float | None]]:
        """:meth:`nearest` and the live ones of ``also`` (the words' candidates) in one
        statement (one snapshot, one round trip), each with its vector's dot product with
        ``vector`` computed by the server (pgvector's ``<#>``, in float32 as numpy's: the
        cosine recall judges it by) instead of the vector itself: 1.5 KB a row less to send
        and convert, for the 100 to 200 rows of a recall. ``ahead`` (some of ``also``): in a
        snapshot, their rows are read too, for its closing read (:mod:`.rows`)."""
        s = self._s
        # Named placeholders: the query's vector is sent (and parsed by the server) once for
        # its three uses; the ids as one array literal (psycopg dumps a list element by element).
        live = live_claim(s, subject, named=True)
        args: dict[str, Any] = {
            "q": np.asarray(vector, dtype=np.float32),
            "near": max(1, n // NEAR_SHARE),
            "tenant": tenant,
            "purpose": purpose,
            "now": now,
            "subject": self._sealer.subject_h(tenant, subject) if subject else None,
        }
        held = self._holding_ahead() if ahead else None
        ahead = sorted(set(ahead).intersection(also)) if held is not None else []
        pad = AHEAD_NONE if ahead else ""
        sql = (
            f"(SELECT r.id, -(r.embedding <#> %(q)s), true{pad} FROM {s}.records r WHERE r.embedding IS NOT NULL"
            f" AND {live} ORDER BY r.embedding <=> %(q)s LIMIT %(near)s)"
        )
        if ahead:  # before the branch of ``also``: the union's columns are typed by it
            sql += ahead_branch(s, live)
            args["ahead"] = id_array(ahead)
            aheads = set(ahead)
            also = [i for i in also if i not in aheads]
        if also:
            sql += (
                f" UNION ALL (SELECT r.id, -(r.embedding <#> %(q)s), false{pad} FROM {s}.records r"
                f" WHERE r.id = ANY(%(also)s::bigint[]) AND {live})"
            )
            args["also"] = id_array(also)
        # prepared only in a snapshot (planned for its own arguments, PLANNED_IN_SNAPSHOT, or for
        # a dominant tenant generically, PLANNED_GENERIC), elsewhere never, as :meth:`nearest`;
        # sent with the snapshot's BEGIN in one round trip where recall deferred it (DeferredSnapshot)
        rows = self._snapshot_rows(sql, args, generic=self._dominant(tenant), last=bool(ahead))
        near: dict[int, float | None] = {}
        others: dict[int, float | None] = {}
        for rid, dot, is_near, *row in rows:
            (near if is_near else others)[int(rid)] = None if dot is None else float(dot)
            if row and row[0] is not None and held is not None:  # read ahead
                held[int(rid)] = ahead_row(int(rid), tenant, row[0])
        return near, others

    def nearest_any(self, vector: np.ndarray, n: int, tenant: str) -> list[int]:
        query = np.asarray(vector, dtype=np.float32)
        rows = self._all(
            "SELECT id FROM {s}.records WHERE tenant = %s AND embedding IS NOT NULL ORDER BY embedding <=> %s LIMIT %s",
            (tenant, query, n),
        )
        return [int(r[0]) for r in rows]

    def vector_count(self, tenant: str) -> int:
        return int(
            self._one("SELECT count(*) FROM {s}.records WHERE tenant = %s AND embedding IS NOT NULL", (tenant,))[0]
        )

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        if not ids:
            return {}
        with self._reading() as conn:
            rows = conn.execute(f"SELECT {REC_COLS} FROM {self._s}.records r WHERE r.id = ANY(%s)", (list(ids),))
            return {int(r[0]): unseal_record(self._sealer, conn, r) for r in rows}

    def purposes(self, tenant: str) -> list[str]:
        return [r[0] for r in self._all("SELECT purpose FROM {s}.purposes WHERE tenant = %s ORDER BY 1", (tenant,))]

    def knows_purpose(self, tenant: str, purpose: str) -> bool:
        """Whether the tenant has written under ``purpose`` (:class:`~efface.origin.capabilities.KnownPurposes`):
        from what this process has seen, else looked up. Nothing deletes from the purposes
        table, so what was seen once stays true."""
        seen = self._purposes_seen
        if (tenant, purpose) in seen:
            return True
        row = self._one("SELECT 1 FROM {s}.purposes WHERE tenant = %s AND purpose = %s", (tenant, purpose))
        if row is None:
            return False
        if len(seen) >= PURPOSES_SEEN:
            seen.clear()
        seen.add((tenant, purpose))
        return True

    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]:
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT r.id, r.key_sealed, q.why, q.handle, q.since, r.sources, r.tenant FROM {self._s}.quarantine q"
                f" JOIN {self._s}.records r ON r.id = q.record_id WHERE q.tenant = %s",
                (tenant,),
            ).fetchall()
            opened = [(i, self._sealer.open(conn, ks, key_aad(tenant)), *rest) for i, ks, *rest in rows]
            # in key order (the keys are sealed: ordered here, as COLLATE "C" would)
            return [
                (int(i), k, why, h, float(t), self._sealer.open(conn, src, record_aad("sources", ten, k)))
                for i, k, why, h, t, src, ten in sorted(opened, key=lambda r: r[1])
            ]

    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]:
        by_h = {self._sealer.key_h(tenant, k): k for k in keys}
        rows = self._all("SELECT key FROM {s}.records WHERE tenant = %s AND key = ANY(%s)", (tenant, list(by_h)))
        return {by_h[r[0]] for r in rows}

    def scan_keys(
        self, tenant: str, purpose: str, prefix: str, subject: str | None, after: str | None, limit: int, now: float
    ) -> list[str]:
        # Keys are sealed (:mod:`.names`): the tenant's live keys are opened here, then
        # filtered by prefix and ordered as COLLATE "C" would (code points: UTF-8's byte order).
        s = self._s
        where = [
            "r.tenant = %s",
            NOT_QUARANTINED.format(s=s),
            f"EXISTS (SELECT 1 FROM {s}.claims c WHERE c.record_id = r.id AND c.purpose = %s AND {LIVE}"
            + (" AND c.subject = %s)" if subject else ")"),
        ]
        args: list[Any] = [tenant, purpose, now] + ([self._sealer.subject_h(tenant, subject)] if subject else [])
        with self._reading() as conn:
            rows = conn.execute(f"SELECT r.key_sealed FROM {s}.records r WHERE {' AND '.join(where)}", args).fetchall()
            keys = (self._sealer.open(conn, r[0], key_aad(tenant)) for r in rows)
            return sorted(k for k in keys if k.startswith(prefix) and (after is None or k > after))[:limit]

    # -- subjects and keys
    def all_subjects(self) -> list[tuple[str, str, str]]:
        with self._reading() as conn:
            return all_subjects(self._sealer, conn, self._s)

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
        with self._reading() as conn:
            return subject_keys(self._sealer, conn, self._s)

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
        return self._vectors("SELECT id, embedding FROM {s}.records WHERE id = ANY(%s)", (list(ids),))

    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]:
        rows = self._all("SELECT id, embedding FROM {s}.records WHERE tenant = %s ORDER BY id", (tenant,))
        return [(int(i), vector_bytes(v)) for i, v in rows]

    def turn_fields(self, tenant: str) -> Iterable[tuple[int, Any, Any, Any]]:
        # sealed: opened here, then read as the other origins read them
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT id, key_sealed, metadata FROM {self._s}.records WHERE tenant = %s ORDER BY id", (tenant,)
            ).fetchall()
            opened = [
                (
                    int(i),
                    self._sealer.open(
                        conn, m, record_aad("metadata", tenant, self._sealer.open(conn, k, key_aad(tenant)))
                    ),
                )
                for i, k, m in rows
            ]
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
        for table, col in RECORD_TABLES:
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


def all_subjects(sealer: Sealer, conn: psycopg.Connection, s: str) -> list[tuple[str, str, str]]:
    """(tenant, subject, identifiers) of every registered subject, names and identifiers opened."""
    rows = conn.execute(
        f"SELECT x.tenant, x.subject, d.name, x.identifiers FROM {s}.subjects x"
        f" LEFT JOIN {s}.data_keys d ON d.tenant = x.tenant AND d.subject = x.subject"
    ).fetchall()
    out = []
    for t, nh, name, ident in rows:
        subj = subject_name(sealer, conn, t, nh, name)
        out.append((t, subj, sealer.open(conn, ident, f"subjects|{t}|{subj}")))
    return out


def subject_keys(sealer: Sealer, conn: psycopg.Connection, s: str) -> list[tuple[str, str, bytes, bytes]]:
    """(tenant, subject, kid, key) of every live data key the store asked for (:meth:`PgReads.subject_keys`)."""
    rows = conn.execute(
        f"SELECT tenant, subject, name, kid, wrapped, kek_id FROM {s}.data_keys WHERE subject_h IS NOT NULL"
        " AND name IS NOT NULL ORDER BY created_at, kid"
    ).fetchall()
    unwrap = sealer.keys.unwrap_row
    return [
        (t, subject_name(sealer, conn, t, nh, name), bytes(kid), unwrap(kek, bytes(kid), bytes(w)))
        for t, nh, name, kid, w, kek in rows
    ]
