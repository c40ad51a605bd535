"""The SQLite origin's schema: one file holds records, claims, subjects, lineage, mentions,
quarantine, the change log, receipts, evidence, the ledger, data keys and the FTS5 index.

Every ``tenant`` column holds the tenant's id, a keyed hash of its name (the store computes
it; docs/concepts.md §8: tenant names are personal data). The name itself is kept in one place,
``tenants``, while the tenant has anything left, and deleted with the tenant's last record,
subject and data key."""

SCHEMA_VERSION = "2"
"""2: tenant columns hold keyed hashes, names only in ``tenants`` (1 kept names in clear)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants(        -- the only copy of a tenant's name
    id INTEGER PRIMARY KEY,                  -- a rowid table: the name sits in leaf cells only,
    tenant TEXT NOT NULL UNIQUE,             -- never in an index (secure_delete zeroes it)
    name TEXT NOT NULL
);
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
CREATE TABLE IF NOT EXISTS reasons(        -- a release's stated reason: the ledger keeps only its hash
    record_id INTEGER NOT NULL,              -- the record it released; erased with it
    tenant TEXT NOT NULL,
    reason_h TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS reasons_record ON reasons(record_id);
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

CHECKPOINTED = "origin.checkpointed_epoch"
REINDEX = "origin.reindex"
REINDEXED = (
    "sqlite_autoindex_records_1",
    "claims_subject",
    "sqlite_autoindex_claims_1",
    "lineage_source",
    "sqlite_autoindex_lineage_1",
    "mentions_subject",
    "sqlite_autoindex_mentions_1",
    "sqlite_autoindex_subjects_1",
)

FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    text, tenant, content='records', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab USING fts5vocab(fts, 'row');
CREATE VIRTUAL TABLE IF NOT EXISTS fts_inst USING fts5vocab(fts, 'instance');
"""
"""External-content FTS5 over ``records``: it keeps tokens (English stems), never a copy of
the text, and each record's tenant id (a keyed hash) as a second column, so that a query
ranks only its own tenant's matches (``tenant : "id" AND text : (...)``). A store made before
stemming keeps its ``unicode61`` index, and one made before the tenant column keeps its
one-column index (``IF NOT EXISTS``): :mod:`.text` reads which one a store has. The
vocabulary tables store nothing."""

PATH_EVIDENCE = """
CREATE TABLE IF NOT EXISTS path_evidence(    -- what each read path keeps for verify's probes
    handle TEXT NOT NULL,
    path TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY(handle, path)
) WITHOUT ROWID;
"""
