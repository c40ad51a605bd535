"""The rewrite of ``records`` and ``claims`` without the long lock (issue #34; docs/postgres.md
"The maintenance at scale").

``VACUUM FULL records`` holds an ``ACCESS EXCLUSIVE`` lock while it copies the heap and
rebuilds every index, the pgvector HNSW graph among them (20-40 s at 100k records on a
2-core host): every server's recalls, reads and writes wait for it. :func:`rewrite` gets the
same result, new files holding only the live rows, with the lock held for a moment only, in
the manner of pg_repack but in plain SQL, for each table of :data:`TABLES`:

1. a trigger on the table logs the id of every row written, changed or deleted from now on
   into its log (creating it waits for the writes in flight, and new writes wait for it, in
   short attempts: reads go on);
2. ``INSERT INTO <copy> SELECT <every column> FROM <table>``: one statement, one MVCC
   snapshot taken after the trigger is in place, so every change it does not see is logged;
   reads and writes go on. The copy is made ``LIKE`` the table (:data:`LIKE`): its columns,
   defaults, generated columns, constraints, storage, from the catalog, so a column a
   migration adds is never dropped by the rewrite;
3. the table's indexes, from the catalog, built on the copy (the HNSW graph in memory,
   :func:`.indexbuild.index_memory`); reads and writes go on;
4. rounds of catch-up: the logged ids are consumed (``DELETE ... RETURNING``: only what is
   committed) and each one's row re-read from the table and written over the copy's (absent
   there when it is absent in the table);
5. a wait, holding no lock, until no session of the database holds a snapshot older than
   the last catch-up (for readers other than efface's, below);
6. under ``ACCESS EXCLUSIVE`` locks on the table and the tables its foreign keys join
   (``records`` and ``claims`` both, for either), taken in short attempts: the table checked
   unchanged since the copy (else :class:`Reshaped`), the last catch-up, the old table
   dropped, the copy renamed, its constraints made from its indexes, its identity resumed
   where the old one stood, the foreign keys added back (``NOT VALID``, validated after,
   without the lock), its grants; one transaction, so a crash anywhere in it leaves the old
   table as it was;
7. the foreign keys validated, the trigger's function and log dropped (the copy was analysed
   before the swap: its statistics stay with it).

**What a snapshot sees of the new table.** Unlike ``VACUUM FULL``, which keeps each row's
transaction ids, the copy's rows are new rows, and the rows changed between the last
catch-up and the swap (the note's ``late_rows``) are written by the swap's own transaction.
A ``REPEATABLE READ`` snapshot taken before the swap committed that read the new table would
miss them (and the copy's, had it been taken before the copy committed): a record
acknowledged before the snapshot began, absent from it. PostgreSQL takes a statement's
snapshot before its parse locks the tables it reads, so a snapshot whose first read of the
table waits for the swap's lock would read the new table under the old snapshot. So every
snapshot of efface takes ``ACCESS SHARE`` locks on :data:`TABLES` before its snapshot
(:func:`reader_lock`, :meth:`.origin.PostgresOrigin._begin`, in the same round trip): the
swap commits either before the snapshot is taken (which then sees it all) or after it ended
(it read the old table, whole). Statements outside a snapshot (autocommit, ``READ
COMMITTED``) take their snapshot after their locks, so they see the swap or the old table.
Step 5 remains for other readers (an operator's session, a replica's reported snapshots): a
transaction older than the copy that stays open past :data:`PATIENCE` makes the run give up
(:class:`Stalled`) and the maintenance rewrite the table with ``VACUUM FULL`` instead; such a
reader begun after step 5 and before the swap, that reads the table only after it, still
misses the late rows (efface's own never do).

An erasure committed during steps 2-5 is applied to the copy by the catch-up: its record is
absent from the new table, but the copy's pages hold the deleted row until the next
maintenance, whose epoch covers that erasure (this run covers only the epoch it started at).

A crash (the efface process killed, the connection lost) at any step leaves the old table
intact and in use; what the run made (the copy, the trigger, its log) is dropped by the next
run before anything else (:func:`clean`): the copy's files may hold rows erased since, and the
next run's checkpoint unlinks them. Only one server runs it at a time (the maintenance's
advisory lock).

:func:`unsupported` says why a database's table cannot be rewritten so (a publication, row
security, inheritance, a trigger of the operator's, a view on it): the maintenance then uses
``VACUUM FULL`` as before.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .indexbuild import parallel_or_serial

if TYPE_CHECKING:
    import psycopg

TABLES = ("records", "claims")
"""The tables rewritten so, in this order (the others, small, with ``VACUUM FULL``): each has
an ``id`` key (its identity). A lock on several takes them in this order."""
SUFFIX = "_online"
"""Added to the names of the copy's indexes until the swap (and to the table's, the copy's)."""


def names(table: str) -> tuple[str, str, str]:
    """The copy of ``table`` while it is built, the log of the ids of its rows changed since
    the trigger was made, and the trigger (and its function)."""
    return f"{table}{SUFFIX}", f"{table}{SUFFIX}_log", f"{table}{SUFFIX}_note"


COPY, LOG, TRIGGER = names("records")
FUNC = TRIGGER
ATTEMPT = "250ms"
"""How long one attempt at a lock that stops other servers waits (queued reads wait behind it)."""
PATIENCE = 30.0
"""Seconds of attempts before the run gives up (the compactor's next round tries again)."""
ROUNDS = 8
"""Catch-up rounds before the swap; each takes what was committed during the one before."""


LIKE = "INCLUDING ALL EXCLUDING INDEXES EXCLUDING IDENTITY"
"""What the copy takes of ``records`` at its creation: every column with its defaults,
generation, constraints, storage, compression, statistics and comments; its indexes are built
after the copy (faster than kept up row by row), its identity is resumed at the swap."""


class Stalled(Exception):
    """A transaction older than the copy stayed open past :data:`PATIENCE`: the run gives the
    online rewrite up (the maintenance rewrites ``records`` with ``VACUUM FULL`` instead)."""


class Reshaped(Stalled):
    """``records`` changed (a column, an index) while it was copied: the run gives the online
    rewrite up, as for :class:`Stalled`."""


def reader_lock(schema: str) -> str:
    """The statement every snapshot of efface on PostgreSQL begins with, after ``BEGIN`` and
    before the statement that takes its snapshot (:meth:`.origin.PostgresOrigin._begin`).

    A snapshot taken before the swap committed must never read the new table: it would miss
    the rows the swap's own transaction wrote (and every row, had the copy not committed
    before it). PostgreSQL takes a statement's snapshot before its parse acquires the table's
    lock, so a snapshot's first read of ``records`` alone does not prevent it: its lock wait
    can end after the swap. Locked first (``ACCESS SHARE``, taken without a snapshot), the
    table the snapshot reads is the one it was taken on: either the swap committed before
    (the snapshot sees all of it), or it waits until the snapshot ends (the old table is
    read, as it was). ``ACCESS SHARE`` conflicts only with ``ACCESS EXCLUSIVE`` (the swap,
    ``VACUUM FULL``, DDL), which the snapshot's first read of ``records`` would wait for
    anyway; a snapshot that reads no ``records`` row holds the swap off for its life too
    (a few statements). Likewise ``claims``, rewritten so too (:data:`TABLES`, in order)."""
    return f"LOCK TABLE {', '.join(f'{schema}.{t}' for t in TABLES)} IN ACCESS SHARE MODE"


def unsupported(conn: psycopg.Connection, schema: str, table: str = "records") -> str | None:
    """Why ``table`` cannot be rewritten online here, or None."""
    row = conn.execute(
        "SELECT c.relrowsecurity, c.relhassubclass OR EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid),"
        " EXISTS (SELECT 1 FROM pg_publication_rel WHERE prrelid = c.oid)"
        "  OR EXISTS (SELECT 1 FROM pg_publication WHERE puballtables),"
        " EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal AND t.tgname <> %s),"
        " EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass"
        "   AND d.objid = r.oid WHERE d.refobjid = c.oid AND r.ev_class <> c.oid)"
        " FROM pg_class c WHERE c.oid = to_regclass(%s)",
        (names(table)[2], f"{schema}.{table}"),
    ).fetchone()
    if row is None:
        return f"no {table} table"
    older = conn.execute(f"SELECT count(*) FROM {schema}.change_readers WHERE NOT snapshot_lock").fetchone()
    if older is not None and older[0]:
        # its snapshots do not take the reader lock: one taken before the swap commits and
        # reading the table after it would see the copy under an older snapshot (module docstring)
        return "a process of an earlier efface version uses the store (its snapshots do not wait for the swap)"
    rel = f"{schema}.{table}"
    if any(_head(name, rel) not in ddl for name, ddl, _c, _t in _indexes(conn, rel)):
        return f"an index of {table} has a definition efface cannot reproduce (a name that needs quoting)"
    for flag, why in zip(
        row,
        (
            f"row-level security is enabled on {table}",
            f"{table} has inheritance children or parents",
            f"{table} is in a publication",
            f"{table} has a trigger efface did not make",
            f"a view or rule depends on {table}",
        ),
        strict=True,
    ):
        if flag:
            return why
    return None


def clean(conn: psycopg.Connection, schema: str) -> bool:
    """Drop what an earlier run left (it crashed), for each of :data:`TABLES`: the copy, the
    trigger, its function, its log. True if anything was there. The trigger's removal waits
    for the writes in flight (short attempts)."""
    s, found = schema, False
    for table in TABLES:
        copy, log, trigger = names(table)
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL,"
            " EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s),"
            " to_regprocedure(%s) IS NOT NULL",
            (f"{s}.{copy}", f"{s}.{log}", f"{s}.{table}", trigger, f"{s}.{trigger}()"),
        ).fetchone()
        assert row is not None
        if not any(row):
            continue
        found = True
        if row[2]:
            _locking(conn, lambda t=table, g=trigger: conn.execute(f"DROP TRIGGER IF EXISTS {g} ON {s}.{t}"))
        with conn.transaction():
            conn.execute(f"DROP TABLE IF EXISTS {s}.{copy}")
            conn.execute(f"DROP TABLE IF EXISTS {s}.{log}")
            conn.execute(f"DROP FUNCTION IF EXISTS {s}.{trigger}()")
    return found


def rewrite(
    conn: psycopg.Connection, other: psycopg.Connection, schema: str, table: str = "records"
) -> dict[str, float | int]:
    """Rewrite ``{schema}.{table}`` (one of :data:`TABLES`) online (module docstring); ``conn``
    in autocommit, holding the maintenance's lock; ``other`` a second autocommit connection to
    the same database (the last catch-up commits on it, for the wait for older snapshots).
    Returns the seconds of each step and the rows caught up."""
    s, rel = schema, f"{schema}.{table}"
    copy, log, trigger = names(table)
    took: dict[str, float | int] = {}
    t = time.monotonic()
    clean(conn, s)
    with conn.transaction():
        conn.execute(f"CREATE TABLE {s}.{log}(seq bigint GENERATED ALWAYS AS IDENTITY, id bigint NOT NULL)")
        conn.execute(
            f"CREATE OR REPLACE FUNCTION {s}.{trigger}() RETURNS trigger LANGUAGE plpgsql"
            " SECURITY DEFINER SET search_path = pg_catalog AS $$ BEGIN"
            f" INSERT INTO {s}.{log}(id) VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);"
            " RETURN NULL; END $$"
        )
    _locking(
        conn,
        lambda: conn.execute(
            f"CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {rel}"
            f" FOR EACH ROW EXECUTE FUNCTION {s}.{trigger}()"
        ),
    )
    took["trigger_s"] = _lap(t)
    t = time.monotonic()
    # after the trigger's commit: every change this snapshot does not see is logged
    with conn.transaction():
        # every column, from the catalog (a column a migration adds is copied too); indexes
        # after the copy, the identity at the swap
        conn.execute(f"CREATE TABLE {s}.{copy} (LIKE {rel} {LIKE})")
        for col, target in conn.execute(
            "SELECT attname, attstattarget FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
            " AND NOT attisdropped AND attstattarget IS NOT NULL AND attstattarget >= 0",
            (rel,),
        ).fetchall():
            conn.execute(f'ALTER TABLE {s}.{copy} ALTER COLUMN "{col}" SET STATISTICS {int(target)}')
        opts = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)", (rel,)).fetchone()
        if opts and opts[0]:
            conn.execute(f"ALTER TABLE {s}.{copy} SET ({', '.join(opts[0])})")
    with conn.transaction():
        cols = _copied(conn, s, table)
        conn.execute(f"INSERT INTO {s}.{copy} ({cols}) SELECT {cols} FROM {rel}")
    took["copy_s"] = _lap(t)
    t = time.monotonic()
    shape = _shape(conn, rel)
    indexes = _indexes(conn, rel)
    for name, ddl, _con, _type in indexes:
        head = _head(name, rel)
        if head not in ddl:
            raise RuntimeError(f"an index of {table} has a definition efface cannot reproduce")
        _build(conn, ddl.replace(head, f"INDEX {name}{SUFFIX} ON {s}.{copy} ", 1), _index_statistics(conn, s, name))
    took["indexes_s"] = _lap(t)
    t = time.monotonic()
    caught = 0
    for _ in range(ROUNDS):
        n = _catch_up(conn, s, table=table)
        caught += n
        if n < 100:
            break
    took["catch_up_s"] = _lap(t)
    t = time.monotonic()
    # the copy's statistics before the swap (they stay with it, renamed): a statement planned
    # on the new table meanwhile has them (without, recall's plans were slower: 1.3 s at 100k)
    conn.execute(f"ANALYZE {s}.{copy}")
    took["analyze_s"] = _lap(t)
    t = time.monotonic()
    # foreign keys naming the table (dropped, added back to the copy) and the table's own
    # (dropped with it, added to the copy), all NOT VALID in the swap, validated after it
    refs = conn.execute(
        "SELECT c.conname, c.conrelid::regclass::text, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " WHERE c.contype = 'f' AND c.confrelid = to_regclass(%s) AND c.conrelid <> c.confrelid",
        (rel,),
    ).fetchall()
    outs = conn.execute(
        "SELECT c.conname, c.confrelid::regclass::text, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " WHERE c.contype = 'f' AND c.conrelid = to_regclass(%s) AND c.conrelid <> c.confrelid",
        (rel,),
    ).fetchall()
    grants = conn.execute(
        "SELECT a.grantee::regrole::text, a.privilege_type, a.is_grantable FROM pg_class c,"
        " aclexplode(c.relacl) a WHERE c.oid = to_regclass(%s) AND a.grantee <> c.relowner AND a.grantee <> 0",
        (rel,),
    ).fetchall()
    swapped: dict[str, int] = {}
    order = [f"{s}.{x}" for x in TABLES]
    locked = ", ".join(
        sorted(
            {rel, *(r[1] for r in refs), *(r[1] for r in outs)},
            key=lambda x: (x not in order, order.index(x) if x in order else 0, x),
        )
    )

    # no snapshot older than the copy's last change may read the new table (it would see none
    # of the copy's rows): wait for them to end, holding nothing; a long transaction makes
    # the run give up (Stalled: the maintenance uses VACUUM FULL)
    last: list[int] = []
    caught += _catch_up(other, s, last, table=table)
    _no_older_snapshots(conn, other, last[0], PATIENCE, Stalled)

    def swap() -> None:
        conn.execute(f"LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE")
        # a migration run meanwhile (a new server's open) may have changed the table: the copy
        # would lose what it added, so the run gives up (VACUUM FULL keeps every column)
        if _shape(conn, rel) != shape or _indexes(conn, rel) != indexes:
            raise Reshaped(f"{table} changed shape during the rewrite (a migration ran)")
        if _shape(conn, f"{s}.{copy}") != shape:
            raise Reshaped(f"the copy's columns differ from {table}'s")
        # what was committed since the last catch-up: these rows' new versions are this
        # transaction's, unseen by a snapshot taken before it commits (module docstring)
        swapped["late"] = _catch_up(conn, s, table=table)
        got = conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (rel,)).fetchone()
        seq = str(got[0]).split(".")[-1] if got and got[0] else None
        state = conn.execute(f"SELECT last_value, is_called FROM {s}.{seq}").fetchone() if seq else None
        for con, other_table, _ in refs:
            conn.execute(f'ALTER TABLE {other_table} DROP CONSTRAINT "{con}"')
        conn.execute(f"DROP TABLE {rel}")  # RESTRICT: anything else depending on it stops the swap
        conn.execute(f"ALTER TABLE {s}.{copy} RENAME TO {table}")
        for name, _ddl, con, kind in indexes:
            if con is not None and kind in ("p", "u"):
                what = "PRIMARY KEY" if kind == "p" else "UNIQUE"
                conn.execute(f'ALTER TABLE {rel} ADD CONSTRAINT "{con}" {what} USING INDEX {name}{SUFFIX}')
            else:
                conn.execute(f"ALTER INDEX {s}.{name}{SUFFIX} RENAME TO {name}")
        if seq is not None and state is not None:
            conn.execute(
                f"ALTER TABLE {rel} ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME {s}.{seq})"
            )
            conn.execute("SELECT setval(%s, %s, %s)", (f"{s}.{seq}", int(state[0]), bool(state[1])))
        for con, other_table, ddl in refs:
            conn.execute(f'ALTER TABLE {other_table} ADD CONSTRAINT "{con}" {ddl} NOT VALID')
        for con, _target, ddl in outs:
            conn.execute(f'ALTER TABLE {rel} ADD CONSTRAINT "{con}" {ddl} NOT VALID')
        for grantee, privilege, grantable in grants:
            conn.execute(f"GRANT {privilege} ON {rel} TO {grantee}" + (" WITH GRANT OPTION" if grantable else ""))

    _locking(conn, swap)
    took["swap_s"] = _lap(t)
    took["caught_up"] = caught + swapped.get("late", 0)
    took["late_rows"] = swapped.get("late", 0)
    t = time.monotonic()
    for con, other_table, _ in refs:
        conn.execute(f'ALTER TABLE {other_table} VALIDATE CONSTRAINT "{con}"')
    for con, _target, _ddl in outs:
        conn.execute(f'ALTER TABLE {rel} VALIDATE CONSTRAINT "{con}"')
    with conn.transaction():
        conn.execute(f"DROP TABLE IF EXISTS {s}.{log}")
        conn.execute(f"DROP FUNCTION IF EXISTS {s}.{trigger}()")
    took["after_s"] = _lap(t)
    return took


def _copied(conn: psycopg.Connection, s: str, table: str) -> str:
    """The columns the copy is given values for, from the catalog: every one it took from
    ``table`` but the generated (``LIKE ... INCLUDING GENERATED`` computes them). A column
    ``table`` gained since is not among them: the swap sees it and gives up."""
    rows = conn.execute(
        "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        (f"{s}.{names(table)[0]}",),
    ).fetchall()
    return ", ".join(r[0] for r in rows)


def _shape(conn: psycopg.Connection, table: str) -> list[tuple[object, ...]]:
    """``table``'s columns as the swap must keep them (name, type, collation, nullability,
    default, generation, storage, compression; not the identity, which the copy is given at
    the swap)."""
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attcollation, a.attnotnull,"
            " pg_get_expr(d.adbin, d.adrelid), a.attgenerated::text, a.attstorage::text, a.attcompression::text"
            " FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
            " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (table,),
        ).fetchall()
    ]


def _indexes(conn: psycopg.Connection, rel: str) -> list[tuple[str, str, str | None, str | None]]:
    """Every index of ``rel`` (name, definition, the constraint it backs and its kind), from
    the catalog: the copy is given each."""
    return [
        (str(r[0]), str(r[1]), r[2], r[3])
        for r in conn.execute(
            "SELECT i.relname, pg_get_indexdef(x.indexrelid), c.conname, c.contype::text FROM pg_index x"
            " JOIN pg_class i ON i.oid = x.indexrelid LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid"
            " AND c.conrelid = x.indrelid WHERE x.indrelid = to_regclass(%s) ORDER BY x.indisprimary DESC, i.relname",
            (rel,),
        ).fetchall()
    ]


def _head(name: str, rel: str) -> str:
    """What ``pg_get_indexdef`` writes before an index's method, for an index this module can
    give the copy (a name that needs quoting is written otherwise: :func:`unsupported`)."""
    return f"INDEX {name} ON {rel} "


def _index_statistics(conn: psycopg.Connection, s: str, name: str) -> list[str]:
    """The statements giving index ``name``'s copy its columns' statistics targets: an index
    kept out of ``ANALYZE`` (``SET STATISTICS 0``: the vectors' digests, migration 8) must stay
    out of ``pg_statistic``, a catalog efface cannot rewrite."""
    return [
        f"ALTER INDEX {s}.{name}{SUFFIX} ALTER COLUMN {int(attnum)} SET STATISTICS {int(target)}"
        for attnum, target in conn.execute(
            "SELECT attnum, attstattarget FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
            " AND attstattarget IS NOT NULL AND attstattarget >= 0",
            (f"{s}.{name}",),
        ).fetchall()
    ]


def _build(conn: psycopg.Connection, ddl: str, then: list[str]) -> None:
    """One index of the copy and ``then`` (its statistics targets) in one transaction, so no
    ``ANALYZE`` (autovacuum's) samples it in between; a parallel build that finds no dynamic
    shared memory (a container's small ``/dev/shm``) is built again in this session's memory,
    (:func:`.indexbuild.parallel_or_serial`), as :func:`.maintenance._rewrite` is."""

    def build() -> None:
        with conn.transaction():
            conn.execute(ddl)
            for statement in then:
                conn.execute(statement)

    parallel_or_serial(conn, build)


def _catch_up(conn: psycopg.Connection, s: str, xid: list[int] | None = None, *, table: str = "records") -> int:
    """Consume the committed log entries and make the copy's rows for their ids what
    ``table`` holds now (a change committed after this read logs again: a later round
    applies it). Returns the ids applied. ``xid``: the transaction takes an id even when
    there is nothing to apply, appended there (:func:`_no_older_snapshots` waits for it)."""
    import psycopg

    try:
        return _apply(conn, s, xid, table)
    except (psycopg.errors.UndefinedColumn, psycopg.errors.DatatypeMismatch) as e:
        raise Reshaped(f"{table} changed shape during the rewrite ({type(e).__name__})") from None


def _apply(conn: psycopg.Connection, s: str, xid: list[int] | None, table: str) -> int:
    copy, log, _ = names(table)
    with conn.transaction():
        if xid is not None:
            got = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            assert got is not None
            xid.append(int(got[0]))
        ids = [r[0] for r in conn.execute(f"DELETE FROM {s}.{log} RETURNING id").fetchall()]
        if not ids:
            return 0
        ids = sorted(set(ids))
        cols = _copied(conn, s, table)
        conn.execute(f"DELETE FROM {s}.{copy} WHERE id = ANY(%s)", (ids,))
        conn.execute(f"INSERT INTO {s}.{copy} ({cols}) SELECT {cols} FROM {s}.{table} WHERE id = ANY(%s)", (ids,))
    return len(ids)


def _no_older_snapshots(
    conn: psycopg.Connection, other: psycopg.Connection, xid: int, patience: float, error: type[Exception] | None
) -> None:
    """Wait until every session of this database holds a snapshot that sees transaction
    ``xid`` (just committed on ``other``) committed, but this run's own and those waiting for
    this run's locks (a writer's next statement takes a new snapshot); after ``patience``
    seconds raise ``error`` (None: ``LockNotAvailable``, so the caller lets the writers go and
    tries again). A session is taken for one whose snapshot may be older when its transaction
    began before now (a snapshot is taken at or after its transaction's start) and its oldest
    xmin is not past ``xid`` (this run's own open transaction holds every xmin back: the xmin
    alone cannot tell); and a replica whose ``hot_standby_feedback`` reports an xmin not past
    it (a snapshot there, as old, would read the new table once the swap is replayed)."""
    import psycopg

    got = other.execute("SELECT clock_timestamp()").fetchone()
    assert got is not None
    since = got[0]

    deadline = time.monotonic() + patience
    while True:
        rows = conn.execute(
            "SELECT coalesce(a.state, '?'), coalesce(a.wait_event_type, '-'),"
            " extract(epoch FROM clock_timestamp() - a.xact_start)::int FROM pg_stat_activity a"
            " WHERE a.backend_xmin IS NOT NULL AND age(a.backend_xmin) >= age(%s::text::xid) AND (a.backend_type ="
            " 'walsender' OR a.datid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND a.backend_type = 'client backend' AND a.pid NOT IN (pg_backend_pid(), %s) AND a.xact_start < %s"
            " AND NOT (pg_backend_pid() = ANY(pg_blocking_pids(a.pid))))",
            (str(xid % 2**32), other.info.backend_pid, since),
        ).fetchall()
        if not rows:
            return
        if time.monotonic() >= deadline:
            which = "; ".join(f"{state} (waiting: {wait}) for {age} s" for state, wait, age in rows[:3])
            raise (error or psycopg.errors.LockNotAvailable)(
                f"{len(rows)} sessions hold a snapshot older than the copy's last change: {which}"
            )
        time.sleep(0.02)


def _locking(conn: psycopg.Connection, step: object) -> None:
    """Run ``step`` (a callable) in one transaction whose lock waits last :data:`ATTEMPT`
    each, again until :data:`PATIENCE` (a long transaction holds the table): while this waits,
    other servers' statements queue behind it, so it never waits long at once."""
    import psycopg

    assert callable(step)
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{ATTEMPT}'")
                step()
            return
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)  # the queued statements and the transactions they serve go first


def _lap(t: float) -> float:
    return round(time.monotonic() - t, 3)
