"""A write transaction on the SQLite origin (``BEGIN IMMEDIATE`` on the writer connection)."""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import apsw

from ...text import words
from ..base import ClaimRow, NewRecord, RecordRow
from ..ledger import GENESIS, chain_hash
from .keys import BackupRows
from .rows import CLAIM_COLS, REC_COLS, claim_row, in_chunks, record_row
from .schema import REINDEX

_UPSERT = (
    "INSERT INTO records(tenant, key, text, metadata, sources, embedding, created_at, updated_at)"
    " VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(tenant, key) DO UPDATE SET"
    " text=excluded.text, metadata=excluded.metadata, sources=excluded.sources,"
    " embedding=excluded.embedding, updated_at=excluded.updated_at RETURNING id"
)
# Restating a claim replaces its expiry: the newest statement of a scope wins.
_CLAIM = (
    "INSERT INTO claims(record_id, subject, purpose, basis, expires_at, created_at)"
    " VALUES(?,?,?,?,?,?) ON CONFLICT(record_id, subject, purpose, basis) DO UPDATE SET"
    " expires_at=excluded.expires_at, created_at=excluded.created_at"
)


Fresh: TypeAlias = tuple[str, str, float | None, bytes]
"""A record created in a transaction, as written: tenant, its claim's purpose and expiry, and
its stored vector."""


def _sources_json(sources: Sequence[str]) -> str:
    return json.dumps(list(sources)) if sources else "[]"


class SQLiteTx(BackupRows):
    """An open ``BEGIN IMMEDIATE`` transaction on the origin."""

    def __init__(self, conn: apsw.Connection, epoch: int):
        # Any: apsw types rows as tuples of any SQLite value; each method says what it returns.
        self._c: Any = conn
        self.epoch = epoch
        self.old_texts: dict[int, str] = {}
        """Each changed record's text as it was before this transaction: the full-text index
        needs it to delete exactly the tokens it holds for that record."""
        self.text_changes: list[Any] = []
        """What this transaction changed in the word index, for its postings in memory
        (``text.Change``), applied once it commits."""
        self.touched: list[int] = []
        """Records this transaction wrote or claimed (their liveness or vector may have changed),
        for the origin's copy of liveness in memory (:mod:`.liveness`), read again once it
        commits. Deletions and quarantine are noted by that module's triggers instead."""
        self.fresh: dict[int, Fresh] = {}
        """Records this transaction created, as it wrote them (tenant, the one claim's purpose
        and expiry, the stored vector): the copy of liveness takes these as they are instead of
        reading them back, unless something else in the transaction touched them too (then
        they are in :attr:`touched` or noted by a trigger, and read back)."""

    def _remember(self, record_id: int | None = None, tenant: str | None = None, key: str | None = None) -> None:
        if record_id is None:
            row = self._c.execute("SELECT id, text FROM records WHERE tenant=? AND key=?", (tenant, key)).fetchone()
        else:
            row = self._c.execute("SELECT id, text FROM records WHERE id=?", (record_id,)).fetchone()
        if row is not None:
            self.old_texts.setdefault(row[0], row[1])

    @property
    def connection(self) -> Any:
        """For the SQLite text index's staging, which writes in this transaction."""
        return self._c

    def upsert(self, tenant: str, rec: NewRecord, now: float) -> int:
        self._remember(tenant=tenant, key=rec.key)
        (rid,) = self._c.execute(
            _UPSERT, (tenant, rec.key, rec.text, rec.metadata, _sources_json(rec.sources), rec.embedding, now, now)
        ).fetchone()
        self._c.execute("DELETE FROM lineage WHERE record_id=?", (rid,))
        self._c.executemany(
            "INSERT INTO lineage(record_id, tenant, source_key) VALUES(?,?,?)",
            [(rid, tenant, s) for s in rec.sources],
        )
        self._c.execute(_CLAIM, (rid, rec.subject, rec.purpose, rec.basis, rec.expires_at, now))
        self._noted(tenant, [rid], [rec], self.old_texts)
        return rid

    def _noted(self, tenant: str, rids: Sequence[int], recs: Sequence[NewRecord], existed: Container[int]) -> None:
        """Note upserted records for the copy of liveness: the brand-new ones (not in
        ``existed``: ids are never reused) with their rows as written, the others to be read
        back."""
        for rid, r in zip(rids, recs, strict=True):
            if rid in existed:
                self.touched.append(rid)
            else:
                self.fresh[rid] = (tenant, r.purpose, r.expires_at, r.embedding)

    def upsert_many(
        self, tenant: str, recs: Sequence[NewRecord], now: float, known: Mapping[str, int] | None = None
    ) -> list[int]:
        """:meth:`upsert` of each record, in order, with one statement per table for the
        whole batch (``executemany`` runs one prepared statement over every row): the same
        rows as that many ``upsert`` calls. Returns the record ids, in order. ``known``: the
        ids these keys had, if the caller looked them up earlier in this transaction (ids
        erased since are fine: they are looked up again)."""
        existing: dict[int, str] = {}
        if known is None:
            for chunk, marks in in_chunks([r.key for r in recs]):
                existing.update(
                    self._c.execute(
                        f"SELECT id, text FROM records WHERE tenant=? AND key IN ({marks})", [tenant, *chunk]
                    )
                )
        else:
            for chunk, marks in in_chunks(list(known.values())):
                existing.update(self._c.execute(f"SELECT id, text FROM records WHERE id IN ({marks})", chunk))
        for rid, text in existing.items():
            self.old_texts.setdefault(rid, text)
        rids = [
            row[0]
            for row in self._c.executemany(
                _UPSERT,
                [(tenant, r.key, r.text, r.metadata, _sources_json(r.sources), r.embedding, now, now) for r in recs],
            )
        ]
        self._noted(tenant, rids, recs, existing)
        # Ids are never reused (AUTOINCREMENT): only a record that existed can have lineage rows.
        self._c.executemany("DELETE FROM lineage WHERE record_id=?", [(rid,) for rid in rids if rid in existing])
        self._c.executemany(
            "INSERT INTO lineage(record_id, tenant, source_key) VALUES(?,?,?)",
            [(rid, tenant, s) for rid, r in zip(rids, recs, strict=True) for s in r.sources],
        )
        self._c.executemany(
            _CLAIM,
            [(rid, r.subject, r.purpose, r.basis, r.expires_at, now) for rid, r in zip(rids, recs, strict=True)],
        )
        return rids

    def add_claim(
        self, record_id: int, subject: str, purpose: str, basis: str, expires_at: float | None, now: float
    ) -> None:
        self._c.execute(_CLAIM, (record_id, subject, purpose, basis, expires_at, now))
        self.touched.append(record_id)

    def record_id(self, tenant: str, key: str) -> int | None:
        row = self._c.execute("SELECT id FROM records WHERE tenant=? AND key=?", (tenant, key)).fetchone()
        return row[0] if row else None

    def record_ids(self, tenant: str, keys: Sequence[str]) -> dict[str, int]:
        """The id of each of ``keys`` that names a record in the tenant."""
        out: dict[str, int] = {}
        for chunk, marks in in_chunks(keys):
            out.update(
                self._c.execute(f"SELECT key, id FROM records WHERE tenant=? AND key IN ({marks})", [tenant, *chunk])
            )
        return out

    def match_claims(
        self, tenant: str, subject: str | None, purpose: str | None, prefix: str | None, key: str | None
    ) -> list[ClaimRow]:
        where, args = ["r.tenant=?"], list[Any]([tenant])
        if subject is not None:
            where.append("c.subject=?")
            args.append(subject)
        if purpose is not None:
            where.append("c.purpose=?")
            args.append(purpose)
        if prefix is not None:
            # The range lets SQLite use the (tenant, key) index; substr() is the exact test.
            where.append("r.key>=? AND substr(r.key, 1, ?)=?")
            args += [prefix, len(prefix), prefix]
        if key is not None:
            where.append("r.key=?")
            args.append(key)
        sql = f"SELECT {CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id WHERE {' AND '.join(where)}"
        return [claim_row(r) for r in self._c.execute(sql, args)]

    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]:
        rows = self._c.execute(
            f"SELECT r.tenant, {CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id"
            " WHERE c.expires_at IS NOT NULL AND c.expires_at<=? ORDER BY r.tenant",
            (now,),
        ).fetchall()
        return [(r[0], claim_row(r[1:])) for r in rows]

    def release(self, claim_ids: Sequence[int]) -> None:
        self._c.executemany("DELETE FROM claims WHERE id=?", [(i,) for i in claim_ids])

    def remaining_claims(self, record_ids: Sequence[int]) -> dict[int, list[ClaimRow]]:
        """The claims left on each of ``record_ids`` (records with none are absent)."""
        out: dict[int, list[ClaimRow]] = {}
        for chunk, marks in in_chunks(record_ids):
            for r in self._c.execute(
                f"SELECT {CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id WHERE c.record_id IN ({marks})",
                chunk,
            ):
                out.setdefault(r[1], []).append(claim_row(r))
        return out

    def content_of(self, record_ids: Sequence[int]) -> dict[int, tuple[str, str, bytes, str]]:
        """Key, text, embedding and metadata (JSON, as stored) of records about to be erased
        (for their fingerprints)."""
        out: dict[int, tuple[str, str, bytes, str]] = {}
        for chunk, marks in in_chunks(record_ids):
            for rid, key, text, emb, meta in self._c.execute(
                f"SELECT id, key, text, embedding, metadata FROM records WHERE id IN ({marks})", chunk
            ):
                out[rid] = (key, text, emb, meta)
        return out

    def save_evidence(
        self,
        handle: str,
        tenant_h: str,
        erased_ids: bytes,
        quarantined_ids: bytes,
        paths: dict[str, bytes],
        fingerprints: bytes,
        now: float,
    ) -> None:
        """What verify needs later, without the content: record ids, each read path's probe
        evidence, and the keyed fingerprints of the erased bytes."""
        self._c.execute(
            "INSERT INTO evidence(handle, tenant_h, epoch, erased_ids, quarantined_ids, anchors, tokens,"
            " fingerprints, created_at) VALUES(?,?,?,?,?,X'',X'',?,?)",
            (handle, tenant_h, self.epoch, erased_ids, quarantined_ids, fingerprints, now),
        )
        self.save_path_evidence(handle, paths)

    def erase_records(self, record_ids: Sequence[int]) -> None:
        """Delete the records and everything that hangs off them (set-based)."""
        if record_ids:  # in the same transaction: a crash cannot lose the need to rebuild
            self._c.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (REINDEX,))
        for chunk, marks in in_chunks(record_ids):
            self.old_texts.update(
                (rid, text)
                for rid, text in self._c.execute(f"SELECT id, text FROM records WHERE id IN ({marks})", chunk)
                if rid not in self.old_texts
            )
            for table, col in (
                ("lineage", "record_id"),
                ("mentions", "record_id"),
                ("quarantine", "record_id"),
                ("reasons", "record_id"),
                ("claims", "record_id"),
                ("records", "id"),
            ):
                self._c.execute(f"DELETE FROM {table} WHERE {col} IN ({marks})", chunk)

    # -- derivations (lineage, mentions, quarantine) ------------------------------------
    def set_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None:
        self._c.execute("DELETE FROM mentions WHERE record_id=?", (record_id,))
        self.add_mentions(record_id, tenant, subjects)

    def add_mentions(self, record_id: int, tenant: str, subjects: Iterable[str]) -> None:
        self._c.executemany(
            "INSERT OR IGNORE INTO mentions(record_id, tenant, subject) VALUES(?,?,?)",
            [(record_id, tenant, s) for s in subjects],
        )

    def mentioning(self, tenant: str, subject: str) -> list[tuple[int, str]]:
        return self._c.execute(
            "SELECT m.record_id, r.key FROM mentions m JOIN records r ON r.id=m.record_id"
            " WHERE m.tenant=? AND m.subject=?",
            (tenant, subject),
        ).fetchall()

    def derived_from(self, tenant: str, keys: Sequence[str]) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for chunk, marks in in_chunks(keys):
            out += self._c.execute(
                "SELECT DISTINCT l.record_id, r.key FROM lineage l JOIN records r ON r.id=l.record_id"
                f" WHERE l.tenant=? AND l.source_key IN ({marks})",
                [tenant, *chunk],
            ).fetchall()
        return out

    def forget_sources(self, tenant: str, keys: Sequence[str], marker: str) -> list[int]:
        """In every record whose lineage names one of ``keys`` (erased), put ``marker`` in
        their place, in its lineage and its ``sources``: a kept key is personal data left
        behind (docs/concepts.md §8). Returns the ids of the records rewritten."""
        gone = set(keys)
        rewritten = sorted({rid for rid, _key in self.derived_from(tenant, keys)})
        for rid in rewritten:
            (raw,) = self._c.execute("SELECT sources FROM records WHERE id=?", (rid,)).fetchone()
            sources = list(dict.fromkeys(marker if s in gone else s for s in json.loads(raw)))
            self.set_sources(rid, tenant, sources)
        if rewritten:  # the erased keys sat in lineage's index pages too
            self._c.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (REINDEX,))
        return rewritten

    def replace_text(self, record_id: int, text: str, embedding: bytes, now: float) -> None:
        self._remember(record_id)
        self._c.execute(
            "UPDATE records SET text=?, embedding=?, updated_at=? WHERE id=?", (text, embedding, now, record_id)
        )
        self.touched.append(record_id)

    def set_sources(self, record_id: int, tenant: str, sources: Sequence[str]) -> None:
        self._c.execute("UPDATE records SET sources=? WHERE id=?", (json.dumps(list(sources)), record_id))
        self._c.execute("DELETE FROM lineage WHERE record_id=?", (record_id,))
        self._c.executemany(
            "INSERT INTO lineage(record_id, tenant, source_key) VALUES(?,?,?)",
            [(record_id, tenant, s) for s in sources],
        )

    def record(self, record_id: int) -> RecordRow | None:
        row = self._c.execute(f"SELECT {REC_COLS} FROM records r WHERE r.id=?", (record_id,)).fetchone()
        return record_row(row) if row else None

    def quarantine(self, record_id: int, tenant: str, why: str, handle: str, now: float) -> None:
        self._c.execute(
            "INSERT INTO quarantine(record_id, tenant, why, handle, since) VALUES(?,?,?,?,?)"
            " ON CONFLICT(record_id) DO NOTHING",
            (record_id, tenant, why, handle, now),
        )

    def is_quarantined(self, record_id: int) -> bool:
        return self._c.execute("SELECT 1 FROM quarantine WHERE record_id=?", (record_id,)).fetchone() is not None

    def save_reason(self, record_id: int, tenant: str, reason_h: str, text: str, now: float) -> None:
        self._c.execute(
            "INSERT INTO reasons(record_id, tenant, reason_h, text, created_at) VALUES(?,?,?,?,?)",
            (record_id, tenant, reason_h, text, now),
        )

    def reasons_of(self, record_ids: Sequence[int]) -> list[str]:
        out: list[str] = []
        for chunk, marks in in_chunks(record_ids):
            out += [r[0] for r in self._c.execute(f"SELECT text FROM reasons WHERE record_id IN ({marks})", chunk)]
        return out

    def lift_quarantine(self, record_id: int) -> bool:
        self._c.execute("DELETE FROM quarantine WHERE record_id=?", (record_id,))
        return self._c.changes() > 0

    def subject_has_claims(self, tenant: str, subject: str) -> bool:
        return (
            self._c.execute(
                "SELECT 1 FROM claims c JOIN records r ON r.id=c.record_id WHERE r.tenant=? AND c.subject=? LIMIT 1",
                (tenant, subject),
            ).fetchone()
            is not None
        )

    def drop_subject(self, tenant: str, subject: str) -> bool:
        """Erase a subject's registered identifiers and the mention rows that point at it."""
        self._c.execute("DELETE FROM mentions WHERE tenant=? AND subject=?", (tenant, subject))
        self._c.execute("DELETE FROM subjects WHERE tenant=? AND subject=?", (tenant, subject))
        dropped = self._c.changes() > 0
        if dropped:  # index pages keep old cells in their gaps: the compactor rebuilds them
            self._c.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (REINDEX,))
        return dropped

    def policy(self, tenant: str) -> tuple[str, str | None]:
        row = self._c.execute("SELECT policy, reason FROM policies WHERE tenant=?", (tenant,)).fetchone()
        return (row[0], row[1]) if row else ("quarantine", None)

    def set_policy(self, tenant: str, policy: str, reason: str | None) -> None:
        self._c.execute(
            "INSERT INTO policies(tenant, policy, reason) VALUES(?,?,?) ON CONFLICT(tenant)"
            " DO UPDATE SET policy=excluded.policy, reason=excluded.reason",
            (tenant, policy, reason),
        )

    def drop_policy(self, tenant: str) -> str | None:
        row = self._c.execute("DELETE FROM policies WHERE tenant=? RETURNING reason", (tenant,)).fetchone()
        return None if row is None else row[0]

    def records_with_phrase(self, tenant: str, text: str, limit: int = 100000) -> list[tuple[int, str]]:
        """Records of the tenant whose words contain the words of ``text`` in order."""
        found = words(text)
        if not found:
            return []
        return self._c.execute(
            "SELECT r.id, r.text FROM fts f JOIN records r ON r.id=f.rowid WHERE fts MATCH ? AND r.tenant=? LIMIT ?",
            ('"' + " ".join(found) + '"', tenant, limit),
        ).fetchall()

    # -- reads inside the transaction (backups, restores, release) ----------------------
    def subject_identifiers(self, tenant: str, subject: str) -> str | None:
        """The subject's registered identifiers (JSON), or None if it has none registered."""
        row = self._c.execute(
            "SELECT identifiers FROM subjects WHERE tenant=? AND subject=?", (tenant, subject)
        ).fetchone()
        return row[0] if row else None

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return self._c.execute("SELECT tenant, subject, identifiers FROM subjects").fetchall()

    def count_live_records(self, now: float) -> int:
        return self._c.execute(
            "SELECT count(DISTINCT record_id) FROM claims c WHERE c.expires_at IS NULL OR c.expires_at > ?", (now,)
        ).fetchone()[0]

    def all_policies(self) -> list[tuple[str, str, str | None]]:
        return self._c.execute("SELECT tenant, policy, reason FROM policies").fetchall()

    def all_purposes(self) -> list[tuple[str, str]]:
        return self._c.execute("SELECT tenant, purpose FROM purposes").fetchall()

    def has_policy(self, tenant: str) -> bool:
        return self._c.execute("SELECT 1 FROM policies WHERE tenant=?", (tenant,)).fetchone() is not None

    def set_times(self, record_id: int, created_at: float, updated_at: float) -> None:
        self._c.execute("UPDATE records SET created_at=?, updated_at=? WHERE id=?", (created_at, updated_at, record_id))

    def set_metadata(self, record_id: int, metadata: str) -> None:
        self._c.execute("UPDATE records SET metadata=? WHERE id=?", (metadata, record_id))

    def save_path_evidence(self, handle: str, evidence: dict[str, bytes]) -> None:
        self._c.executemany(
            "INSERT INTO path_evidence(handle, path, data) VALUES(?,?,?)",
            [(handle, name, data) for name, data in evidence.items()],
        )

    def log_changes(self, tenant: str, puts: Iterable[int], drops: Iterable[int]) -> None:
        rows = [(self.epoch, i, tenant, "put") for i in puts] + [(self.epoch, i, tenant, "drop") for i in drops]
        self._c.executemany("INSERT INTO changes(epoch, record_id, tenant, op) VALUES(?,?,?,?)", rows)

    def save_receipt(self, handle: str, kind: str, tenant_h: str, body: dict, now: float) -> None:
        self._c.execute(
            "INSERT INTO receipts(handle, epoch, kind, tenant_h, created_at, body) VALUES(?,?,?,?,?,?)",
            (handle, self.epoch, kind, tenant_h, now, json.dumps(body, sort_keys=True)),
        )

    def append_ledger(self, kind: str, handle: str | None, body: dict, now: float) -> tuple[int, str]:
        last = self._c.execute("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        digest = chain_hash(prev, seq, now, kind, handle, text)
        self._c.execute(
            "INSERT INTO ledger(seq, at, kind, handle, body, prev, hash) VALUES(?,?,?,?,?,?,?)",
            (seq, now, kind, handle, text, prev, digest),
        )
        return seq, digest

    def set_tenant_name(self, tenant: str, name: str) -> None:
        self._c.execute("INSERT OR IGNORE INTO tenants(tenant, name) VALUES(?,?)", (tenant, name))

    def drop_tenant_name(self, tenant: str) -> str | None:
        """Delete the tenant's name if nothing personal of the tenant is left (no record,
        registered subject or data key); returns the name deleted."""
        for table in ("records", "subjects", "subject_keys"):
            if self._c.execute(f"SELECT 1 FROM {table} WHERE tenant=? LIMIT 1", (tenant,)).fetchone() is not None:
                return None
        row = self._c.execute("DELETE FROM tenants WHERE tenant=? RETURNING name", (tenant,)).fetchone()
        return None if row is None else row[0]

    def subjects_of(self, tenant: str) -> list[str]:
        """Every subject registered or holding a claim in the tenant."""
        rows = self._c.execute(
            "SELECT subject FROM subjects WHERE tenant=? UNION SELECT c.subject FROM claims c"
            " JOIN records r ON r.id=c.record_id WHERE r.tenant=?",
            (tenant, tenant),
        )
        return sorted(r[0] for r in rows)

    def register_purpose(self, tenant: str, purpose: str) -> None:
        self._c.execute("INSERT OR IGNORE INTO purposes(tenant, purpose) VALUES(?,?)", (tenant, purpose))

    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None:
        self._c.execute(
            "INSERT INTO subjects(tenant, subject, identifiers, updated_at) VALUES(?,?,?,?)"
            " ON CONFLICT(tenant, subject) DO UPDATE SET identifiers=excluded.identifiers,"
            " updated_at=excluded.updated_at",
            (tenant, subject, identifiers, now),
        )
