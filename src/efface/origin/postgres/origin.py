"""The PostgreSQL origin (issue #34): efface's source of truth in a PostgreSQL + pgvector
database that several efface processes may share.

* **Connections.** A psycopg 3 pool of autocommit connections for reads (each statement sees
  the newest committed state); :meth:`PostgresOrigin.snapshot` holds one of them in a
  ``REPEATABLE READ`` read-only transaction for the thread's block. One writer connection,
  used under :attr:`PostgresOrigin.write_lock` (a threading lock: it orders this process's
  writers; the epoch counter's row lock orders every process's, :mod:`.epochs`).
* **Epochs.** :meth:`PostgresOrigin.transaction` assigns the epoch inside the committing
  transaction with :func:`.epochs.transaction`, which records the commit's LSN after it.
* **Sealed content** (:mod:`.sealing`): texts, metadata, sources, identifiers, reasons,
  tenant names, record keys and subject names leave this process encrypted with per-subject
  data keys (:mod:`.keys`); subject names and record keys are looked up by keyed hashes under
  a key of the KEK file (:mod:`.names`), never in clear.
* **The hash secret** (:mod:`.hashsecret`): every keyed hash of the store (tenant ids,
  subject hashes, fingerprints) is made with a secret the KEK file gives (derived from its
  name key, or kept there for an older database), never the database (:meth:`PostgresOrigin.hash_secret`).
* **Words** (:mod:`.text`): an index in this process's memory, kept up from the change log.
  **Vectors** in a ``vector(dim)`` column; recall's ANN path reads them through
  :meth:`embeddings` / :meth:`records_of_tenant` / :meth:`changes_since` into its own files.
* **Per-process meta.** Meta keys of the ANN path (``ann.*``) describe files in this process's
  cache directory, not the database: they are kept in that directory (``local-meta.json``),
  so a second process never takes another's saved epoch for its own. A directory without
  them (a new process) starts at the epoch of its open, its index files to be rebuilt from
  the origin (``ann.file.*`` answer "saved once", so a missing file is rebuilt, never
  replayed from a change log another process may have pruned); so does a directory whose
  saved epoch the change log was pruned past.
* **The change log's readers.** Each origin registers itself (its :attr:`~PostgresOrigin.instance`)
  in ``change_readers`` with how far it has replayed the log (what the compactor passes to
  :meth:`prune_changes`), and the log is pruned only up to the oldest reader seen in the last
  :data:`READER_TTL_S` seconds. Pruning and a registration at open hold the advisory lock
  ``changes`` (:mod:`.locks`), so no process prunes past one that is registering.
* **Locks across processes** (:class:`~efface.origin.base.SharedByProcesses`): :meth:`shared_lock`
  holds one of :mod:`.locks`' named advisory locks; the compactor's shared physical work runs
  under ``maintenance``.

* **The ladder** (:mod:`.maintenance`, docs/evidence-ladder.md): the compactor runs
  :meth:`maintain` (a declared :class:`~efface.origin.base.Maintained`): KEK rotation after
  destroyed data keys, the touched relations rewritten, checkpoint, WAL switched past its
  retention, under an advisory lock; :meth:`erased_epoch` is the epoch the last run covered
  (kept in the database, shared by every server). ``verify`` asks :meth:`copy_checks` (a
  :class:`~efface.origin.base.CopyChecks`) where each copy on the server stands: the
  primary's files and WAL scanned when this process reads the data directory, else
  ``shredded`` or ``cannot_verify`` with the reason; each replica likewise. ``physical``
  and ``liveness`` are None: no byte-level side in this process's files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...model import Check, CopyState
from ..base import RecordRow, require_epoch
from ..capabilities import ScanFn
from ..ledger import SECRET_META
from . import buffers, epochs, locks, maintenance, names, online, pipeline, schema, walpass
from .keys import Keys
from .reads import GENERIC_FROM, HNSW_SETTINGS, PLANNED_GENERIC, PLANNED_IN_SNAPSHOT, PgReads, id_array
from .rows import CLOSING_SQL, EarlyEnds, opened
from .sample import PgSample
from .sealing import Sealer
from .text import PRUNED, PgText
from .tx import PostgresTx

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("efface")

LOCAL_META = ("ann.",)
"""Meta key prefixes kept per process (see the module docstring)."""
LOCAL_EPOCHS = ("ann.saved_epoch", "ann.scrubbed_epoch")
"""The ANN path's saved and scrubbed epochs (``efface.paths.ann``): a new directory's are the
epoch at open (its files, none yet, hold nothing older)."""
LOCAL_FILES = "ann.file."
"""The ANN path's "this tenant's file was saved once" keys: always yes here (a missing file is
rebuilt from the origin)."""
DATA_DIR_ENV = "EFFACE_PG_DATA_DIR"
"""Names the server's data directory as this process reads it, when ``SHOW data_directory``
is not allowed (:mod:`.maintenance`)."""
READER_TTL_S = 600.0
"""A reader of the change log not seen for this long (a process that died) no longer holds
the log back. A live process says it is alive more often (``SHARED_REFRESH_S`` of
:mod:`efface.erasure.changelog`)."""


def _configure(conn: psycopg.Connection) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)
    for name, value in HNSW_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


class PostgresOrigin(PgReads):
    """The origin on PostgreSQL (see the module docstring)."""

    physical = None
    """No byte-level side in this process's files: the server's are checked per copy
    (:meth:`copy_checks`) after :meth:`maintain`."""
    liveness = None
    """No copy of liveness in memory: every check reads the database."""

    def __init__(
        self,
        url: str,
        *,
        dim: int,
        kek_file: str | os.PathLike[str] | None = None,
        local_dir: str | None = None,
        schema_name: str = schema.DEFAULT_SCHEMA,
        pool_size: int = 8,
        data_dir: str | None = None,
    ) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self._s = schema.check_name(schema_name)
        self.write_lock = threading.RLock()
        self._local = threading.local()
        self._purposes_seen = set()
        self._closed = False
        self._early = EarlyEnds()
        self._tx: PostgresTx | None = None
        self._tx_thread: int | None = None
        self._keys = Keys(kek_file, schema=self._s)
        self._sealer = Sealer(self._keys)
        self._maint = maintenance.Maintenance(
            self._s, self._keys, data_dir or os.environ.get(DATA_DIR_ENV) or None, url=url
        )
        self._w = psycopg.connect(url, autocommit=True)
        try:
            schema.migrate(self._w, dim=dim, schema=self._s)
            self._keys.open(self._w)
            if names.pending(self._w, self._s):  # a database written before migration 6
                with epochs.transaction(self._w, names.REWRITE_KIND, None, time.time(), schema=self._s):
                    names.rewrite_clear_names(self._w, self._sealer, self._s, time.time())
            epochs.backfill_lsns(self._w, schema=self._s)
            _configure(self._w)
            if (hint := buffers.check(self._w, self._s)) is not None:
                log.warning(hint)
            self._pool = ConnectionPool(
                url, min_size=1, max_size=pool_size, kwargs={"autocommit": True}, configure=_configure, open=True
            )
        except BaseException:
            self._w.close()
            raise
        self._local_path = None if local_dir is None else os.path.join(local_dir, "local-meta.json")
        self._local_mu = threading.Lock()
        self.instance = secrets.token_hex(8)
        """This process's id among the store's users: its row among the change log's readers."""
        self._local_meta: dict[str, str] = self._start_local(local_dir)
        self.text = PgText(self)
        """The word index, in this process's memory: see :mod:`.text`."""
        self.text.rebuild()
        self._sample = PgSample(self)
        """Kept draws of tenants' vectors, for recall's vector leg (:mod:`.sample`)."""
        self.text.listeners.append(self._sample.changed)

    # -- connections ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection]:
        held = getattr(self._local, "conn", None)
        if held is not None:
            if self._local.closed:
                if self._local.early:
                    raise self._early.ended()
                raise RuntimeError("a read after the snapshot's closing read (records_by_id_closing)")
            if not self._local.begun:
                self._begin()
            yield held
            return
        if self._closed:
            raise RuntimeError("the origin is closed")
        with self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def snapshot(self, at_least: int | None = None) -> Iterator[PostgresOrigin]:
        """Every read made in this thread inside the block sees one committed state, holding
        epoch ``at_least`` (else :class:`~efface.errors.ErasureNotSettled`: see
        :meth:`efface.origin.base.Origin.snapshot`)."""
        with self._snapshot(at_least, deferred=False) as snap:
            yield snap

    @contextlib.contextmanager
    def snapshot_deferred(self) -> Iterator[PostgresOrigin]:
        """:meth:`snapshot`, begun with its first statement instead of a round trip of its own
        (:class:`~efface.origin.capabilities.DeferredSnapshot`, recall's: the word index
        answers at its own epoch meanwhile, :meth:`words_epoch`)."""
        with self._snapshot(None, deferred=True) as snap:
            yield snap

    @contextlib.contextmanager
    def _snapshot(self, at_least: int | None, *, deferred: bool) -> Iterator[PostgresOrigin]:
        if getattr(self._local, "conn", None) is not None:
            require_epoch(self, at_least)
            yield self
            return
        if self._closed:
            raise RuntimeError("the origin is closed")
        with self._pool.connection() as conn:
            self._local.conn, self._local.closed, self._local.begun = conn, False, False
            self._local.epoch = self._local.assumed = None
            self._local.ahead, self._local.early = {}, False
            try:
                if not deferred:
                    self._begin()
                    require_epoch(self, at_least)
                yield self
            finally:
                begun = self._local.begun
                self._local.conn = self._local.epoch = self._local.assumed = None
                self._local.ahead, self._local.early = {}, False
                if begun and not self._local.closed:  # else ended by its closing read already
                    conn.execute("COMMIT")
                self._local.closed = False

    def _begin(self, then: tuple[str, Any] | None = None, *, generic: bool = False, last: bool = False) -> Any:
        """Begin this thread's snapshot and read its epoch in one round trip: the transaction
        begins, ``records`` is locked (:func:`.online.reader_lock`), and its snapshot is taken by
        the ``SELECT``, which also has every prepared
        statement of the snapshot planned for its own arguments (``PLANNED_IN_SNAPSHOT``).
        ``then``: a statement (prepared) and its arguments sent in the same round trip, after
        them (libpq's pipeline mode: :mod:`.pipeline`); its rows are returned. ``generic``: the snapshot's
        prepared statements on generic plans instead (``PLANNED_GENERIC``). ``last``: ``then``
        is the snapshot's last statement, and its ``COMMIT`` goes in the same round trip."""
        conn = self._local.conn
        epoch_sql = f"SELECT {PLANNED_GENERIC if generic else PLANNED_IN_SNAPSHOT}, epoch FROM {self._s}.epoch_counter"
        # records locked before the snapshot is taken: the maintenance's online rewrite never
        # swaps a table under a snapshot older than the swap (online.reader_lock)
        lock_sql = online.reader_lock(self._s)
        rows = None
        self._local.begun = True  # from here the block's end sends COMMIT (a failed one's: a rollback)
        if then is None:
            got = conn.execute(f"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {lock_sql}; {epoch_sql}")
            got.nextset()  # past BEGIN's result to LOCK's
            got.nextset()  # to the SELECT's
            row = got.fetchone()
        else:
            try:
                begin_sql = ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", lock_sql)
                row, rows = pipeline.begin(conn, begin_sql, epoch_sql, then, last=last)
            except BaseException:
                self._local.closed = conn.closed  # a connection closed half way is not committed
                raise
            self._local.closed = self._local.early = last
        self._local.epoch = 0 if row is None else int(row[1])
        return rows

    def _snapshot_rows(self, sql: str, args: Any, *, generic: bool = False, last: bool = False) -> list[Any]:
        """Rows of ``sql`` in this thread's snapshot (prepared: planned for its own arguments
        there), in the round trip that begins it if it has not begun (a deferred snapshot; on
        a generic plan if ``generic``; ended in the same round trip if ``last``, as far as
        :class:`.rows.EarlyEnds` lets it); outside a snapshot, on a pooled connection, never
        prepared."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and not self._local.begun and not self._local.closed:
            return self._begin((sql, args), generic=generic, last=last and self._early.ends_early())
        with self._reading() as conn:
            return conn.execute(sql, args, binary=True, prepare=self.snapshot_epoch() is not None).fetchall()

    def _holding_ahead(self) -> dict[int, tuple[Any, ...]] | None:
        return self._local.ahead if getattr(self._local, "conn", None) is not None else None

    def _dominant(self, tenant: str) -> bool:
        total = self.text.doc_count()
        return total >= GENERIC_FROM and 2 * self.text.tenant_count(tenant) >= total

    def words_epoch(self) -> int | None:
        """The epoch the word index answers at in this thread: its snapshot's; in a deferred
        snapshot not begun yet, the index's own (no round trip), noted so that
        :meth:`words_stale` tells when the snapshot began past it."""
        if getattr(self._local, "conn", None) is not None and not self._local.begun:
            at = self.text.applied()
            self._local.assumed = at if self._local.assumed is None else min(at, self._local.assumed)
            return at
        return self.snapshot_epoch()

    def words_stale(self) -> bool:
        """Whether this thread's snapshot began at a newer epoch than the word index answered
        at before it began (another process committed meanwhile): its words are to be asked
        again, now at the snapshot's epoch. Asked once (the answer is cleared)."""
        assumed = getattr(self._local, "assumed", None)
        if assumed is None or not getattr(self._local, "begun", False):
            return False
        self._local.assumed = None
        return bool(self._local.epoch > assumed)

    def records_by_id_closing(self, ids: Sequence[int]) -> dict[int, RecordRow]:
        """:meth:`records_by_id` as the last read of this thread's snapshot, whose ``COMMIT``
        goes with it in one round trip (psycopg's pipeline mode):
        :class:`~efface.origin.capabilities.ClosingRead`. Each row comes with its data key
        as wrapped (read in the snapshot too), so no key is fetched after the commit. Rows
        read ahead in this snapshot are not read again (:mod:`.rows`)."""
        conn = getattr(self._local, "conn", None)
        held = getattr(self._local, "ahead", {})
        if conn is not None and self._local.early:  # ended with its first statement
            if any(i not in held for i in ids):
                raise self._early.ended()
            self._early.served()
            return opened(self._sealer, self._keys, conn, (held[i] for i in ids))
        if conn is None or self._local.closed or not ids:
            return self.records_by_id(ids)
        if not self._local.begun:
            self._begin()
        got = opened(self._sealer, self._keys, conn, (held[i] for i in ids if i in held))
        rest = [i for i in ids if i not in held]
        if not rest:  # every row read ahead: COMMIT alone (no pipeline: one message less)
            self._local.closed = True
            conn.execute("COMMIT")
            return got
        with conn.pipeline():
            cur = conn.execute(CLOSING_SQL.format(s=self._s), (id_array(rest),))
            conn.execute("COMMIT")
        self._local.closed = True
        got.update(opened(self._sealer, self._keys, conn, cur.fetchall()))
        return got

    def snapshot_epoch(self) -> int | None:
        """The epoch of this thread's snapshot, inside :meth:`snapshot` (a deferred one begins
        here if it has not); else None."""
        if getattr(self._local, "conn", None) is not None and not self._local.begun:
            self._begin()
        return getattr(self._local, "epoch", None)

    def vector_sample(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """At most ``n`` vectors of ``tenant``'s records live for ``purpose``, drawn at random
        and kept in this process until the tenant changed or a while passed (a
        :class:`~efface.origin.capabilities.VectorSample`: :mod:`.sample` says the trade-off)."""
        return self._sample.sample(tenant, purpose, now, n)

    @contextlib.contextmanager
    def transaction(self, kind: str, tenant: str | None, now: float) -> Iterator[PostgresTx]:
        """One write transaction; its epoch is assigned in it (:func:`.epochs.transaction`),
        after every committed one in any process. Commits on a clean exit; on an exception
        nothing of it stays. Its word-index changes enter this process's postings after."""
        with self.write_lock:
            if self._closed:
                raise RuntimeError("the origin is closed")
            with epochs.transaction(self._w, kind, tenant, now, schema=self._s) as etx:
                tx = PostgresTx(self, self._w, etx.epoch)
                self._tx, self._tx_thread = tx, threading.get_ident()
                try:
                    yield tx
                finally:
                    self._tx, self._tx_thread = None, None
            self.text.committed(tx)

    @contextlib.contextmanager
    def _maintenance(self) -> Iterator[psycopg.Connection]:
        """A write without an epoch: joins the open transaction when this thread has one (as
        on the other origins), else its own transaction on the writer connection."""
        with self.write_lock:
            if self._closed:
                raise RuntimeError("the origin is closed")
            if self._tx is not None and self._tx_thread == threading.get_ident():
                yield self._w
                return
            with self._w.transaction():
                yield self._w

    # -- meta ------------------------------------------------------------------------------------
    def _start_local(self, local_dir: str | None) -> dict[str, str]:
        """This process's meta (module docstring), and its place among the log's readers."""
        kept: dict[str, str] = {}
        if self._local_path is not None and os.path.exists(self._local_path):
            try:
                with open(self._local_path, encoding="utf-8") as f:
                    kept = {str(k): str(v) for k, v in json.load(f).items()}
            except (OSError, ValueError):
                kept = {}  # a torn file: start afresh, the ANN files are rebuilt from the origin
        saved = int(kept.get(LOCAL_EPOCHS[0], 0))
        with self._w.transaction():
            # Checked and registered under the lock pruning holds, so no process prunes past
            # ``saved`` between this check of how far the log was pruned and the registration.
            self._w.execute("SELECT pg_advisory_xact_lock(%s)", (locks.key("changes"),))
            now = self.current_epoch()
            if not kept or int(super().meta_get(PRUNED) or 0) > saved:
                if local_dir is not None:
                    shutil.rmtree(os.path.join(local_dir, "ann"), ignore_errors=True)
                kept = {key: str(now) for key in LOCAL_EPOCHS}
                saved = now
            self._w.execute(
                f"INSERT INTO {self._s}.change_readers(reader, upto, seen_at, snapshot_lock) VALUES (%s, %s, %s, true)",
                (self.instance, saved, time.time()),
            )
        self._local_meta = kept
        self._write_local()
        return kept

    def _write_local(self) -> None:
        if self._local_path is not None:
            tmp = self._local_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._local_meta, f)
            os.replace(tmp, self._local_path)

    def meta_get(self, key: str) -> str | None:
        if key.startswith(LOCAL_FILES):
            return "1"
        if key.startswith(LOCAL_META):
            return self._local_meta.get(key)
        return super().meta_get(key)

    def hash_secret(self) -> bytes:
        """The store's hash secret, from the KEK file, never the database
        (:class:`~efface.origin.capabilities.KeepsSecret`, :mod:`.hashsecret`)."""
        return self._keys.hash_secret()

    def meta_set(self, key: str, value: str) -> None:
        if key == SECRET_META:
            raise ValueError("a PostgreSQL store's hash secret lives in the KEK file, never in the database")
        if key.startswith(LOCAL_META):
            with self._local_mu:
                self._local_meta[key] = value
                self._write_local()
            return
        with self._maintenance() as conn:
            conn.execute(
                f"INSERT INTO {self._s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (key, value),
            )

    def prune_changes(self, upto: int) -> None:
        """This process has replayed the change log up to ``upto``: note it among the log's
        readers, and drop the log up to the oldest reader seen lately (module docstring).
        How far it was pruned is kept in meta, so a process whose word index or ANN files
        are older rebuilds them instead of missing changes."""
        s, now = self._s, time.time()
        upto = min(upto, self.text.applied())  # this process's word index replays the log too
        with self._maintenance() as conn:
            conn.execute(
                f"INSERT INTO {s}.change_readers(reader, upto, seen_at, snapshot_lock) VALUES (%s, %s, %s, true)"
                " ON CONFLICT (reader) DO UPDATE SET upto = excluded.upto, seen_at = excluded.seen_at,"
                " snapshot_lock = true",
                (self.instance, upto, now),
            )
            # One process prunes at a time; one that finds another pruning has said where it
            # is (above), which is all it owes: the other prunes for both.
            row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (locks.key("changes"),)).fetchone()
            if row is None or not row[0]:
                return
            conn.execute(f"DELETE FROM {s}.change_readers WHERE seen_at < %s", (now - READER_TTL_S,))
            row = conn.execute(f"SELECT min(upto) FROM {s}.change_readers").fetchone()
            floor = min(upto, int(row[0])) if row is not None and row[0] is not None else upto
            conn.execute(f"DELETE FROM {s}.changes WHERE epoch <= %s", (floor,))
            conn.execute(
                f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE"
                f" SET v = greatest({s}.meta.v::bigint, excluded.v::bigint)::text",
                (PRUNED, str(floor)),
            )

    def shared_lock(self, name: str, wait: bool = False) -> contextlib.AbstractContextManager[bool]:
        """Hold the advisory lock ``name`` (:data:`.locks.LOCKS`) for the block, across every
        process of the store; yields whether it is held (without ``wait``: False at once when
        another process has it). Let go at the block's end, or when this process dies."""
        if self._closed:
            raise RuntimeError("the origin is closed")
        return locks.hold(self._pool, name, wait)

    def record_verification(
        self, handle: str, body: dict, receipt_level: str, discard: bool, now: float, verified: dict | None = None
    ) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level and (``discard``)
        drop the fingerprints and word hashes, in one transaction; no new epoch."""
        with self._maintenance() as conn:
            tx = PostgresTx(self, conn, 0)
            seq, digest = tx.append_ledger("verify", handle, body, now)
            conn.execute(
                f"UPDATE {self._s}.receipts SET body = jsonb_set(body, '{{level}}', to_jsonb(%s::text))"
                " WHERE handle = %s",
                (receipt_level, handle),
            )
            if verified is not None:
                conn.execute(
                    f"UPDATE {self._s}.receipts SET body = jsonb_set(body, '{{verified}}', %s::jsonb)"
                    " WHERE handle = %s",
                    (json.dumps(verified, sort_keys=True), handle),
                )
            if discard:
                conn.execute(
                    f"UPDATE {self._s}.evidence SET fingerprints = NULL, tokens = %s WHERE handle = %s", (b"[]", handle)
                )
                conn.execute(f"DELETE FROM {self._s}.path_evidence WHERE handle = %s AND path = 'fts'", (handle,))
        return seq, digest

    def erased_epoch(self) -> int:
        """The newest epoch the last finished maintenance covered (:mod:`.maintenance`; its
        WAL pass included), as the database records it for every server. That it ran is not
        a byte proof: :meth:`copy_checks` says, per copy, what was checked."""
        return self.erased_epoch_for(None)

    def erased_epoch_for(self, epoch: int | None) -> int:
        """:meth:`erased_epoch` as the erasure at ``epoch`` sees it: below ``epoch`` while a
        verification found that erasure still in the WAL and a new pass is owed to it alone."""
        with self._reading() as conn:
            return walpass.erased(conn, self._s, maintenance.EPOCH, epoch)

    def owes(self) -> bool:
        """Whether a pass over the WAL is owed that the compactor should run (:func:`.walpass.owes`)."""
        with self._reading() as conn:
            return walpass.owes(conn, self._s)

    def maintain(self) -> bool:
        """One maintenance run (:class:`~efface.origin.base.Maintained`); False when another
        server runs it now, it failed, or its WAL pass goes on (the compactor's next round
        goes on with it)."""
        if self._closed:
            return False
        target = self.current_epoch()
        try:
            with self._pool.connection() as conn:
                report = self._maint.run(conn)
        except Exception as e:  # a lock timeout, a lost connection: the next round retries
            log.warning("maintenance on PostgreSQL failed (%s); the next compactor round retries", type(e).__name__)
            return False
        return report is not None and self.erased_epoch() >= target

    def erased_checks(self, epoch: int) -> list[Check]:
        """``origin.maintenance``: the maintenance that removes the bytes ran past the
        erasure (what it could not do, the copies' checks say)."""
        t0 = time.time()
        with self._reading() as conn:
            done, noted = maintenance.maintained(conn, self._s), maintenance.note(conn, self._s)
        lacking = "; ".join(x for x in noted.get("lacking", []) if isinstance(x, str))
        detail = f"maintenance covered epoch {done} (erasure epoch {epoch})" + (
            f"; it could not: {lacking}" if lacking else ""
        )
        return [
            Check(
                name="origin.maintenance",
                rung="erased",
                outcome="pass" if done >= epoch else "fail",
                detail=detail,
                at=round(t0, 6),
                duration_s=round(time.time() - t0, 6),
            )
        ]

    def copy_checks(
        self, epoch: int, items: Mapping[str, int] | None, scan: ScanFn | None
    ) -> list[tuple[str, CopyState, Check]]:
        """Per copy on the server (the primary's files and WAL, each replica), its state for
        the erasure at ``epoch`` (:func:`.maintenance.copy_checks`)."""
        found: list[str] = []  # the WAL segments a scan found the erasure in
        with self._reading() as conn:
            out = maintenance.copy_checks(conn, self._s, self._maint.data_dir, epoch, items, scan, found)
        wal = [
            i for i, (name, state, _) in enumerate(out) if name == "postgres.primary.wal" and state.state == "present"
        ]
        if wal and not self._closed:
            # the maintenance covered this erasure, yet the WAL still holds it: a new pass owed to
            # the compactor, unless no pass can help now (walpass.owe says why)
            with self._pool.connection() as conn:
                why = walpass.owe(conn, self._s, self._maint.data_dir, epoch, found)
            name, state, check = out[wal[0]]
            state = CopyState(state.state, f"{state.reason}; {why}")
            out[wal[0]] = (name, state, dataclasses.replace(check, detail=f"{state.state}: {state.reason}"))
        return out

    def copy_names(self) -> list[str]:
        """The copies on the server now (:func:`.maintenance.copy_names`)."""
        with self._reading() as conn:
            return maintenance.copy_names(conn)

    @contextlib.contextmanager
    def verifying(self, handle: str) -> Iterator[None]:
        """One verification of ``handle`` at a time across servers (an advisory lock on a
        connection of its own, held for the block)."""
        with self._pool.connection() as conn, maintenance.verifying(conn, handle):
            yield

    def close(self) -> None:
        with self.write_lock:
            if self._closed:
                return
            self.text.clear()
            self._sample.clear()
            self._sealer.forget_all()
            with contextlib.suppress(Exception):  # a reader that is gone holds the log back no more
                self._w.execute(f"DELETE FROM {self._s}.change_readers WHERE reader = %s", (self.instance,))
            self._closed = True
            try:
                self._pool.close()
            finally:
                self._w.close()
