"""The embedded origin: one SQLite file in WAL mode with ``secure_delete=ON``.

We use apsw rather than the standard library's sqlite3 because apsw bundles a current
SQLite (3.54 here): FTS5's ``contentless_delete`` and ``secure-delete`` need >= 3.43,
and the Python build on this machine links 3.40.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any, Callable, Iterable, Iterator, Sequence

import apsw

from .base import ClaimRow, NewRecord, RecordRow

SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records(
    id INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: a stale index label can't name a new record
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL,
    sources TEXT NOT NULL,
    embedding BLOB NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE(tenant, key)
);
CREATE TABLE IF NOT EXISTS claims(
    id INTEGER PRIMARY KEY,
    record_id INTEGER NOT NULL REFERENCES records(id),
    subject TEXT NOT NULL,
    purpose TEXT NOT NULL,
    basis TEXT NOT NULL,
    expires_at REAL,
    created_at REAL NOT NULL,
    UNIQUE(record_id, subject, purpose, basis)
);
CREATE INDEX IF NOT EXISTS claims_subject ON claims(subject);
CREATE INDEX IF NOT EXISTS claims_expiry ON claims(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS lineage(
    record_id INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    source_key TEXT NOT NULL,
    PRIMARY KEY(record_id, source_key)
);
CREATE INDEX IF NOT EXISTS lineage_source ON lineage(tenant, source_key);
CREATE TABLE IF NOT EXISTS subjects(
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    identifiers TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY(tenant, subject)
);
CREATE TABLE IF NOT EXISTS mentions(
    record_id INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    PRIMARY KEY(record_id, subject)
);
CREATE INDEX IF NOT EXISTS mentions_subject ON mentions(tenant, subject);
CREATE TABLE IF NOT EXISTS quarantine(
    record_id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    why TEXT NOT NULL,                       -- 'lineage' or 'mention'
    handle TEXT NOT NULL,                    -- the erasure that caused it
    since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policies(tenant TEXT PRIMARY KEY, policy TEXT NOT NULL, reason TEXT);
CREATE TABLE IF NOT EXISTS purposes(tenant TEXT NOT NULL, purpose TEXT NOT NULL, PRIMARY KEY(tenant, purpose));
CREATE TABLE IF NOT EXISTS mutations(
    epoch INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    tenant TEXT,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS changes(
    epoch INTEGER NOT NULL,
    record_id INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    op TEXT NOT NULL CHECK(op IN ('put', 'drop'))
);
CREATE INDEX IF NOT EXISTS changes_epoch ON changes(epoch);
CREATE TABLE IF NOT EXISTS receipts(
    handle TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL,
    kind TEXT NOT NULL,
    tenant_h TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL                       -- keyed hashes only, never keys or subjects
);
CREATE TABLE IF NOT EXISTS evidence(       -- what verify() needs, kept without the content
    handle TEXT PRIMARY KEY,
    tenant_h TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    erased_ids BLOB NOT NULL,                -- record ids (AUTOINCREMENT: never reused)
    quarantined_ids BLOB NOT NULL,
    anchors BLOB NOT NULL,                   -- live neighbours of the erased vectors: NN probes
    tokens BLOB NOT NULL,                    -- keyed hashes of the erased texts' words
    fingerprints BLOB,                       -- keyed window hashes; NULL once erased is proven
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS receipts_epoch ON receipts(epoch);
CREATE TABLE IF NOT EXISTS ledger(
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    handle TEXT,
    body TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_handle ON ledger(handle) WHERE handle IS NOT NULL;
CREATE TABLE IF NOT EXISTS subject_keys(
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    kid BLOB NOT NULL UNIQUE,                -- random id that tags this key's wraps in backups
    key BLOB NOT NULL,                       -- AES-256 data key; never leaves the origin
    subject_h TEXT NOT NULL,                 -- keyed hash, to match the ledger's subject_h
    created_at REAL NOT NULL,
    PRIMARY KEY(tenant, subject)
);
CREATE TABLE IF NOT EXISTS backup_exposure(  -- see Store._backup_coverage; keyed hashes only
    tenant TEXT NOT NULL,
    key_h TEXT NOT NULL,
    subject_h TEXT NOT NULL,
    PRIMARY KEY(tenant, key_h, subject_h)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS backup_exposure_subject ON backup_exposure(tenant, subject_h);
CREATE TABLE IF NOT EXISTS backups(
    id TEXT PRIMARY KEY,
    path_h TEXT NOT NULL,                    -- keyed hash of the destination path
    epoch INTEGER NOT NULL,
    ledger_seq INTEGER NOT NULL,
    created_at REAL NOT NULL,
    records INTEGER NOT NULL,
    subjects INTEGER NOT NULL                -- data keys the backup was sealed with
);
"""

GENESIS = "0" * 64
CHECKPOINTED = "origin.checkpointed_epoch"
REINDEX = "origin.reindex"
REINDEXED = ("sqlite_autoindex_records_1", "claims_subject", "sqlite_autoindex_claims_1", "lineage_source",
             "sqlite_autoindex_lineage_1", "mentions_subject", "sqlite_autoindex_mentions_1",
             "sqlite_autoindex_subjects_1")


def chain_hash(prev: str, seq: int, at: float, kind: str, handle: str | None, body: str) -> str:
    """The ledger's link: sha256 over the previous hash and this entry's canonical fields."""
    payload = json.dumps([prev, seq, repr(at), kind, handle, body], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _claim(row: tuple) -> ClaimRow:
    return ClaimRow(*row)


def _record(row: tuple) -> RecordRow:
    return RecordRow(*row)


_REC_COLS = "r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.updated_at"
_CLAIM_COLS = "c.id, c.record_id, r.key, c.subject, c.purpose, c.basis, c.expires_at"
_LIVE = "(c.expires_at IS NULL OR c.expires_at > ?)"
_NOT_QUARANTINED = "NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.record_id=r.id)"


class SQLiteTx:
    """An open ``BEGIN IMMEDIATE`` transaction on the origin."""

    def __init__(self, conn: apsw.Connection, epoch: int):
        self._c = conn
        self.epoch = epoch
        self.old_texts: dict[int, str] = {}
        """Each changed record's text as it was before this transaction: the full-text index
        needs it to delete exactly the tokens it holds for that record."""

    def _remember(self, record_id: int | None = None, tenant: str | None = None, key: str | None = None) -> None:
        if record_id is None:
            row = self._c.execute("SELECT id, text FROM records WHERE tenant=? AND key=?", (tenant, key)).fetchone()
        else:
            row = self._c.execute("SELECT id, text FROM records WHERE id=?", (record_id,)).fetchone()
        if row is not None:
            self.old_texts.setdefault(row[0], row[1])

    def execute(self, sql: str, args: Sequence[Any] = ()) -> apsw.Cursor:
        return self._c.execute(sql, args)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._c.executemany(sql, rows)

    def upsert(self, tenant: str, rec: NewRecord, now: float) -> int:
        self._remember(tenant=tenant, key=rec.key)
        (rid,) = self._c.execute(
            "INSERT INTO records(tenant, key, text, metadata, sources, embedding, created_at, updated_at)"
            " VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(tenant, key) DO UPDATE SET"
            " text=excluded.text, metadata=excluded.metadata, sources=excluded.sources,"
            " embedding=excluded.embedding, updated_at=excluded.updated_at RETURNING id",
            (tenant, rec.key, rec.text, rec.metadata, json.dumps(list(rec.sources)), rec.embedding, now, now),
        ).fetchone()
        self._c.execute("DELETE FROM lineage WHERE record_id=?", (rid,))
        self._c.executemany(
            "INSERT INTO lineage(record_id, tenant, source_key) VALUES(?,?,?)",
            [(rid, tenant, s) for s in rec.sources],
        )
        self.add_claim(rid, rec.subject, rec.purpose, rec.basis, rec.expires_at, now)
        return rid

    def add_claim(self, record_id: int, subject: str, purpose: str, basis: str,
                  expires_at: float | None, now: float) -> None:
        # Restating a claim replaces its expiry: the newest statement of a scope wins.
        self._c.execute(
            "INSERT INTO claims(record_id, subject, purpose, basis, expires_at, created_at)"
            " VALUES(?,?,?,?,?,?) ON CONFLICT(record_id, subject, purpose, basis) DO UPDATE SET"
            " expires_at=excluded.expires_at, created_at=excluded.created_at",
            (record_id, subject, purpose, basis, expires_at, now),
        )

    def record_id(self, tenant: str, key: str) -> int | None:
        row = self._c.execute("SELECT id FROM records WHERE tenant=? AND key=?", (tenant, key)).fetchone()
        return row[0] if row else None

    def match_claims(self, tenant: str, subject: str | None, purpose: str | None,
                     prefix: str | None, key: str | None) -> list[ClaimRow]:
        where, args = ["r.tenant=?"], [tenant]
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
        sql = f"SELECT {_CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id WHERE {' AND '.join(where)}"
        return [_claim(r) for r in self._c.execute(sql, args)]

    def due_claims(self, now: float) -> list[tuple[str, ClaimRow]]:
        rows = self._c.execute(
            f"SELECT r.tenant, {_CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id"
            " WHERE c.expires_at IS NOT NULL AND c.expires_at<=? ORDER BY r.tenant",
            (now,),
        ).fetchall()
        return [(r[0], _claim(r[1:])) for r in rows]

    def release(self, claim_ids: Sequence[int]) -> None:
        self._c.executemany("DELETE FROM claims WHERE id=?", [(i,) for i in claim_ids])

    def remaining_claims(self, record_ids: Sequence[int]) -> dict[int, list[ClaimRow]]:
        """The claims left on each of ``record_ids`` (records with none are absent)."""
        out: dict[int, list[ClaimRow]] = {}
        for chunk, marks in _in_chunks(record_ids):
            for r in self._c.execute(
                f"SELECT {_CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id WHERE c.record_id IN ({marks})",
                chunk,
            ):
                out.setdefault(r[1], []).append(_claim(r))
        return out

    def content_of(self, record_ids: Sequence[int]) -> dict[int, tuple[str, str, bytes]]:
        """Key, text and embedding of records about to be erased (for their fingerprints)."""
        out: dict[int, tuple[str, str, bytes]] = {}
        for chunk, marks in _in_chunks(record_ids):
            for rid, key, text, emb in self._c.execute(
                f"SELECT id, key, text, embedding FROM records WHERE id IN ({marks})", chunk
            ):
                out[rid] = (key, text, emb)
        return out

    def save_evidence(self, handle: str, tenant_h: str, erased_ids: bytes, quarantined_ids: bytes,
                      anchors: bytes, tokens: bytes, fingerprints: bytes, now: float) -> None:
        self._c.execute(
            "INSERT INTO evidence(handle, tenant_h, epoch, erased_ids, quarantined_ids, anchors, tokens,"
            " fingerprints, created_at) VALUES(?,?,?,?,?,?,?,?,?)",
            (handle, tenant_h, self.epoch, erased_ids, quarantined_ids, anchors, tokens, fingerprints, now),
        )

    def erase_records(self, record_ids: Sequence[int]) -> None:
        """Delete the records and everything that hangs off them (set-based)."""
        if record_ids:  # in the same transaction: a crash cannot lose the need to rebuild
            self._c.execute("INSERT INTO meta(k, v) VALUES(?, '1') ON CONFLICT(k) DO UPDATE SET v='1'", (REINDEX,))
        for chunk, marks in _in_chunks(record_ids):
            self.old_texts.update(
                (rid, text) for rid, text in self._c.execute(f"SELECT id, text FROM records WHERE id IN ({marks})", chunk)
                if rid not in self.old_texts
            )
            for table, col in (("lineage", "record_id"), ("mentions", "record_id"), ("quarantine", "record_id"),
                               ("claims", "record_id"), ("records", "id")):
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
        for chunk, marks in _in_chunks(keys):
            out += self._c.execute(
                "SELECT DISTINCT l.record_id, r.key FROM lineage l JOIN records r ON r.id=l.record_id"
                f" WHERE l.tenant=? AND l.source_key IN ({marks})",
                [tenant, *chunk],
            ).fetchall()
        return out

    def replace_text(self, record_id: int, text: str, embedding: bytes, now: float) -> None:
        self._remember(record_id)
        self._c.execute("UPDATE records SET text=?, embedding=?, updated_at=? WHERE id=?",
                        (text, embedding, now, record_id))

    def set_sources(self, record_id: int, tenant: str, sources: Sequence[str]) -> None:
        self._c.execute("UPDATE records SET sources=? WHERE id=?", (json.dumps(list(sources)), record_id))
        self._c.execute("DELETE FROM lineage WHERE record_id=?", (record_id,))
        self._c.executemany("INSERT INTO lineage(record_id, tenant, source_key) VALUES(?,?,?)",
                            [(record_id, tenant, s) for s in sources])

    def record(self, record_id: int) -> RecordRow | None:
        row = self._c.execute(f"SELECT {_REC_COLS} FROM records r WHERE r.id=?", (record_id,)).fetchone()
        return _record(row) if row else None

    def quarantine(self, record_id: int, tenant: str, why: str, handle: str, now: float) -> None:
        self._c.execute(
            "INSERT INTO quarantine(record_id, tenant, why, handle, since) VALUES(?,?,?,?,?)"
            " ON CONFLICT(record_id) DO NOTHING",
            (record_id, tenant, why, handle, now),
        )

    def is_quarantined(self, record_id: int) -> bool:
        return self._c.execute("SELECT 1 FROM quarantine WHERE record_id=?", (record_id,)).fetchone() is not None

    def lift_quarantine(self, record_id: int) -> bool:
        self._c.execute("DELETE FROM quarantine WHERE record_id=?", (record_id,))
        return self._c.changes() > 0

    def subject_has_claims(self, tenant: str, subject: str) -> bool:
        return self._c.execute(
            "SELECT 1 FROM claims c JOIN records r ON r.id=c.record_id WHERE r.tenant=? AND c.subject=? LIMIT 1",
            (tenant, subject),
        ).fetchone() is not None

    def drop_subject(self, tenant: str, subject: str) -> bool:
        """Erase a subject's registered identifiers and the mention rows that point at it."""
        self._c.execute("DELETE FROM mentions WHERE tenant=? AND subject=?", (tenant, subject))
        self._c.execute("DELETE FROM subjects WHERE tenant=? AND subject=?", (tenant, subject))
        return self._c.changes() > 0

    def policy(self, tenant: str) -> tuple[str, str | None]:
        row = self._c.execute("SELECT policy, reason FROM policies WHERE tenant=?", (tenant,)).fetchone()
        return (row[0], row[1]) if row else ("quarantine", None)

    def set_policy(self, tenant: str, policy: str, reason: str | None) -> None:
        self._c.execute(
            "INSERT INTO policies(tenant, policy, reason) VALUES(?,?,?) ON CONFLICT(tenant)"
            " DO UPDATE SET policy=excluded.policy, reason=excluded.reason",
            (tenant, policy, reason),
        )

    def fts_phrase(self, tenant: str, phrase: str, limit: int = 100000) -> list[tuple[int, str]]:
        """Records of the tenant whose words contain ``phrase`` (an FTS5 phrase query)."""
        return self._c.execute(
            "SELECT r.id, r.text FROM fts f JOIN records r ON r.id=f.rowid WHERE fts MATCH ? AND r.tenant=? LIMIT ?",
            (phrase, tenant, limit),
        ).fetchall()

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

    def register_purpose(self, tenant: str, purpose: str) -> None:
        self._c.execute("INSERT OR IGNORE INTO purposes(tenant, purpose) VALUES(?,?)", (tenant, purpose))

    def set_subject(self, tenant: str, subject: str, identifiers: str, now: float) -> None:
        self._c.execute(
            "INSERT INTO subjects(tenant, subject, identifiers, updated_at) VALUES(?,?,?,?)"
            " ON CONFLICT(tenant, subject) DO UPDATE SET identifiers=excluded.identifiers,"
            " updated_at=excluded.updated_at",
            (tenant, subject, identifiers, now),
        )

    # -- per-subject data keys (crypto-shredding of backups) -----------------------------
    def ensure_subject_keys(self, tenant: str, subjects: Iterable[str], now: float,
                            subject_h: Callable[[str], str]) -> None:
        """Give each subject that has none yet a data key in this tenant (same transaction
        as the claim that needs it, so no claim ever exists without its key)."""
        wanted = sorted(set(subjects))
        have: set[str] = set()
        for chunk, marks in _in_chunks(wanted):
            have |= {r[0] for r in self._c.execute(
                f"SELECT subject FROM subject_keys WHERE tenant=? AND subject IN ({marks})", [tenant, *chunk])}
        self._c.executemany(
            "INSERT INTO subject_keys(tenant, subject, kid, key, subject_h, created_at) VALUES(?,?,?,?,?,?)",
            [(tenant, s, os.urandom(16), os.urandom(32), subject_h(s), now) for s in wanted if s not in have],
        )

    def destroy_subject_keys(self, tenant: str, subjects: Iterable[str]) -> list[tuple[str, bytes]]:
        """Delete the data key of every subject in ``subjects`` left with no claim in the
        tenant. With ``secure_delete=ON`` the row's bytes are zeroed in the page; the old page
        image in the WAL goes at the compactor's checkpoint. Returns (subject, key) of each key
        destroyed: verify fingerprints the key bytes to prove them gone from every file."""
        gone = []
        for s in sorted(set(subjects)):
            if not self.subject_has_claims(tenant, s):
                row = self._c.execute("DELETE FROM subject_keys WHERE tenant=? AND subject=? RETURNING key",
                                      (tenant, s)).fetchone()
                if row is not None:
                    gone.append((s, row[0]))
        return gone

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key."""
        return self._c.execute("SELECT tenant, subject, kid, key FROM subject_keys").fetchall()

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        """Which of these keyed subject hashes still have a data key in the tenant."""
        hs = sorted(set(hashes))
        out: set[str] = set()
        for chunk, marks in _in_chunks(hs):
            out |= {r[0] for r in self._c.execute(
                f"SELECT subject_h FROM subject_keys WHERE tenant=? AND subject_h IN ({marks})", [tenant, *chunk])}
        return out

    def claim_subjects(self, now: float) -> list[tuple[str, str]]:
        """Every (tenant, subject) with a live claim."""
        return self._c.execute(
            "SELECT DISTINCT r.tenant, c.subject FROM claims c JOIN records r ON r.id=c.record_id"
            f" WHERE {_LIVE}", (now,)).fetchall()

    def backup_rows(self, now: float) -> Iterator[tuple[tuple, list[tuple]]]:
        """Each record with a live claim, in id order, with its live claims
        (subject, purpose, basis, expires_at) and its quarantine (why, handle, since) or None."""
        claims: dict[int, list[tuple]] = {}
        for rid, subject, purpose, basis, expires_at in self._c.execute(
                f"SELECT c.record_id, c.subject, c.purpose, c.basis, c.expires_at FROM claims c WHERE {_LIVE}"
                " ORDER BY c.record_id, c.id", (now,)):
            claims.setdefault(rid, []).append((subject, purpose, basis, expires_at))
        for row in self._c.execute(
                "SELECT r.id, r.tenant, r.key, r.text, r.metadata, r.sources, r.embedding, r.created_at,"
                " r.updated_at, q.why, q.handle, q.since FROM records r LEFT JOIN quarantine q ON q.record_id=r.id"
                " ORDER BY r.id"):
            if row[0] in claims:
                yield row, claims[row[0]]

    def backup_floor(self) -> int | None:
        """The ledger seq of the oldest recorded backup (None: no backup was ever taken)."""
        return self._c.execute("SELECT min(ledger_seq) FROM backups").fetchone()[0]

    def record_backup(self, backup_id: str, path_h: str, ledger_seq: int, now: float,
                      records: int, subjects: int) -> None:
        self._c.execute(
            "INSERT INTO backups(id, path_h, epoch, ledger_seq, created_at, records, subjects) VALUES(?,?,?,?,?,?,?)",
            (backup_id, path_h, self.epoch, ledger_seq, now, records, subjects),
        )

    def note_exposure(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None:
        """Remember (key hash, subject hash) of claims released while their subject keeps its
        key: older backups still hold that record's key wrapped under a key that lives."""
        self._c.executemany("INSERT OR IGNORE INTO backup_exposure(tenant, key_h, subject_h) VALUES(?,?,?)",
                            [(tenant, k, s) for k, s in pairs])

    def drop_exposure(self, tenant: str, subject_hashes: Iterable[str]) -> None:
        """Forget the exposures of subjects whose key was destroyed: nothing opens them any more."""
        self._c.executemany("DELETE FROM backup_exposure WHERE tenant=? AND subject_h=?",
                            [(tenant, s) for s in subject_hashes])

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        """Subject hashes noted as exposing any of these key hashes in older backups."""
        out: set[str] = set()
        for chunk, marks in _in_chunks(key_hashes):
            out |= {r[0] for r in self._c.execute(
                f"SELECT subject_h FROM backup_exposure WHERE tenant=? AND key_h IN ({marks})", [tenant, *chunk])}
        return out

class SQLiteOrigin:
    """The origin on one SQLite file. Not thread-safe by itself: the store serialises access."""

    def __init__(self, path: str):
        self.path = path
        new = not os.path.exists(path)
        self._c = apsw.Connection(path)
        self._c.setbusytimeout(5000)
        self._c.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit fsyncs the WAL, so an acknowledgement means the tombstone is durable.
        self._c.execute("PRAGMA synchronous=FULL")
        # Freed pages and cells are overwritten with zeros, not left behind.
        self._c.execute("PRAGMA secure_delete=ON")
        self._c.execute("PRAGMA foreign_keys=ON")
        with self._c:
            self._c.execute(_SCHEMA)
        if new:
            _fsync_dir(os.path.dirname(os.path.abspath(path)))
        if self.meta_get("schema") is None:
            self.meta_set("schema", SCHEMA_VERSION)

    @property
    def connection(self) -> apsw.Connection:
        return self._c

    @contextlib.contextmanager
    def transaction(self, kind: str, tenant: str | None, now: float) -> Iterator[SQLiteTx]:
        self._c.execute("BEGIN IMMEDIATE")
        try:
            self._c.execute("INSERT INTO mutations(kind, tenant, at) VALUES(?,?,?)", (kind, tenant, now))
            tx = SQLiteTx(self._c, self._c.last_insert_rowid())
            yield tx
        except BaseException:
            self._c.execute("ROLLBACK")
            raise
        self._c.execute("COMMIT")

    def read(self, tenant: str, key: str, purpose: str, now: float):
        row = self._c.execute(
            f"SELECT {_REC_COLS} FROM records r WHERE r.tenant=? AND r.key=? AND {_NOT_QUARANTINED}", (tenant, key)
        ).fetchone()
        if row is None:
            return None
        claims = [
            _claim(c)
            for c in self._c.execute(
                f"SELECT {_CLAIM_COLS} FROM claims c JOIN records r ON r.id=c.record_id"
                f" WHERE c.record_id=? AND c.purpose=? AND {_LIVE}",
                (row[0], purpose, now),
            )
        ]
        return (_record(row), claims) if claims else None

    def live_ids(self, ids: Sequence[int], tenant: str, purpose: str, subject: str | None,
                 now: float) -> set[int]:
        """The ids among ``ids`` that are live for this tenant and purpose (and subject):
        the gate every index candidate passes before any text leaves the store."""
        out: set[int] = set()
        sub = " AND c.subject=?" if subject is not None else ""
        for chunk, marks in _in_chunks(ids):
            args: list[Any] = [*chunk, tenant, purpose, now] + ([subject] if subject is not None else [])
            out.update(r[0] for r in self._c.execute(
                # '+r.tenant': rowid lookups for the ids, not a scan of the (tenant, key) index
                f"SELECT r.id FROM records r WHERE r.id IN ({marks}) AND +r.tenant=? AND {_NOT_QUARANTINED} AND EXISTS"
                f" (SELECT 1 FROM claims c WHERE c.record_id=r.id AND c.purpose=? AND {_LIVE}{sub})",
                args,
            ))
        return out

    def records_by_id(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        """Rows by id; the caller has checked them with :meth:`live_ids` under the same lock."""
        marks = ",".join("?" * len(ids))
        return {r[0]: _record(r) for r in self._c.execute(
            f"SELECT {_REC_COLS} FROM records r WHERE r.id IN ({marks})", list(ids))} if ids else {}

    def all_subjects(self) -> list[tuple[str, str, str]]:
        return self._c.execute("SELECT tenant, subject, identifiers FROM subjects").fetchall()

    def quarantined(self, tenant: str) -> list[tuple[int, str, str, str, float, str]]:
        """(record id, key, why, handle, since, sources JSON) of every quarantined record."""
        return self._c.execute(
            "SELECT q.record_id, r.key, q.why, q.handle, q.since, r.sources FROM quarantine q"
            " JOIN records r ON r.id=q.record_id WHERE q.tenant=? ORDER BY r.key",
            (tenant,),
        ).fetchall()

    def live_keys(self, tenant: str, keys: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for chunk, marks in _in_chunks(keys):
            out |= {r[0] for r in self._c.execute(
                f"SELECT key FROM records WHERE tenant=? AND key IN ({marks})", [tenant, *chunk])}
        return out

    def purposes(self, tenant: str) -> list[str]:
        return [r[0] for r in self._c.execute("SELECT purpose FROM purposes WHERE tenant=? ORDER BY 1", (tenant,))]

    def changes_since(self, epoch: int, upto: int | None = None) -> list[tuple[int, int, str, str]]:
        if upto is None:
            return self._c.execute(
                "SELECT epoch, record_id, tenant, op FROM changes WHERE epoch>? ORDER BY epoch, rowid", (epoch,)
            ).fetchall()
        return self._c.execute(
            "SELECT epoch, record_id, tenant, op FROM changes WHERE epoch>? AND epoch<=? ORDER BY epoch, rowid",
            (epoch, upto),
        ).fetchall()

    def latest_put_epoch(self, after: int) -> int | None:
        """The newest epoch after ``after`` that added or changed content, if any."""
        row = self._c.execute("SELECT max(epoch) FROM changes WHERE epoch>? AND op='put'", (after,)).fetchone()
        return row[0]

    def due_tenant(self, now: float) -> str | None:
        """A tenant with a claim whose TTL has passed, if any (uses the partial expiry index)."""
        row = self._c.execute(
            "SELECT r.tenant FROM claims c JOIN records r ON r.id=c.record_id"
            " WHERE c.expires_at IS NOT NULL AND c.expires_at<=? LIMIT 1",
            (now,),
        ).fetchone()
        return row[0] if row else None

    def pending_drops(self, applied: int) -> int:
        (n,) = self._c.execute("SELECT count(*) FROM changes WHERE op='drop' AND epoch>?", (applied,)).fetchone()
        return n

    def prune_changes(self, upto: int) -> None:
        with self._c:
            self._c.execute("DELETE FROM changes WHERE epoch<=?", (upto,))

    def embeddings(self, ids: Sequence[int]) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for chunk, marks in _in_chunks(ids):
            out.update(self._c.execute(f"SELECT id, embedding FROM records WHERE id IN ({marks})", chunk))
        return out

    def records_of_tenant(self, tenant: str) -> Iterable[tuple[int, bytes]]:
        return self._c.execute("SELECT id, embedding FROM records WHERE tenant=?", (tenant,))

    def tenants(self) -> list[str]:
        return [r[0] for r in self._c.execute("SELECT DISTINCT tenant FROM records")]

    def current_epoch(self) -> int:
        row = self._c.execute("SELECT seq FROM sqlite_sequence WHERE name='mutations'").fetchone()
        return row[0] if row else 0

    def receipt(self, handle: str) -> dict[str, Any] | None:
        row = self._c.execute(
            "SELECT handle, epoch, kind, tenant_h, created_at, body FROM receipts WHERE handle=?", (handle,)
        ).fetchone()
        if row is None:
            return None
        return {"handle": row[0], "epoch": row[1], "kind": row[2], "tenant_h": row[3],
                "created_at": row[4], "body": json.loads(row[5])}

    def receipts(self, tenant_h: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT handle FROM receipts" + (" WHERE tenant_h=?" if tenant_h else "") + " ORDER BY epoch"
        return [self.receipt(h) for (h,) in self._c.execute(sql, (tenant_h,) if tenant_h else ())]

    def ledger(self) -> list[dict[str, Any]]:
        return [
            {"seq": s, "at": at, "kind": k, "handle": h, "body": b, "prev": p, "hash": hh}
            for s, at, k, h, b, p, hh in self._c.execute(
                "SELECT seq, at, kind, handle, body, prev, hash FROM ledger ORDER BY seq"
            )
        ]

    def meta_get(self, key: str) -> str | None:
        row = self._c.execute("SELECT v FROM meta WHERE k=?", (key,)).fetchone()
        return row[0] if row else None

    def meta_set(self, key: str, value: str) -> None:
        with self._c:
            self._c.execute("INSERT INTO meta(k, v) VALUES(?,?) ON CONFLICT(k) DO UPDATE SET v=excluded.v", (key, value))

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to zero bytes, so no old page
        image (with secure_delete, the only place deleted bytes can linger) stays in the WAL.
        Records the epoch it covers; returns False if a reader kept it from completing."""
        epoch = self.current_epoch()
        busy, _log, _done = self._c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            return False
        self.meta_set(CHECKPOINTED, str(epoch))
        # The meta row just went into the WAL; checkpoint again so the file is empty.
        self._c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return True

    def rebuild_indexes(self) -> bool:
        """Rebuild the indexes that hold keys and subjects if anything was erased since the last
        rebuild. secure_delete zeroes a deleted cell, but when SQLite rebuilds an index page
        it leaves the old cell bytes in the page's unallocated gap (found by verify's byte
        scan: fragments of erased keys and subject names in live pages of these indexes).
        A rebuild writes fresh pages and frees the old ones, which secure_delete zeroes."""
        if self.meta_get(REINDEX) != "1":
            return False
        with self._c:
            for index in REINDEXED:
                self._c.execute(f"REINDEX {index}")
            self._c.execute("UPDATE meta SET v='0' WHERE k=?", (REINDEX,))
        return True

    def checkpointed_epoch(self) -> int:
        return int(self.meta_get(CHECKPOINTED) or 0)

    # -- evidence for verify -------------------------------------------------------------
    def evidence(self, handle: str) -> dict[str, Any] | None:
        row = self._c.execute(
            "SELECT tenant_h, epoch, erased_ids, quarantined_ids, anchors, tokens, fingerprints, created_at"
            " FROM evidence WHERE handle=?", (handle,)
        ).fetchone()
        if row is None:
            return None
        keys = ("tenant_h", "epoch", "erased_ids", "quarantined_ids", "anchors", "tokens", "fingerprints", "created_at")
        return dict(zip(keys, row))

    def erased_proof(self, handle: str) -> dict[str, Any] | None:
        """The newest verification of ``handle`` that proved ``erased`` (one indexed lookup
        per handle instead of reading the whole ledger)."""
        row = self._c.execute(
            "SELECT seq, at, kind, handle, body, prev, hash FROM ledger WHERE handle=? AND kind='verify'"
            " AND json_extract(body, '$.level')='erased' ORDER BY seq DESC LIMIT 1", (handle,)).fetchone()
        return None if row is None else dict(zip(("seq", "at", "kind", "handle", "body", "prev", "hash"), row))

    def record_verification(self, handle: str, body: dict, receipt_level: str, discard: bool,
                            now: float) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level, and (once erased is
        proven) delete the fingerprints: one transaction, so a crash leaves all or none."""
        self._c.execute("BEGIN IMMEDIATE")
        try:
            tx = SQLiteTx(self._c, self.current_epoch())
            seq, digest = tx.append_ledger("verify", handle, body, now)
            self._c.execute("UPDATE receipts SET body=json_set(body, '$.level', ?) WHERE handle=?",
                            (receipt_level, handle))
            if discard:
                # the word hashes too: beside the secret they are a dictionary away from the words
                self._c.execute("UPDATE evidence SET fingerprints=NULL, tokens=X'5B5D' WHERE handle=?", (handle,))
        except BaseException:
            self._c.execute("ROLLBACK")
            raise
        self._c.execute("COMMIT")
        return seq, digest

    def ack_times(self, after: int, upto: int) -> list[float]:
        """Acknowledgement times of the erasures with epochs in (after, upto]."""
        return [r[0] for r in self._c.execute(
            "SELECT created_at FROM receipts WHERE epoch>? AND epoch<=?", (after, upto))]

    def tenant_names(self) -> list[str]:
        """Every tenant that ever wrote (its purposes outlive its records)."""
        return [r[0] for r in self._c.execute("SELECT DISTINCT tenant FROM purposes")]

    def residual_rows(self, ids: Sequence[int]) -> dict[str, int]:
        """Rows that still name any of these record ids, per table."""
        found: dict[str, int] = {}
        for table, col in (("records", "id"), ("claims", "record_id"), ("lineage", "record_id"),
                           ("mentions", "record_id"), ("quarantine", "record_id")):
            n = 0
            for chunk, marks in _in_chunks(ids):
                n += self._c.execute(f"SELECT count(*) FROM {table} WHERE {col} IN ({marks})", chunk).fetchone()[0]
            if n:
                found[table] = n
        return found

    def still_quarantined(self, ids: Sequence[int]) -> int:
        marks = ",".join("?" * len(ids))
        return self._c.execute(f"SELECT count(*) FROM quarantine WHERE record_id IN ({marks})", list(ids)).fetchone()[0] if ids else 0

    def live_holding(self, windows: set[bytes], embeddings: bool) -> set[bytes]:
        """Which of these byte windows occur in a live record's text or key (or embedding), or
        in a live subject's name or identifiers: copies that are allowed to be there, such as
        a retained duplicate or another subject whose name shares the bytes. One pass over
        the records with an Aho-Corasick automaton, whatever the number of windows."""
        import ahocorasick

        if not windows:
            return set()
        automaton = ahocorasick.Automaton()
        for w in windows:
            automaton.add_word(w.decode("latin-1"), w)
        automaton.make_automaton()
        found: set[bytes] = set()
        cols = "text, key" + (", embedding" if embeddings else "")
        queries = (f"SELECT {cols} FROM records", "SELECT DISTINCT subject FROM claims",
                   "SELECT subject, identifiers FROM subjects", "SELECT subject FROM subject_keys")
        for sql in queries:
            for row in self._c.execute(sql):
                for value in row:
                    raw = value.encode("utf-8") if isinstance(value, str) else value
                    for _end, w in automaton.iter(raw.decode("latin-1")):
                        found.add(w)
                if len(found) == len(windows):
                    return found
        return found

    def pages_of(self, names: Sequence[str]) -> set[int]:
        """Page numbers (1-based) of these b-trees, overflow pages included."""
        marks = ",".join("?" * len(names))
        return {r[0] for r in self._c.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", list(names))}

    def page_size(self) -> int:
        return self._c.execute("PRAGMA page_size").fetchone()[0]

    def fts_terms(self) -> Iterable[tuple[str, int]]:
        return self._c.execute("SELECT term, doc FROM fts_vocab")

    def fts_match_ids(self, expr: str, ids: Sequence[int]) -> list[int]:
        marks = ",".join("?" * len(ids))
        return [r[0] for r in self._c.execute(
            f"SELECT rowid FROM fts WHERE fts MATCH ? AND rowid IN ({marks})", (expr, *ids))]

    def count_records(self) -> int:
        return self._c.execute("SELECT count(*) FROM records").fetchone()[0]

    def subject_keys(self) -> list[tuple[str, str, bytes, bytes]]:
        """(tenant, subject, kid, key) of every live data key (restore opens backups with them)."""
        return self._c.execute("SELECT tenant, subject, kid, key FROM subject_keys").fetchall()

    def close(self) -> None:
        self._c.close()


def _in_chunks(values: Sequence[Any], size: int = 500) -> Iterator[tuple[list[Any], str]]:
    """``values`` in chunks small enough for one ``IN (...)``, each with its placeholders."""
    for start in range(0, len(values), size):
        chunk = list(values[start : start + size])
        yield chunk, ",".join("?" * len(chunk))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
