"""The PostgreSQL origin's schema: what efface creates in a database, and how it migrates.

Everything lives in one schema of its own (``efface`` unless the operator names another), so
efface can share a database the operator already runs: one ``CREATE SCHEMA``, tables inside
it, nothing in ``public``. The one thing outside it is the ``vector`` extension (pgvector),
which a superuser may have to create once (docs/postgres.md, "On an existing PostgreSQL").

What differs from the SQLite schema (:mod:`efface.origin.sqlite.schema`), and why:

* **Sealed content.** A record's text, metadata and sources, a subject's identifiers, a
  release's stated reason, a policy's reason and a tenant's name are ``bytea`` sealed in the
  efface process with a per-subject data key (:mod:`.keys`); the database never sees them in
  clear, so what a delete leaves in heap pages, WAL, replicas and backups is ciphertext,
  unreadable once the key is destroyed and the key-encryption key rotated (docs/concepts.md §9).
  ``records.sealed_by`` names the data key a record's content is sealed with.
* **No words in the database.** A full-text index over sealed text is impossible, and one
  over clear words would keep them in GIN pages after every delete (measured:
  docs/postgres.md). Word search is per process, kept up from the change log.
* **Vectors in clear**, in pgvector with an HNSW index: an index needs them. The ladder
  reports them as ``cannot_verify`` where it cannot scan the server's files.
* **Epochs from a counter row** (:mod:`.epochs`): ``epoch_counter`` holds one row, updated in
  every mutating transaction; ``mutations`` keeps each epoch with its transaction id and its
  commit's LSN.
* **Keys**: ``keks`` (ids and states of key-encryption keys, never the keys), ``data_keys``
  (wrapped), ``destroyed_keys`` (which KEK a destroyed key was wrapped by: its rotation is what
  makes the erasure final).
* **API keys** (``api_keys``) hashed, so every server of a store sees the same ones.

Every ``tenant`` column holds the tenant's id (a keyed hash of its name), as on SQLite; the
secret those hashes are made with is in the KEK file, not in ``meta`` (migration 7,
:mod:`.hashsecret`).

**No name in clear** (migration 6). A subject's name and a record's key are personal data
(``user:alice@example.com/notes``); a delete would leave them in heap pages, WAL, replicas and
backups, where no key shred reaches. So the columns that name them hold a keyed hash under
the *name key*, a secret of the operator's KEK file that never enters the database
(:meth:`.keys.Keys.name_h`): ``claims.subject``, ``mentions.subject``, ``subjects.subject``
and ``data_keys.subject`` hold the subject's, ``records.key`` and ``lineage.source_key`` the
key's. Where efface must give a name back, it is sealed: ``data_keys.name``, the subject's
name under its own data key (destroyed with it), and ``records.key_sealed``, the key under
the record's data key (``sealed_by``). Lookups and equality run on the hashes; a key prefix
and key order (``scan``, a forget by prefix) are resolved in the efface process
(:mod:`.names`).

Migrations are forward-only, numbered, each applied once in one transaction under an
advisory lock, so several servers starting at once migrate the database once; running
:func:`migrate` again is a no-op. A database migrated by a newer efface is refused
(:class:`.errors.SchemaTooNew`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import EmbedderMismatch, InvalidInput, StoreUnwritable
from .errors import SchemaTooNew
from .indexbuild import lock_unqueued, rebuild_graph

if TYPE_CHECKING:
    import psycopg

DEFAULT_SCHEMA = "efface"
SCHEMA_VERSION = 10
"""1: records, claims, subjects, lineage, mentions, quarantine, policies, reasons, purposes,
the change log, epochs, receipts, evidence, the ledger, keys, API keys, backups.
2: what the origin (:mod:`.origin`) needs beyond them: a data key found by its subject
(``data_keys.subject``; ``subject_h`` is filled when the store names the key's keyed hash,
in the same transaction), the change log's order within an epoch (``changes.seq``), and
the key sealing a tenant's own values (its name, its policy's reason: subject ''), and the
processes replaying the change log (``change_readers``), so none prunes what another needs.
3: API keys carry their tenant's name and label sealed (``api_keys.sealed``,
:mod:`efface.service.pgkeys`).
4: ``records.embedding`` stored MAIN (in the row), so an exact scan reads no TOAST table.
5: no planner statistics on the columns that hold content, names, identifiers or keys
(``SET STATISTICS 0``): ``ANALYZE`` (autovacuum runs it on any table that grows) copies sample
values of a column into ``pg_statistic``, a catalog efface does not own and cannot rewrite, where
an erased subject's name, its sealed values and its wrapped data key stayed after the maintenance
(found by the byte scan: ``verify`` said ``present``).
6: no subject name or record key in clear (module docstring): ``records.key_sealed`` and
``data_keys.name`` added; a database with rows gets ``meta`` :data:`NAMES_IN_CLEAR`, and the
origin rewrites its clear names to hashes and sealed copies once the keys are open
(:func:`.names.rewrite_clear_names`), in a transaction with an epoch of its own, so the next
maintenance rewrites the tables and the old bytes leave the files.
7: the store's hash secret out of the database (:mod:`.hashsecret`): ``meta.v`` gets no planner
statistics (it held the secret, and ``ANALYZE`` copies sample values into ``pg_statistic``);
the secret's ``meta`` row is moved into the KEK file when the keys are opened, in a
transaction with an epoch of its own, so the next maintenance rewrites ``meta`` too. An older
efface refuses the database from then on (:class:`.errors.SchemaTooNew`): it would make a new
secret in ``meta`` and hash every tenant differently.
8: an index of ``records`` by a digest of each vector's exact bytes (:data:`VECTOR_DIGEST`), so
an erasure finds the live records holding a vector identical to one it deleted without a
scan of every record (issue #34); no planner statistics on it. And indexes by the name hash
alone on ``mentions``, ``subjects`` and ``data_keys``, for the same check of the names.
9: the change log's readers say whether their snapshots take the reader lock.
10: recall's server side cheaper (issue #34 item 6). ``claims`` indexed by record and purpose
with the claim's subject and expiry in the index (:data:`CLAIMS_LIVE_INDEX`), in place of the
index by record alone: recall's check of each candidate's live claim (:func:`.reads.live_claim`)
reads the index only, not the claim's row. And the HNSW graph of ``records.embedding`` built
again with :data:`HNSW_BUILD` (8 neighbours a node instead of pgvector's 16): a search visits
about half the vectors for the same width; the index is rebuilt in the migration (about 50 s
of one core at 100k records here; writes to ``records`` and ``claims`` wait for it, reads do
not), with the maintenance's memory for it (:func:`.indexbuild.rebuild_graph`). Its locks are
taken in a write's order (``records``, then ``claims``), and a run ended by a deadlock anyway
is run again (:data:`MIGRATE_ATTEMPTS`)."""

NAMES_IN_CLEAR = "names.in_clear"
"""Meta key set by migration 6 on a database that has rows to rewrite; deleted once rewritten."""

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

MIGRATE_LOCK = 0x65666661_00000001
"""Advisory lock key (``pg_advisory_xact_lock``) held while migrating: 'effa' + 1."""
MIGRATE_ATTEMPTS = 5
"""Runs of the migration's transaction before :func:`migrate` gives up, when each ends in a
deadlock or a role's ``lock_timeout`` (it takes table locks: migration 10)."""

log = logging.getLogger("efface")


@dataclass(frozen=True)
class Migration:
    version: int
    why: str
    statements: tuple[str, ...]
    """SQL with ``{s}`` for the schema and ``{dim}`` for the embedding dimension."""


_V1 = (
    "CREATE TABLE IF NOT EXISTS {s}.meta(k text PRIMARY KEY, v text NOT NULL)",
    # one row; every mutating transaction updates it (see epochs.py for why a row, not a sequence)
    """CREATE TABLE IF NOT EXISTS {s}.epoch_counter(
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        epoch bigint NOT NULL)""",
    "INSERT INTO {s}.epoch_counter(one, epoch) VALUES (true, 0) ON CONFLICT DO NOTHING",
    """CREATE TABLE IF NOT EXISTS {s}.mutations(
        epoch bigint PRIMARY KEY,
        kind text NOT NULL,
        tenant text,
        at double precision NOT NULL,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        commit_lsn pg_lsn)""",
    """CREATE TABLE IF NOT EXISTS {s}.tenants(
        tenant text PRIMARY KEY,
        name bytea NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS {s}.records(
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,   -- never reused
        tenant text NOT NULL,
        key text NOT NULL,
        text bytea NOT NULL,
        metadata bytea NOT NULL,
        sources bytea NOT NULL,
        sealed_by bytea NOT NULL,
        embedding vector({dim}),
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        UNIQUE (tenant, key))""",
    "CREATE INDEX IF NOT EXISTS records_embedding ON {s}.records USING hnsw (embedding vector_cosine_ops)",
    """CREATE TABLE IF NOT EXISTS {s}.claims(
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        record_id bigint NOT NULL REFERENCES {s}.records(id),
        subject text NOT NULL,
        purpose text NOT NULL,
        basis text NOT NULL,
        expires_at double precision,
        created_at double precision NOT NULL,
        UNIQUE (record_id, subject, purpose, basis))""",
    "CREATE INDEX IF NOT EXISTS claims_subject ON {s}.claims(subject)",
    "CREATE INDEX IF NOT EXISTS claims_expiry ON {s}.claims(expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS {s}.lineage(
        record_id bigint NOT NULL,
        tenant text NOT NULL,
        source_key text NOT NULL,
        PRIMARY KEY (record_id, source_key))""",
    "CREATE INDEX IF NOT EXISTS lineage_source ON {s}.lineage(tenant, source_key)",
    """CREATE TABLE IF NOT EXISTS {s}.subjects(
        tenant text NOT NULL,
        subject text NOT NULL,
        identifiers bytea NOT NULL,
        updated_at double precision NOT NULL,
        PRIMARY KEY (tenant, subject))""",
    """CREATE TABLE IF NOT EXISTS {s}.mentions(
        record_id bigint NOT NULL,
        tenant text NOT NULL,
        subject text NOT NULL,
        PRIMARY KEY (record_id, subject))""",
    "CREATE INDEX IF NOT EXISTS mentions_subject ON {s}.mentions(tenant, subject)",
    """CREATE TABLE IF NOT EXISTS {s}.quarantine(
        record_id bigint PRIMARY KEY,
        tenant text NOT NULL,
        why text NOT NULL,
        handle text NOT NULL,
        since double precision NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS {s}.policies(tenant text PRIMARY KEY, policy text NOT NULL, reason bytea)",
    """CREATE TABLE IF NOT EXISTS {s}.reasons(
        record_id bigint NOT NULL,
        tenant text NOT NULL,
        reason_h text NOT NULL,
        text bytea NOT NULL,
        created_at double precision NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS reasons_record ON {s}.reasons(record_id)",
    """CREATE TABLE IF NOT EXISTS {s}.purposes(
        tenant text NOT NULL,
        purpose text NOT NULL,
        PRIMARY KEY (tenant, purpose))""",
    """CREATE TABLE IF NOT EXISTS {s}.changes(
        epoch bigint NOT NULL,
        record_id bigint NOT NULL,
        tenant text NOT NULL,
        op text NOT NULL CHECK (op IN ('put', 'drop')))""",
    "CREATE INDEX IF NOT EXISTS changes_epoch ON {s}.changes(epoch)",
    """CREATE TABLE IF NOT EXISTS {s}.receipts(
        handle text PRIMARY KEY,
        epoch bigint NOT NULL,
        kind text NOT NULL,
        tenant_h text NOT NULL,
        created_at double precision NOT NULL,
        body jsonb NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS receipts_epoch ON {s}.receipts(epoch)",
    """CREATE TABLE IF NOT EXISTS {s}.evidence(
        handle text PRIMARY KEY,
        tenant_h text NOT NULL,
        epoch bigint NOT NULL,
        erased_ids bytea NOT NULL,
        quarantined_ids bytea NOT NULL,
        anchors bytea NOT NULL,
        tokens bytea NOT NULL,
        fingerprints bytea,
        created_at double precision NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS {s}.path_evidence(
        handle text NOT NULL,
        path text NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (handle, path))""",
    """CREATE TABLE IF NOT EXISTS {s}.ledger(
        seq bigint PRIMARY KEY,
        at double precision NOT NULL,
        kind text NOT NULL,
        handle text,
        body text NOT NULL,
        prev text NOT NULL,
        hash text NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ledger_handle ON {s}.ledger(handle) WHERE handle IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS {s}.keks(
        kek_id text PRIMARY KEY,                 -- a check value computed from the key, never the key
        state text NOT NULL CHECK (state IN ('current', 'next', 'retired')),
        created_at double precision NOT NULL,
        retired_at double precision)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS keks_one_current ON {s}.keks(state) WHERE state IN ('current', 'next')",
    """CREATE TABLE IF NOT EXISTS {s}.data_keys(
        kid bytea PRIMARY KEY,                   -- random; tags every sealed value
        tenant text NOT NULL,
        subject_h text NOT NULL,                 -- keyed hash of the subject, never its name
        wrapped bytea NOT NULL,                  -- the data key sealed by the KEK kek_id
        kek_id text NOT NULL REFERENCES {s}.keks(kek_id),
        created_at double precision NOT NULL,
        UNIQUE (tenant, subject_h))""",
    "CREATE INDEX IF NOT EXISTS data_keys_kek ON {s}.data_keys(kek_id)",
    """CREATE TABLE IF NOT EXISTS {s}.destroyed_keys(
        kid bytea PRIMARY KEY,
        kek_id text NOT NULL,                    -- the KEK its wrapped copies are useless without
        destroyed_at double precision NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS {s}.api_keys(
        id text PRIMARY KEY,                     -- public part, shown in listings
        tenant text NOT NULL,
        secret_h text NOT NULL UNIQUE,           -- hash of the secret part; the secret is never stored
        label_h text,
        created_at double precision NOT NULL,
        revoked_at double precision)""",
    """CREATE TABLE IF NOT EXISTS {s}.backup_exposure(
        tenant text NOT NULL,
        key_h text NOT NULL,
        subject_h text NOT NULL,
        PRIMARY KEY (tenant, key_h, subject_h))""",
    "CREATE INDEX IF NOT EXISTS backup_exposure_subject ON {s}.backup_exposure(tenant, subject_h)",
    """CREATE TABLE IF NOT EXISTS {s}.backups(
        id text PRIMARY KEY,
        path_h text NOT NULL,
        epoch bigint NOT NULL,
        ledger_seq bigint NOT NULL,
        created_at double precision NOT NULL,
        records bigint NOT NULL,
        subjects bigint NOT NULL)""",
)

_V2 = (
    "ALTER TABLE {s}.data_keys ADD COLUMN IF NOT EXISTS subject text",
    "ALTER TABLE {s}.data_keys ALTER COLUMN subject_h DROP NOT NULL",
    "CREATE UNIQUE INDEX IF NOT EXISTS data_keys_subject ON {s}.data_keys(tenant, subject)",
    "ALTER TABLE {s}.changes ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY",
    "CREATE INDEX IF NOT EXISTS claims_record ON {s}.claims(record_id)",
    "CREATE INDEX IF NOT EXISTS quarantine_tenant ON {s}.quarantine(tenant)",
    "CREATE INDEX IF NOT EXISTS records_sealed_by ON {s}.records(sealed_by)",
    # each efface process that replays the change log, and how far it may be pruned for it
    """CREATE TABLE IF NOT EXISTS {s}.change_readers(
        reader text PRIMARY KEY,
        upto bigint NOT NULL,
        seen_at double precision NOT NULL)""",
)

_V3 = (
    # the tenant's name and the label, sealed with the API key's own data key (service/pgkeys.py)
    "ALTER TABLE {s}.api_keys ADD COLUMN IF NOT EXISTS sealed bytea",
)

_V4 = (
    # pgvector's type is stored EXTERNAL: in a row made long by its sealed text, the toaster
    # moves the vector out of line, and every distance the planner's exact plan (a small
    # tenant's) computes first fetched it from the TOAST table (measured: 39 ms for 5,000
    # Debian descriptions). MAIN keeps it in the row unless nothing else can leave it; rows
    # written before keep their layout until rewritten.
    "ALTER TABLE {s}.records ALTER COLUMN embedding SET STORAGE MAIN",
)

# (table, column): what ANALYZE must never sample into pg_statistic (migration 5)
_NO_STATISTICS = (
    ("records", "key"),
    ("records", "text"),
    ("records", "metadata"),
    ("records", "sources"),
    ("records", "sealed_by"),
    ("records", "embedding"),
    ("tenants", "name"),
    ("claims", "subject"),
    ("lineage", "source_key"),
    ("subjects", "subject"),
    ("subjects", "identifiers"),
    ("mentions", "subject"),
    ("policies", "reason"),
    ("reasons", "text"),
    ("data_keys", "subject"),
    ("data_keys", "wrapped"),
    ("data_keys", "kid"),
    ("destroyed_keys", "kid"),
    ("api_keys", "sealed"),
)
_V5 = tuple(f"ALTER TABLE {{s}}.{t} ALTER COLUMN {c} SET STATISTICS 0" for t, c in _NO_STATISTICS)

_V6 = (
    "ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS key_sealed bytea",
    "ALTER TABLE {s}.data_keys ADD COLUMN IF NOT EXISTS name bytea",
    "ALTER TABLE {s}.records ALTER COLUMN key_sealed SET STATISTICS 0",
    "ALTER TABLE {s}.data_keys ALTER COLUMN name SET STATISTICS 0",
    "ALTER TABLE {s}.data_keys ALTER COLUMN subject_h SET STATISTICS 0",
    f"INSERT INTO {{s}}.meta(k, v) SELECT '{NAMES_IN_CLEAR}', '1' WHERE EXISTS (SELECT 1 FROM {{s}}.records)"
    " OR EXISTS (SELECT 1 FROM {s}.data_keys WHERE subject IS NOT NULL) OR EXISTS (SELECT 1 FROM {s}.subjects)"
    " OR EXISTS (SELECT 1 FROM {s}.mentions) ON CONFLICT (k) DO NOTHING",
)

_V7 = ("ALTER TABLE {s}.meta ALTER COLUMN v SET STATISTICS 0",)


def vector_digest(column: str) -> str:
    """SQL for the digest of the ``vector`` value ``column`` (:data:`VECTOR_DIGEST`)."""
    return f"(md5(vector_send({column}))::uuid)"


VECTOR_DIGEST = vector_digest("embedding")
"""A digest of a record's vector as PostgreSQL computes it from the vector's binary form
(``vector_send``: the dimension, then each float32's exact bits), so equal bytes always give
equal digests, whatever the session's settings (the text form is avoided: its digits are
pgvector's choice, and ``-0`` and ``0`` are equal vectors but different bytes). Every write
path gets it, and every copy of ``records`` that rebuilds its indexes: nothing in efface
computes it; ``NULL`` for a record without a vector. Not a proof of equality: a lookup by it
compares the vectors' bytes after (:meth:`.txmore.TxMore.stored_forms`). Like the vectors it
is taken from, it leaves the server's files with the rewrite of ``records`` (the maintenance's
``VACUUM FULL`` rebuilds the index)."""
VECTOR_DIGEST_INDEX = "records_vector_digest"
"""The btree index of ``records`` on :data:`VECTOR_DIGEST` (migration 8)."""

_V8 = (
    f"CREATE INDEX IF NOT EXISTS {VECTOR_DIGEST_INDEX} ON {{s}}.records ({VECTOR_DIGEST})",
    # ANALYZE samples an expression index's values into pg_statistic like a column's (migration 5)
    f"ALTER INDEX {{s}}.{VECTOR_DIGEST_INDEX} ALTER COLUMN 1 SET STATISTICS 0",
    # an erasure asks which of the name hashes it deleted a live row still holds, by the hash
    # alone (txmore.stored_forms): these tables' indexes lead with the tenant, which PostgreSQL
    # before 18 cannot skip, and 18 skips one tenant at a time (a scan of the whole index
    # when a store has thousands of tenants); claims has its own (claims_subject)
    "CREATE INDEX IF NOT EXISTS mentions_by_subject ON {s}.mentions(subject)",
    "CREATE INDEX IF NOT EXISTS subjects_by_subject ON {s}.subjects(subject)",
    "CREATE INDEX IF NOT EXISTS data_keys_by_subject ON {s}.data_keys(subject)",
)

_V9 = (
    # a process of this version takes the reader lock (online.reader_lock) before every
    # snapshot and says so when it registers; a row without it is a process of an earlier
    # version, whose snapshots an online swap could pass under (online.unsupported)
    "ALTER TABLE {s}.change_readers ADD COLUMN IF NOT EXISTS snapshot_lock boolean NOT NULL DEFAULT false",
)

CLAIMS_LIVE_INDEX = "claims_live"
"""The index of ``claims`` (migration 10) that answers whether a record has a live claim for a
purpose (and subject) without reading the claim: an index-only scan where the table's pages
are marked all-visible (``VACUUM``: autovacuum's), a look-up of the row as before elsewhere.
It leads with ``record_id``, so it serves every look-up of a record's claims the index by
``record_id`` alone served (dropped: one index fewer to write, not one more)."""

HNSW_BUILD = "m = 8, ef_construction = 128"
"""The build parameters of the HNSW index of ``records.embedding`` (migration 10; pgvector's
defaults are ``m = 16, ef_construction = 64``). Measured at 100k records (hashing vectors,
recall's statement, 1GB of buffers): the graph walk's CPU about 12 % less at the same
``hnsw.ef_search``, an insert's about 14 % less (into 20k records); against an exact scan,
49 % of the 50 nearest found, where a graph built with the defaults in one ``CREATE INDEX``
(as the maintenance's rewrite builds it) finds 47 % and one grown by inserts 52 %; ``m = 8``
with pgvector's ``ef_construction`` 64 found 41 % (docs/postgres.md, *Recall*). The
maintenance's rewrite of ``records`` keeps them (it copies each index's definition)."""

_V10 = (
    # The locks in a write's order (records, then its claims: a write of a server still running
    # during the upgrade holds records and then inserts into claims), each mode on both tables
    # at once: taken table by table in the builds' order, the migration deadlocked with such
    # writes. SHARE for the builds (reads go on, writes wait), the new indexes built first, the
    # old ones dropped last under ACCESS EXCLUSIVE: a DROP INDEX locks its table against every
    # read until the migration's commit, which must not span the build of a graph (about 50 s
    # at 100k records); it is tried without queueing first (:func:`.indexbuild.lock_unqueued`).
    # The graph's build gets the maintenance's memory (:func:`.indexbuild.rebuild_graph`).
    "LOCK TABLE {s}.records, {s}.claims IN SHARE MODE",
    f"CREATE INDEX IF NOT EXISTS {CLAIMS_LIVE_INDEX} ON {{s}}.claims(record_id, purpose) INCLUDE (subject, expires_at)",
    f"CREATE INDEX records_embedding_v10 ON {{s}}.records USING hnsw (embedding vector_cosine_ops) WITH ({HNSW_BUILD})",
    "LOCK TABLE {s}.records, {s}.claims IN ACCESS EXCLUSIVE MODE",
    "DROP INDEX IF EXISTS {s}.records_embedding",
    "ALTER INDEX {s}.records_embedding_v10 RENAME TO records_embedding",
    "DROP INDEX IF EXISTS {s}.claims_record",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the first schema", _V1),
    Migration(2, "the origin: data keys by subject, the change log's order", _V2),
    Migration(3, "API keys: their tenant's name and label sealed", _V3),
    Migration(4, "vectors kept in the row, never in the TOAST table", _V4),
    Migration(5, "no planner statistics sampled from content, names or keys", _V5),
    Migration(6, "no subject name or record key in clear: keyed hashes and sealed copies", _V6),
    Migration(7, "the hash secret out of the database, into the KEK file", _V7),
    Migration(8, "records found by a digest of their vector's bytes, rows by a name hash alone", _V8),
    Migration(9, "the change log's readers say whether their snapshots take the reader lock", _V9),
    Migration(10, "claims' liveness answered from an index by record and purpose", _V10),
)

TABLES = (
    "meta",
    "epoch_counter",
    "mutations",
    "tenants",
    "records",
    "claims",
    "lineage",
    "subjects",
    "mentions",
    "quarantine",
    "policies",
    "reasons",
    "purposes",
    "changes",
    "receipts",
    "evidence",
    "path_evidence",
    "ledger",
    "keks",
    "data_keys",
    "destroyed_keys",
    "api_keys",
    "backup_exposure",
    "backups",
    "change_readers",
)
"""Every table :func:`migrate` creates, for docs and tests."""


def check_name(schema: str) -> str:
    """``schema`` if it is a plain lower-case SQL identifier (it is put into SQL as is)."""
    if not isinstance(schema, str) or not _NAME.fullmatch(schema):
        raise InvalidInput(  # also a ValueError
            "a schema name is a lower-case letter or underscore, then up to 62 lower-case letters, digits and "
            "underscores: name another schema, or leave schema= out for 'efface'"
        )
    return schema


def schema_version(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> int | None:
    """The version the database's efface schema is at; None when efface has not created it."""
    s = check_name(schema)
    if conn.execute("SELECT to_regclass(%s)", (f"{s}.meta",)).fetchone() == (None,):
        return None
    row = conn.execute(f"SELECT v FROM {s}.meta WHERE k = 'schema_version'").fetchone()
    return None if row is None else int(row[0])


def _ensure_vector(conn: psycopg.Connection) -> None:
    import psycopg

    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        return
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise StoreUnwritable(
            "the pgvector extension is not installed in this database and efface's role may not "
            "create it: have a superuser run CREATE EXTENSION vector in it once"
        ) from None
    except psycopg.errors.FeatureNotSupported:  # pragma: no cover - a server without pgvector
        raise StoreUnwritable("this PostgreSQL server has no pgvector extension to create") from None


def migrate(conn: psycopg.Connection, *, dim: int, schema: str = DEFAULT_SCHEMA) -> int:
    """Create or bring efface's schema up to :data:`SCHEMA_VERSION`; returns the version.

    Idempotent and safe to run from several servers at once (one advisory lock, waited for
    with no ``lock_timeout``; one transaction per run; a current schema is only read).
    ``dim``: the embedding dimension; a database made for another is refused
    (:class:`efface.errors.EmbedderMismatch`). ``conn`` must be autocommit. A run that ends in
    a deadlock or a role's ``lock_timeout`` on a table (migration 10 locks ``records`` and
    ``claims``) is rolled back and run again, up to :data:`MIGRATE_ATTEMPTS` times; then
    :class:`efface.errors.StoreUnwritable`, as when other sessions hold those tables past
    :data:`.indexbuild.SWAP_LIMIT` (:func:`.indexbuild.lock_unqueued`). No ``statement_timeout`` applies to it."""
    import psycopg

    s = check_name(schema)
    if not conn.autocommit:
        raise ValueError("migrate() needs an autocommit connection")
    _ensure_vector(conn)
    if _checked(conn, s, int(dim)) == (SCHEMA_VERSION, True):
        return SCHEMA_VERSION  # no lock: a server opening while another migrates waits for nothing
    for attempt in range(1, MIGRATE_ATTEMPTS + 1):
        try:
            with conn.transaction():
                _migrate(conn, s, int(dim))
            return SCHEMA_VERSION
        except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable) as e:
            # the transaction is atomic: rolled back whole, it is run again whole
            if attempt == MIGRATE_ATTEMPTS:
                raise StoreUnwritable(
                    f"efface's schema migration could not take its locks in {MIGRATE_ATTEMPTS} attempts (each ended "
                    "by a deadlock with other transactions or by the lock_timeout of efface's role): open the store "
                    "again, at a quieter time or with a longer lock_timeout"
                ) from None
            log.warning(
                "schema migration: %s with another transaction; attempt %d of %d",
                type(e).__name__,
                attempt + 1,
                MIGRATE_ATTEMPTS,
            )
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _checked(conn: psycopg.Connection, s: str, dim: int) -> tuple[int, bool]:
    """The schema's version (0: none) and whether its dimension is recorded; a newer schema or
    another dimension refused. Read without the advisory lock too (both are committed in the
    migration's one transaction)."""
    have = schema_version(conn, s) or 0
    if have > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database's efface schema is at version {have}; this efface knows up to {SCHEMA_VERSION}"
        )
    stored = conn.execute(f"SELECT v FROM {s}.meta WHERE k = 'embedding_dim'").fetchone() if have else None
    if stored is not None and int(stored[0]) != dim:
        raise EmbedderMismatch(f"the store's vectors have {stored[0]} dimensions, the embedder asked for makes {dim}")
    return have, stored is not None


def _migrate(conn: psycopg.Connection, s: str, dim: int) -> None:
    # a migration may build an index for minutes (migration 10's graph): a statement_timeout
    # (or PostgreSQL 17's transaction_timeout) set for efface's role would fail it on every open
    conn.execute("SET LOCAL statement_timeout = 0")
    conn.execute("SELECT set_config(name, '0', true) FROM pg_settings WHERE name = 'transaction_timeout'")
    # another server's migration holds the advisory lock for as long as it runs (minutes for
    # migration 10's graph): waiting for it queues no table lock, so no lock_timeout of the
    # role's bounds it; the role's setting is back in force for the table locks after it
    role_lock_timeout = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
    conn.execute("SET LOCAL lock_timeout = 0")
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (role_lock_timeout[0] if role_lock_timeout else "0",))
    # not CREATE SCHEMA IF NOT EXISTS: that needs CREATE on the database even when the
    # schema exists, and an operator may have made it for a role that has no such right
    if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (s,)).fetchone() is None:
        conn.execute(f"CREATE SCHEMA {s}")
    have, _ = _checked(conn, s, dim)
    for m in MIGRATIONS:
        if m.version <= have:
            continue
        for stmt in m.statements:
            sql = stmt.format(s=s, dim=dim)
            if m.version > 1 and "USING hnsw" in sql:
                rebuild_graph(conn, s, sql)
            elif sql.endswith("IN ACCESS EXCLUSIVE MODE"):
                lock_unqueued(conn, sql)
            else:
                conn.execute(sql)
        conn.execute(
            f"INSERT INTO {s}.meta(k, v) VALUES ('schema_version', %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            (str(m.version),),
        )
    conn.execute(
        f"INSERT INTO {s}.meta(k, v) VALUES ('embedding_dim', %s) ON CONFLICT (k) DO NOTHING",
        (str(dim),),
    )
