"""A write transaction on the PostgreSQL origin: records, claims and derivations.

It runs on the origin's writer connection inside the transaction :mod:`.epochs` opened (the
epoch already assigned). Content is sealed here, in this process, before it is sent
(:mod:`.sealing`); reads inside the transaction see its own writes, unsealed. The rest of
:class:`efface.origin.base.Tx` (receipts, ledger, subjects, keys, backups) is in
:mod:`.txmore`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...text import words as text_words
from ..base import ClaimRow, NewRecord, RecordRow
from .names import claim_cols, claim_row, key_aad
from .reads import to_vector, vector_bytes
from .rows import REC_COLS, record_aad, unseal_record
from .txmore import TxMore

if TYPE_CHECKING:
    import psycopg

PostgresOrigin = Any
"""The origin this part serves (:class:`.origin.PostgresOrigin`), untyped here: the origin
imports this module, and importing it back, even for types, would close a circle."""


_CLAIM = (
    "INSERT INTO {s}.claims(record_id, subject, purpose, basis, expires_at, created_at) VALUES (%s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (record_id, subject, purpose, basis) DO UPDATE SET expires_at = excluded.expires_at,"
    " created_at = excluded.created_at"
)
_CLAIMS = (
    "INSERT INTO {s}.claims(record_id, subject, purpose, basis, expires_at, created_at)"
    " SELECT u.r, u.s, u.p, u.b, u.e, %s FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[],"
    " %s::float8[]) AS u(r, s, p, b, e)"
    " ON CONFLICT (record_id, subject, purpose, basis) DO UPDATE SET expires_at = excluded.expires_at,"
    " created_at = excluded.created_at"
)
_UPSERT = (
    "INSERT INTO {s}.records(tenant, key, key_sealed, text, metadata, sources, sealed_by, embedding, created_at,"
    " updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, key) DO UPDATE SET"
    " key_sealed = excluded.key_sealed, text = excluded.text, metadata = excluded.metadata,"
    " sources = excluded.sources, sealed_by = excluded.sealed_by, embedding = excluded.embedding,"
    " updated_at = excluded.updated_at RETURNING id"
)


class PostgresTx(TxMore):
    """One open write transaction on the origin (see the module docstring)."""

    def __init__(self, origin: PostgresOrigin, conn: psycopg.Connection, epoch: int) -> None:
        super().__init__(origin, conn, epoch)
        self.old_texts: dict[int, str] = {}
        """Each changed record's text as it was before this transaction."""
        self.staged: list[tuple[str, list[int], list[int], dict[int, str]]] = []
        """What the word index staged in this transaction, applied in memory once it commits."""

    # -- records and claims -------------------------------------------------------------
    def _remember(self, rows: Iterable[Sequence[Any]]) -> None:
        """Note old texts from ``(id, tenant, key_sealed, text)`` rows as stored."""
        for rid, tenant, key_sealed, text in rows:
            if rid not in self.old_texts:
                key = self._open(key_sealed, key_aad(tenant))
                self.old_texts[int(rid)] = self._open(text, record_aad("text", tenant, key))

    def upsert(self, tenant: str, rec: NewRecord, now: float) -> int:
        return self.upsert_many(tenant, [rec], now)[0]

    def upsert_many(
        self, tenant: str, recs: Sequence[NewRecord], now: float, known: Mapping[str, int] | None = None
    ) -> list[int]:
        """:meth:`upsert` of each record in order, one ``executemany`` per table (psycopg
        pipelines them: one round trip per table, not per record); returns the ids in order."""
        if not recs:
            return []
        key_h = self._o._sealer.key_h
        if known is None:
            existing = self._all(
                "SELECT id, tenant, key_sealed, text FROM {s}.records WHERE tenant = %s AND key = ANY(%s)",
                (tenant, [key_h(tenant, r.key) for r in recs]),
            )
        else:  # looked up earlier in this transaction: only those ids (a batch of new keys asks nothing)
            ids = [known[r.key] for r in recs if r.key in known]
            existing = (
                self._all("SELECT id, tenant, key_sealed, text FROM {s}.records WHERE id = ANY(%s)", (ids,))
                if ids
                else []
            )
        self._remember(existing)
        self._prefetch_kids(tenant, [r.subject for r in recs], now)
        rows = []
        for rec in recs:
            kid = self._kid(tenant, rec.subject, now)
            rows.append(
                (
                    tenant,
                    key_h(tenant, rec.key),
                    self._seal(kid, rec.key, key_aad(tenant)),
                    self._seal(kid, rec.text, record_aad("text", tenant, rec.key)),
                    self._seal(kid, rec.metadata, record_aad("metadata", tenant, rec.key)),
                    self._seal(kid, json.dumps(list(rec.sources)), record_aad("sources", tenant, rec.key)),
                    kid,
                    to_vector(rec.embedding),
                    now,
                    now,
                )
            )
        cur = self._c.cursor()
        cur.executemany(_UPSERT.format(s=self._s), rows, returning=True)
        rids = []
        while True:
            got = cur.fetchone()
            assert got is not None
            rids.append(int(got[0]))
            if not cur.nextset():
                break
        # ids are never reused: only a record that existed can have lineage rows
        old = [int(r[0]) for r in existing]
        if old:
            self._c.execute(f"DELETE FROM {self._s}.lineage WHERE record_id = ANY(%s)", (old,))
        lineage = [
            (rid, tenant, key_h(tenant, k))
            for rid, rec in zip(rids, recs, strict=True)
            for k in dict.fromkeys(rec.sources)
        ]
        if lineage:
            cur.executemany(
                f"INSERT INTO {self._s}.lineage(record_id, tenant, source_key) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                lineage,
            )
        # one statement for the batch's claims (one per record: no row is hit twice)
        self._c.execute(
            _CLAIMS.format(s=self._s),
            (
                now,
                rids,
                [self._subject_h(tenant, r.subject) for r in recs],
                [r.purpose for r in recs],
                [r.basis for r in recs],
                [r.expires_at for r in recs],
            ),
        )
        return rids

    def _set_lineage(self, rid: int, tenant: str, sources: Sequence[str]) -> None:
        self._c.execute(f"DELETE FROM {self._s}.lineage WHERE record_id = %s", (rid,))
        if sources:
            self._c.cursor().executemany(
                f"INSERT INTO {self._s}.lineage(record_id, tenant, source_key) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(rid, tenant, self._o._sealer.key_h(tenant, k)) for k in dict.fromkeys(sources)],
            )

    def add_claim(
        self, record_id: int, subject: str, purpose: str, basis: str, expires_at: float | None, now: float
    ) -> None:
        row = self._one("SELECT tenant FROM {s}.records WHERE id = %s", (record_id,))
        if row is None:
            return
        self._kid(row[0], subject, now)  # the subject's name is kept (sealed) with its data key
        self._c.execute(
            _CLAIM.format(s=self._s),
            (record_id, self._subject_h(row[0], subject), purpose, basis, expires_at, now),
        )

    def record_id(self, tenant: str, key: str) -> int | None:
        row = self._one(
            "SELECT id FROM {s}.records WHERE tenant = %s AND key = %s", (tenant, self._o._sealer.key_h(tenant, key))
        )
        return None if row is None else int(row[0])

    def record_ids(self, tenant: str, keys: Sequence[str]) -> dict[str, int]:
        by_h = {self._o._sealer.key_h(tenant, k): k for k in keys}
        rows = self._all("SELECT key, id FROM {s}.records WHERE tenant = %s AND key = ANY(%s)", (tenant, list(by_h)))
        return {by_h[k]: int(i) for k, i in rows}

    def record(self, record_id: int) -> RecordRow | None:
        row = self._one(f"SELECT {REC_COLS} FROM {{s}}.records r WHERE r.id = %s", (record_id,))
        return None if row is None else unseal_record(self._o._sealer, self._c, row)

    def _claims(self, where: str, args: Sequence[Any]) -> list[ClaimRow]:
        sql = f"SELECT {claim_cols(self._s)} FROM {{s}}.claims c JOIN {{s}}.records r ON r.id = c.record_id"
        return [claim_row(self._o._sealer, self._c, r) for r in self._all(f"{sql} WHERE {where} ORDER BY c.id", args)]

    def match_claims(
        self, tenant: str, subject: str | None, purpose: str | None, prefix: str | None, key: str | None
    ) -> list[ClaimRow]:
        where, args = ["r.tenant = %s"], list[Any]([tenant])
        seal = self._o._sealer
        for cond, value in (
            ("c.subject = %s", None if subject is None else seal.subject_h(tenant, subject)),
            ("c.purpose = %s", purpose),
            ("r.key = %s", None if key is None else seal.key_h(tenant, key)),
        ):
            if value is not None:
                where.append(cond)
                args.append(value)
        claims = self._claims(" AND ".join(where), args)
        # keys are sealed (:mod:`.names`): a prefix is matched on the opened keys
        return claims if prefix is None else [c for c in claims if c.key.startswith(prefix)]

    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]:
        rows = self._all(
            f"SELECT r.tenant, {claim_cols(self._s)} FROM {{s}}.claims c JOIN {{s}}.records r ON r.id = c.record_id"
            " WHERE c.expires_at IS NOT NULL AND c.expires_at <= %s ORDER BY r.tenant, c.id",
            (now,),
        )
        return [(r[0], claim_row(self._o._sealer, self._c, r[1:])) for r in rows]

    def release(self, claim_ids: Sequence[int]) -> None:
        cur = self._c.execute(f"DELETE FROM {self._s}.claims WHERE id = ANY(%s) RETURNING subject", (list(claim_ids),))
        self.note_names(r[0] for r in cur.fetchall())

    def remaining_claims(self, record_ids: Sequence[int]) -> dict[int, list[ClaimRow]]:
        out: dict[int, list[ClaimRow]] = {}
        for c in self._claims("c.record_id = ANY(%s)", (list(record_ids),)):
            out.setdefault(c.record_id, []).append(c)
        return out

    def content_of(self, record_ids: Sequence[int]) -> dict[int, tuple[str, str, bytes, str]]:
        out = {}
        for rid, tenant, key_sealed, text, emb, meta, sources in self._all(
            "SELECT id, tenant, key_sealed, text, embedding, metadata, sources FROM {s}.records WHERE id = ANY(%s)",
            (list(record_ids),),
        ):
            self.note_stored("sealed", key_sealed, text, meta, sources)
            key = self._open(key_sealed, key_aad(tenant))
            self.note_vector(emb)
            out[int(rid)] = (
                key,
                self._open(text, record_aad("text", tenant, key)),
                vector_bytes(emb),
                self._open(meta, record_aad("metadata", tenant, key)),
            )
        return out

    def erase_records(self, record_ids: Sequence[int]) -> None:
        """Delete the records and everything that hangs off them."""
        ids = list(record_ids)
        if not ids:
            return
        self._remember(self._all("SELECT id, tenant, key_sealed, text FROM {s}.records WHERE id = ANY(%s)", (ids,)))
        # Subject hashes are noted for the evidence, not the keys': a replace erases a record
        # and writes its key again in the same transaction, so the key's hash lives on.
        for table, col, named in (
            ("lineage", "record_id", "NULL"),
            ("mentions", "record_id", "subject"),
            ("quarantine", "record_id", "NULL"),
            ("reasons", "record_id", "NULL"),
            ("claims", "record_id", "subject"),
            ("records", "id", "NULL"),
        ):
            cur = self._c.execute(f"DELETE FROM {self._s}.{table} WHERE {col} = ANY(%s) RETURNING {named}", (ids,))
            self.note_names(r[0] for r in cur.fetchall())

    def replace_text(self, record_id: int, text: str, embedding: bytes, now: float) -> None:
        row = self._one(
            "SELECT tenant, key_sealed, sealed_by, text, embedding FROM {s}.records WHERE id = %s", (record_id,)
        )
        if row is None:
            return
        tenant, key_sealed, kid, old, old_emb = row
        self._remember([(record_id, tenant, key_sealed, old)])
        key = self._open(key_sealed, key_aad(tenant))
        self.note_stored("sealed", old)
        self.note_vector(old_emb)
        self._c.execute(
            f"UPDATE {self._s}.records SET text = %s, embedding = %s, updated_at = %s WHERE id = %s",
            (self._seal(bytes(kid), text, record_aad("text", tenant, key)), to_vector(embedding), now, record_id),
        )

    def _rewrite(self, record_id: int, column: str, value: str) -> None:
        row = self._one(
            f"SELECT tenant, key_sealed, sealed_by, {column} FROM {{s}}.records WHERE id = %s", (record_id,)
        )
        if row is None:
            return
        tenant, key_sealed, kid, was = row
        key = self._open(key_sealed, key_aad(tenant))
        self.note_stored("sealed", was)
        self._c.execute(
            f"UPDATE {self._s}.records SET {column} = %s WHERE id = %s",
            (self._seal(bytes(kid), value, record_aad(column, tenant, key)), record_id),
        )

    def set_sources(self, record_id: int, tenant: str, sources: Sequence[str]) -> None:
        self._rewrite(record_id, "sources", json.dumps(list(sources)))
        self._set_lineage(record_id, tenant, sources)

    def forget_sources(self, tenant: str, keys: Sequence[str], marker: str) -> list[int]:
        gone = set(keys)
        rewritten = sorted({rid for rid, _key in self.derived_from(tenant, keys)})
        for rid in rewritten:
            rec = self.record(rid)
            assert rec is not None
            self.set_sources(
                rid, tenant, list(dict.fromkeys(marker if k in gone else k for k in json.loads(rec.sources)))
            )
        return rewritten

    def set_metadata(self, record_id: int, metadata: str) -> None:
        self._rewrite(record_id, "metadata", metadata)

    def set_times(self, record_id: int, created_at: float, updated_at: float) -> None:
        self._c.execute(
            f"UPDATE {self._s}.records SET created_at = %s, updated_at = %s WHERE id = %s",
            (created_at, updated_at, record_id),
        )

    def count_live_records(self, now: float) -> int:
        row = self._one(
            "SELECT count(DISTINCT record_id) FROM {s}.claims c WHERE c.expires_at IS NULL OR c.expires_at > %s", (now,)
        )
        return int(row[0])

    # -- derivations: lineage, mentions, quarantine ----------------------------------------
    def set_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None:
        self._c.execute(f"DELETE FROM {self._s}.mentions WHERE record_id = %s", (record_id,))
        self.add_mentions(record_id, tenant, subjects)

    def add_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None:
        rows = [(record_id, tenant, self._subject_h(tenant, subj)) for subj in dict.fromkeys(subjects)]
        if rows:
            self._c.cursor().executemany(
                f"INSERT INTO {self._s}.mentions(record_id, tenant, subject) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                rows,
            )

    def mentioning(self, tenant: str, subject: str) -> list[tuple[int, str]]:
        rows = self._all(
            "SELECT m.record_id, r.key_sealed FROM {s}.mentions m JOIN {s}.records r ON r.id = m.record_id"
            " WHERE m.tenant = %s AND m.subject = %s ORDER BY m.record_id",
            (tenant, self._subject_h(tenant, subject)),
        )
        return [(int(i), self._open(k, key_aad(tenant))) for i, k in rows]

    def derived_from(self, tenant: str, keys: Sequence[str]) -> list[tuple[int, str]]:
        rows = self._all(
            "SELECT DISTINCT l.record_id, r.key_sealed FROM {s}.lineage l JOIN {s}.records r ON r.id = l.record_id"
            " WHERE l.tenant = %s AND l.source_key = ANY(%s) ORDER BY 1",
            (tenant, [self._o._sealer.key_h(tenant, k) for k in keys]),
        )
        return [(int(i), self._open(k, key_aad(tenant))) for i, k in rows]

    def records_with_phrase(self, tenant: str, text: str, limit: int = 100000) -> list[tuple[int, str]]:
        """Records of the tenant whose words contain the words of ``text`` in order: candidates
        from the word index (brought up to the committed state first) and from this
        transaction's own changes, each checked on its text as this transaction sees it."""
        phrase = text_words(text)
        if not phrase:
            return []
        candidates = set(self._o.text.holding_all(phrase)) | set(self.old_texts)
        for _tenant, puts, _drops, _texts in self.staged:
            candidates.update(puts)
        if not candidates:
            return []
        n, out = len(phrase), []
        rows = self._all(
            f"SELECT {REC_COLS} FROM {{s}}.records r WHERE r.id = ANY(%s) AND r.tenant = %s ORDER BY r.id",
            (sorted(candidates), tenant),
        )
        for row in rows:
            rec = unseal_record(self._o._sealer, self._c, row)
            ws = text_words(rec.text)
            if any(ws[i : i + n] == phrase for i in range(len(ws) - n + 1)):
                out.append((rec.id, rec.text))
                if len(out) >= limit:
                    break
        return out

    def quarantine(self, record_id: int, tenant: str, why: str, handle: str, now: float) -> None:
        self._c.execute(
            f"INSERT INTO {self._s}.quarantine(record_id, tenant, why, handle, since) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (record_id) DO NOTHING",
            (record_id, tenant, why, handle, now),
        )

    def is_quarantined(self, record_id: int) -> bool:
        return self._one("SELECT 1 FROM {s}.quarantine WHERE record_id = %s", (record_id,)) is not None

    def lift_quarantine(self, record_id: int) -> bool:
        return self._c.execute(f"DELETE FROM {self._s}.quarantine WHERE record_id = %s", (record_id,)).rowcount > 0

    def save_reason(self, record_id: int, tenant: str, reason_h: str, text: str, now: float) -> None:
        row = self._one("SELECT sealed_by FROM {s}.records WHERE id = %s", (record_id,))
        kid = bytes(row[0]) if row is not None else self._kid(tenant, "", now)
        self._c.execute(
            f"INSERT INTO {self._s}.reasons(record_id, tenant, reason_h, text, created_at) VALUES (%s, %s, %s, %s, %s)",
            (record_id, tenant, reason_h, self._seal(kid, text, f"reasons|{record_id}|{reason_h}"), now),
        )

    def reasons_of(self, record_ids: Sequence[int]) -> list[str]:
        rows = self._all(
            "SELECT record_id, reason_h, text FROM {s}.reasons WHERE record_id = ANY(%s) ORDER BY created_at",
            (list(record_ids),),
        )
        return [self._open(t, f"reasons|{rid}|{h}") for rid, h, t in rows]
