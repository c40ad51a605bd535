"""What every build of ``records``' HNSW graph needs, shared by the maintenance's rewrites
(:mod:`.maintenance`, :mod:`.online`) and schema migration 10 (:mod:`.schema`): enough
``maintenance_work_mem`` to build the graph in memory (:func:`index_memory`), and a second,
serial try when a parallel build finds no dynamic shared memory (:func:`parallel_or_serial`);
both, and a line in the log, for the graph's rebuild in a migration (:func:`rebuild_graph`),
and the lock its swap takes without stopping reads while it waits (:func:`lock_unqueued`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import StoreUnwritable

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("efface")

SWAP_PATIENCE = 30.0
"""Seconds :func:`lock_unqueued` tries for its lock only without queueing."""
SWAP_QUEUED = 1.0
"""Past :data:`SWAP_PATIENCE`, the most seconds one of :func:`lock_unqueued`'s tries waits in the queue
(every read of the tables queued behind it waits as long)."""
SWAP_QUEUED_EVERY = 5.0
"""Past :data:`SWAP_PATIENCE`, seconds between two of :func:`lock_unqueued`'s queued tries (tries
without queueing in between)."""
SWAP_SAY = 60.0
"""Seconds between two lines in the log while :func:`lock_unqueued` waits."""
SWAP_LIMIT = 600.0
"""Seconds after which :func:`lock_unqueued` gives up (:class:`efface.errors.StoreUnwritable`)."""
GRAPH_MEM_MAX = 2 * 2**30
"""The most ``maintenance_work_mem`` efface raises its own session to (bytes), so that a rebuild
of ``records``' HNSW graph is built in memory (:func:`index_memory`). Past it, set
``maintenance_work_mem`` for efface's role: efface never lowers the server's setting."""


def index_memory(conn: psycopg.Connection, schema: str, *, local: bool = False) -> int:
    """Raise this session's ``maintenance_work_mem`` to what the rebuild of ``records``' HNSW
    index needs to build its graph in memory: pgvector's graph takes about 1.1 times the
    index's size on disk (measured: 64MB held 29,802 of 30,000 384-dimension vectors, whose
    index was 58 MB); past the setting, pgvector goes on inserting into the index on disk,
    tuple by tuple, many times slower (``bench/pg_maintenance.py``). 1.25 times the index plus
    64MB, at most :data:`GRAPH_MEM_MAX`, never below the server's own setting. Returns the
    setting in bytes. ``local``: for the current transaction only (``SET LOCAL``); otherwise
    the caller RESETs it."""
    row = conn.execute(
        "SELECT pg_size_bytes(current_setting('maintenance_work_mem')), coalesce(pg_relation_size(to_regclass(%s)), 0)",
        (f"{schema}.records_embedding",),
    ).fetchone()
    have, index = (int(row[0]), int(row[1])) if row else (0, 0)
    want = min(GRAPH_MEM_MAX, index * 5 // 4 + 64 * 2**20)
    if want > have:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, %s)", (f"{want // 1024}kB", local))
        return want
    return have


def parallel_or_serial(conn: psycopg.Connection, build: Callable[[], None]) -> None:
    """``build()`` (an index build in a transaction, or in a savepoint of the caller's); if it
    fails for want of memory, once more without parallel workers. A parallel index build keeps
    its graph in dynamic shared memory, which a container's small ``/dev/shm`` (Docker's 64MB)
    cannot hold ("could not resize shared memory segment", a disk-full error): the second try
    builds it in this session's own memory. The session's setting is RESET after."""
    import psycopg

    serial = False
    try:
        while True:
            try:
                build()
                return
            except (psycopg.errors.DiskFull, psycopg.errors.OutOfMemory):
                if serial:
                    raise
                serial = True
                conn.execute("SET max_parallel_maintenance_workers = 0")
    finally:
        if serial:
            conn.execute("RESET max_parallel_maintenance_workers")


def rebuild_graph(conn: psycopg.Connection, s: str, ddl: str) -> None:
    """A schema migration's build of ``records``' HNSW graph (``ddl``), with the maintenance's
    safeguards: the memory to build it in (:func:`index_memory`, for this
    transaction only), and a serial build in a savepoint when a parallel one finds no shared
    memory (:func:`parallel_or_serial`). Says in the log how big it is (sizes only)."""
    mem = index_memory(conn, s, local=True)
    # the planner's estimate (autovacuum's), counted where small or never taken
    row = conn.execute(
        f"SELECT CASE WHEN c.reltuples < 100000 THEN (SELECT count(*) FROM {s}.records) ELSE c.reltuples::bigint END,"
        " pg_table_size(c.oid), coalesce(pg_relation_size(to_regclass(%s)), 0)"
        " FROM pg_class c WHERE c.oid = %s::regclass",
        (f"{s}.records_embedding", f"{s}.records"),
    ).fetchone()
    rows, table, index = row if row else (0, 0, 0)
    log.info(
        "schema migration: rebuilding the HNSW graph of about %d records (table %.1f MB, graph %.1f MB, "
        "maintenance_work_mem %d MB); writes to the store wait for it, reads do not",
        rows,
        table / 2**20,
        index / 2**20,
        mem // 2**20,
    )

    def build() -> None:
        with conn.transaction():  # a savepoint: a failed parallel build leaves the migration whole
            conn.execute(ddl)

    parallel_or_serial(conn, build)


def lock_unqueued(conn: psycopg.Connection, lock: str) -> None:
    """``lock`` (a ``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`` in the caller's transaction), tried
    with ``NOWAIT`` in a savepoint until it is granted. A request waiting in a table's lock queue
    stops every read queued behind it, for as long as the transactions holding the table run
    (an idle-in-transaction session: for ever); and a transaction holding one of the tables and
    asking for the other deadlocks with it. Tried without queueing, it does neither: a failed
    try takes nothing (its savepoint lets go of what it took). Past :data:`SWAP_PATIENCE`
    seconds (a stream of overlapping reads leaves no moment free), one try in every
    :data:`SWAP_QUEUED_EVERY` seconds waits in the queue for at most :data:`SWAP_QUEUED`
    seconds. Every :data:`SWAP_SAY` seconds the log says what holds the tables (counts and
    states of sessions, no names); past :data:`SWAP_LIMIT` seconds,
    :class:`efface.errors.StoreUnwritable` saying the same (the caller's transaction is
    rolled back whole)."""
    import psycopg

    start = time.monotonic()
    said = queued_at = start
    while True:
        now = time.monotonic()
        queued = now - start >= SWAP_PATIENCE and now - queued_at >= SWAP_QUEUED_EVERY
        try:
            with conn.transaction():
                if queued:
                    queued_at = now
                    timeout = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
                    conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{int(SWAP_QUEUED * 1000)}ms",))
                    conn.execute(lock)
                    conn.execute("SELECT set_config('lock_timeout', %s, true)", (timeout[0] if timeout else "0",))
                else:
                    conn.execute(f"{lock} NOWAIT")
            return
        except psycopg.errors.LockNotAvailable:
            pass
        now = time.monotonic()
        if now - start >= SWAP_LIMIT:
            raise StoreUnwritable(
                f"efface's schema migration waited {now - start:.0f} s for the tables it rebuilds indexes of: "
                f"{_holders(conn, lock)}. End those transactions (pg_stat_activity shows them; "
                "pg_terminate_backend ends one) and open the store again"
            )
        if now - said >= SWAP_SAY:
            said = now
            log.warning(
                "schema migration: waiting %.0f s so far for the tables it rebuilds indexes of (reads go on, "
                "writes wait): %s",
                now - start,
                _holders(conn, lock),
            )
        time.sleep(0.02 if now - start < SWAP_PATIENCE else 0.1)


def _holders(conn: psycopg.Connection, lock: str) -> str:
    """What holds the tables of ``lock`` (a ``LOCK TABLE a, b IN ... MODE``): how many other
    sessions, in which states, the oldest transaction's age. No names, users or queries."""
    tables = lock.removeprefix("LOCK TABLE ").split(" IN ")[0].split(", ")
    rows = conn.execute(
        "SELECT coalesce(a.state, a.backend_type, 'unknown'), count(DISTINCT l.pid),"
        " coalesce(max(extract(epoch FROM now() - a.xact_start)), 0)"
        " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.granted AND l.pid <> pg_backend_pid() AND l.locktype = 'relation'"
        " AND l.relation = ANY (SELECT to_regclass(t)::oid FROM unnest(%s::text[]) t)"
        " GROUP BY 1 ORDER BY 2 DESC",
        (tables,),
    ).fetchall()
    if not rows:
        return "no session holds them now (each try met one that has since ended)"
    return "held by " + ", ".join(f"{n} session(s) {state} (oldest transaction {age:.0f} s)" for state, n, age in rows)
