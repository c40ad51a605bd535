"""The embedded origin: one SQLite file in WAL mode with ``secure_delete=ON``.

We use apsw rather than the standard library's sqlite3 because apsw bundles a current
SQLite (3.54 here): FTS5's ``contentless_delete`` and ``secure-delete`` need >= 3.43,
and the Python build on this machine links 3.40.

Concurrency: one writer connection, used only under :attr:`SQLiteOrigin.write_lock` (every
transaction, and the maintenance writes of :mod:`.physical` and :mod:`.text`), and one
read-only connection per reading thread. WAL gives each read its own snapshot, so reads
never wait for a write, a checkpoint, an index rebuild, a verification or a backup; and
:meth:`SQLiteOrigin.snapshot` holds one snapshot across the several statements of one read
(a recall resolves candidates and reads their text from the same state). apsw releases the
GIL inside SQLite, so readers run in parallel with each other and with maintenance.

It does so at every step of a statement, i.e. for every row: on a busy server each row then
waits for the GIL to come back (up to a switch interval while another thread runs Python).
Reads on the recall path therefore ask for one row, aggregated in SQL (``json_group_array``,
and ``group_concat`` for embeddings), rather than a row per record: fetching 100 ids took
7.7 ms beside one thread running Python and 1.2 ms as one row (0.05 ms alone, either way).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import apsw

from ...errors import EffaceError, StoreUnwritable
from ..base import RecordRow
from .edge import edge, guarded, savepoint
from .schema import _SCHEMA, FTS_SCHEMA, PATH_EVIDENCE, SCHEMA_VERSION
from .tx import (
    CLAIM_COLS,
    LIVE,
    NOT_QUARANTINED,
    REC_COLS,
    SQLiteTx,
    claim_row,
    in_chunks,
    record_row,
)

GROUP_LOST = (
    "SQLite rolled back the transaction these writes shared (a full disk or an I/O error): none of them "
    "was committed; free space or fix the disk and send them again"
)

WAL_AUTOCHECKPOINT = 4096
"""Pages in the WAL past which a commit runs a passive checkpoint (see ``_setup``)."""

READ_MMAP = 1 << 40
"""A reader connection maps the database file (its first TiB) instead of copying each page
it reads into its own cache with a read call: recall's live checks look up a few hundred
scattered rows, and cost a quarter to a third less so (``docs/benchmarks-history.md``). Read-only:
writes still go through the writer's ``pwrite``, and a page the gap scrub zeroes is zero in
every map at once. The mapped pages are the kernel's page cache, shared, so they count in
the process's RSS as they are read."""


@guarded
class SQLiteOrigin:
    """The origin on one SQLite file (see the module docstring for its threads). Its errors
    leave it as efface's (:mod:`.edge`): a damaged file as ``StoreDamaged``, a full disk or a
    read-only directory as ``StoreUnwritable``."""

    def __init__(self, path: str):
        self.path = path
        self._members: list[SQLiteTx] = []
        """The members of the open group (:meth:`group`) that committed their savepoints."""
        self._alone = self._abandoned = False
        """Whether the open group has one member (no savepoint), and whether it raised."""
        new = not os.path.exists(path)
        self.write_lock = threading.RLock()
        """Held for every use of the writer connection."""
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_mu = threading.Lock()
        self._closed = False
        # Any: apsw types rows as tuples of any SQLite value; each method says what it returns.
        self._c: Any = apsw.Connection(path)
        try:
            self._setup(new)
        except BaseException:  # a damaged or unwritable file: leave no connection open behind
            self.close()
            raise

    def _setup(self, new: bool) -> None:
        path = self.path
        self._c.setbusytimeout(5000)
        self._c.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit fsyncs the WAL, so an acknowledgement means the tombstone is durable.
        self._c.execute("PRAGMA synchronous=FULL")
        # Freed pages and cells are overwritten with zeros, not left behind.
        self._c.execute("PRAGMA secure_delete=ON")
        self._c.execute("PRAGMA foreign_keys=ON")
        # The writer's page cache (SQLite's default is 2 MiB): a batch of writes inserts into
        # the (tenant, key) and claim indexes at random places, and at 100k records those
        # index pages no longer fit, so every batch read them back from the OS; measured at
        # 100k, 32-64 MiB took the records and claims inserts from ~42 to ~18 ms of CPU per
        # 1000 records. Only the writer's: readers keep the default.
        self._c.execute("PRAGMA cache_size=-32768")
        # A passive checkpoint once the WAL holds this many pages (SQLite's default: 1000, about
        # every commit of a 1000-record import at 200k records, which dirties ~1,100 pages: each
        # page copied and fsynced once per commit). At 4096, the index pages that consecutive
        # commits dirty again are copied once. An erasure's checkpoint empties the WAL whatever
        # this is (.physical); the WAL a verify scans is what was written after it.
        self._c.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
        with savepoint(self._c):
            self._c.execute(_SCHEMA)
            self._c.execute(FTS_SCHEMA)
            self._c.execute(PATH_EVIDENCE)
            # A delete takes the row's entries out of the index pages at once (see .text and
            # .separators), so an erasure rewrites the pages it touched instead of merging the
            # whole index. Set once: an open that writes nothing can still serve reads on a
            # full disk.
            if self._c.execute("SELECT 1 FROM fts_config WHERE k='secure-delete' AND v=1").fetchone() is None:
                self._c.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 1)")
        if new:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
        schema = self.meta_get("schema")
        if schema is None:
            self.meta_set("schema", SCHEMA_VERSION)
        elif schema != SCHEMA_VERSION:
            self.close()
            raise EffaceError(
                f"this store's schema is version {schema}, this efface needs {SCHEMA_VERSION} "
                "(tenant names are no longer kept in clear): back it up with the efface that made it, "
                "and restore into a new store"
            )
        from .physical import SQLitePhysical
        from .text import SQLiteText

        self.physical = SQLitePhysical(self)
        """Byte-level capabilities (checkpoint, index rebuild, live regions): see :mod:`.physical`."""
        self.text = SQLiteText(self)
        """The full-text word index (FTS5 in this file): see :mod:`.text`."""
        self.text.fold_index()
        self.text.start_postings()
        from .liveness import Liveness

        (top,) = self._r().execute("SELECT coalesce(max(id), 0) FROM records").fetchone()
        self.liveness = Liveness(path, self._c, self.write_lock, top)
        """Which records are live, in memory: recall's first check (:mod:`.liveness`)."""

    # -- connections --------------------------------------------------------------------
    @property
    def writer(self) -> Any:
        """The writer connection; use it only with :attr:`write_lock` held."""
        return self._c

    def _r(self) -> Any:
        """This thread's read-only connection (opened on first use)."""
        c = getattr(self._local, "conn", None)
        if c is None:
            if self._closed:
                raise apsw.ConnectionClosedError("the origin is closed")
            c = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READONLY)
            c.setbusytimeout(5000)
            c.execute(f"PRAGMA mmap_size={READ_MMAP}")
            self._local.conn = c
            self._local.depth = 0
            with self._readers_mu:
                self._readers.append(c)
        return c

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[SQLiteOrigin]:
        """Hold one read snapshot across every read made in this thread inside the block."""
        with edge(self.path):
            c = self._r()
            if self._local.depth == 0:
                c.execute("BEGIN")
            self._local.depth += 1
            try:
                yield self
            finally:
                self._local.depth -= 1
                if self._local.depth == 0:
                    c.execute("COMMIT")

    @contextlib.contextmanager
    def transaction(self, kind: str, tenant: str | None, now: float) -> Iterator[SQLiteTx]:
        """One write transaction; the epoch is assigned in it. Commits (fsynced) on exit."""
        with self.write_lock, edge(self.path):
            self._c.execute("BEGIN IMMEDIATE")
            try:
                self._c.execute("INSERT INTO mutations(kind, tenant, at) VALUES(?,?,?)", (kind, tenant, now))
                tx = SQLiteTx(self._c, self._c.last_insert_rowid())
                yield tx
            except BaseException:
                self._c.execute("ROLLBACK")
                self.liveness.rolled_back()
                raise
            self._c.execute("COMMIT")
            self.text.committed(tx.text_changes)
            self.liveness.committed(tx.touched, tx.fresh)

    @contextlib.contextmanager
    def group(
        self, members: int | None = None
    ) -> Iterator[Callable[[str, str | None, float], AbstractContextManager[SQLiteTx]]]:
        """Group commit: several write transactions in one SQLite transaction, committed with
        one fsync. The block gets ``member(kind, tenant, now)``, a context manager like
        :meth:`transaction`: each member is a savepoint with its own epoch, rolled back alone
        when its block raises. Nothing of any member is durable before the group's COMMIT;
        if SQLite rolled the whole transaction back (a full disk), the group raises at its
        end and no member stays.

        ``members``: how many members the caller has at most. A group of one runs its member
        without a savepoint, and rolls the whole transaction back if its block raises (there
        is nothing else in it): inside a savepoint SQLite copies every page a statement changes
        for the first time since the savepoint began into a statement journal, so that it can
        roll back to it, and an import's inserts change index pages at random: at 60k records
        a 1000-record upsert cost 36-45 us a record in a savepoint against 10-15 without."""
        with self.write_lock, edge(self.path):
            self._c.execute("BEGIN IMMEDIATE")
            self._members = []
            self._alone, self._abandoned = members == 1, False
            try:
                yield self._member
                if self._abandoned:  # the one member raised: its transaction is rolled back already
                    self.liveness.rolled_back()
                    return
                if not self._c.in_transaction:
                    raise StoreUnwritable(GROUP_LOST)
            except BaseException:
                if self._c.in_transaction:
                    self._c.execute("ROLLBACK")
                self.liveness.rolled_back()
                raise
            self._c.execute("COMMIT")
            self.text.committed([ch for tx in self._members for ch in tx.text_changes])
            self.liveness.committed(
                [rid for tx in self._members for rid in tx.touched],
                {rid: row for tx in self._members for rid, row in tx.fresh.items()},
            )

    @contextlib.contextmanager
    def _member(self, kind: str, tenant: str | None, now: float) -> Iterator[SQLiteTx]:
        with edge(self.path):
            if not self._c.in_transaction:  # an earlier member's failure took the transaction with it
                raise StoreUnwritable(GROUP_LOST)
            if self._alone and (self._members or self._abandoned):
                raise RuntimeError("a group of one was given a second member")
            mark = not self._alone
            if mark:
                self._c.execute("SAVEPOINT member")
            try:
                self._c.execute("INSERT INTO mutations(kind, tenant, at) VALUES(?,?,?)", (kind, tenant, now))
                tx = SQLiteTx(self._c, self._c.last_insert_rowid())
                yield tx
            except BaseException:
                if self._c.in_transaction:
                    if mark:
                        self._c.execute("ROLLBACK TO member")
                        self._c.execute("RELEASE member")
                    else:
                        self._c.execute("ROLLBACK")
                self._abandoned = not mark
                raise
            if mark:
                self._c.execute("RELEASE member")
            self._members.append(tx)  # its changes reach the postings once the group commits

    def meta_set(self, key: str, value: str) -> None:
        with self.write_lock, savepoint(self._c):
            self._c.execute(
                "INSERT INTO meta(k, v) VALUES(?,?) ON CONFLICT(k) DO UPDATE SET v=excluded.v", (key, value)
            )

    def prune_changes(self, upto: int) -> None:
        with self.write_lock, savepoint(self._c):
            self._c.execute("DELETE FROM changes WHERE epoch<=?", (upto,))

    def record_verification(
        self, handle: str, body: dict, receipt_level: str, discard: bool, now: float
    ) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level, and (once erased is
        proven) delete the fingerprints and the word hashes: one transaction, so a crash
        leaves all or none."""
        with self.write_lock:
            self._c.execute("BEGIN IMMEDIATE")
            try:
                tx = SQLiteTx(self._c, self.current_epoch())
                seq, digest = tx.append_ledger("verify", handle, body, now)
                self._c.execute(
                    "UPDATE receipts SET body=json_set(body, '$.level', ?) WHERE handle=?", (receipt_level, handle)
                )
                if discard:
                    # the word hashes too: beside the secret they are a dictionary away from the words
                    self._c.execute("UPDATE evidence SET fingerprints=NULL, tokens=X'5B5D' WHERE handle=?", (handle,))
                    self._c.execute("DELETE FROM path_evidence WHERE handle=? AND path='fts'", (handle,))
            except BaseException:
                self._c.execute("ROLLBACK")
                raise
            self._c.execute("COMMIT")
        return seq, digest

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

    def erased_epoch(self) -> int:
        """The newest epoch whose erased bytes are gone from the origin's own files."""
        return self.physical.checkpointed_epoch()

    def live_subject_hashes(self, tenant: str, hashes: Iterable[str]) -> set[str]:
        return SQLiteTx(self._r(), 0).live_subject_hashes(tenant, hashes)

    def exposed(self, tenant: str, key_hashes: Sequence[str]) -> set[str]:
        return SQLiteTx(self._r(), 0).exposed(tenant, key_hashes)

    def close(self) -> None:
        self._closed = True
        if hasattr(self, "text"):
            self.text.stop_postings()
        if hasattr(self, "liveness"):
            self.liveness.stop()
        with self._readers_mu:
            readers, self._readers = self._readers, []
        for c in readers:
            c.close()
        with self.write_lock:
            self._c.close()

    # -- reads (each on this thread's reader connection) ---------------------------------
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

    def tenants(self) -> list[str]:
        return [r[0] for r in self._r().execute("SELECT DISTINCT tenant FROM records")]

    def current_epoch(self) -> int:
        row = self._r().execute("SELECT seq FROM sqlite_sequence WHERE name='mutations'").fetchone()
        return row[0] if row else 0

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

    def meta_get(self, key: str) -> str | None:
        row = self._r().execute("SELECT v FROM meta WHERE k=?", (key,)).fetchone()
        return row[0] if row else None

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
        for table, col in (
            ("records", "id"),
            ("claims", "record_id"),
            ("lineage", "record_id"),
            ("mentions", "record_id"),
            ("quarantine", "record_id"),
            ("reasons", "record_id"),
        ):
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


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
