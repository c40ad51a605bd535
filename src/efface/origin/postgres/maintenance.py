"""The maintenance that removes an erasure's bytes from a PostgreSQL server, and the copies
the ladder reports there (issue #34 item 3; docs/evidence-ladder.md, docs/postgres.md).

What PostgreSQL keeps after a ``DELETE`` is measured in docs/postgres.md: dead tuples and
the free space of heap and index pages, the DELETE's own WAL record, page images written
since, recycled WAL segments. One run of :meth:`Maintenance.run`, under the advisory lock
:data:`LOCK` (one server at a time per database; a server that finds it held leaves the
work to the holder, whose recorded epoch covers it):

1. **Rotates the key-encryption key** when data keys were destroyed since the last rotation
   (:meth:`.keys.Keys.rotate`), so every wrapped copy of a destroyed key, wherever it lies
   (heap pages, WAL, replicas, backups), is useless. Needs the KEK file writable here.
2. **Rewrites the relations an erasure touches** (:data:`TOUCHED`): a new file for each
   table, its TOAST table and every index. ``records`` (and its pgvector HNSW index) and
   ``claims`` online (:mod:`.online`: copied in one snapshot while reads and writes go on,
   their indexes built on the copy, swapped in under a lock held for a moment); the others,
   small, with ``VACUUM FULL`` (which rebuilds indexes), each under an ``ACCESS EXCLUSIVE``
   lock for its rewrite; ``records`` and ``claims`` too where :func:`.online.unsupported`
   says why not (the note's ``records_offline``, ``claims_offline``), or when a transaction
   older than the copy stays open or the table changed meanwhile (:class:`.online.Stalled`).
   Needs the tables' owner (efface's role is).
3. ``CHECKPOINT``, so the old files are unlinked and the pages are on disk. Needs superuser
   or the ``pg_checkpoint`` role (PostgreSQL 15+).
4. **Switches the WAL past its retention** (:mod:`.walpass`): rounds of (a small write,
   ``pg_switch_wal()``, ``CHECKPOINT``) until every segment ``pg_wal`` held is gone or written
   anew and switched out of (a recycled segment keeps its old bytes until then), however many
   the server keeps; in slices of :data:`.walpass.SLICE_S` seconds, the lock let go between
   them, the pass kept in meta: the epoch is covered only when it ends, so the compactor's
   next rounds go on with it. Needs ``EXECUTE`` on ``pg_switch_wal()`` (superuser, or
   granted) and the checkpoint right.

What it could not do it records with the epoch it covered (meta :data:`EPOCH`,
:data:`NOTE`; a replication slot that keeps the WAL, say), shared by every server: the
ladder then says ``cannot_verify`` for the copies that needed it, or names it beside what a
scan finds. It never claims: :meth:`Copies.checks` scans the server's files (when this
process can read them) after it, and says per copy what it found.

``GRANT pg_checkpoint TO efface; GRANT EXECUTE ON FUNCTION pg_switch_wal() TO efface;``
gives a non-superuser role what steps 3 and 4 need; reading the data directory needs the
server's files on this host, readable by this process (``data_dir=``, else ``SHOW
data_directory``, which needs superuser or ``pg_read_all_settings``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...model import Check, CopyState
from ..capabilities import ScanFn
from . import epochs, online, walpass
from .hashsecret import MOVED_KIND, STATISTICS_DROPPED
from .indexbuild import GRAPH_MEM_MAX as GRAPH_MEM_MAX  # re-exported: the maintenance's cap
from .indexbuild import index_memory, parallel_or_serial
from .names import REWRITE_KIND

if TYPE_CHECKING:
    import psycopg

    from .keys import Keys

LOCK = 0x65666661_00000005
"""Advisory lock ('effa' + 5) held for a whole maintenance run: one server at a time."""
VERIFY_CLASS = 0x65666676
"""Advisory lock class ('effv'), with a hash of the handle: one verification of a handle at
a time, across servers (two-key form, apart from the bigint keys above)."""
TOUCHED = (
    "records",
    "claims",
    "lineage",
    "mentions",
    "quarantine",
    "reasons",
    "subjects",
    "data_keys",
    "tenants",
    "policies",
)
"""The tables an erasure deletes from or rewrites (sealed values, vectors, wrapped keys,
subject names in clear): the maintenance rewrites them; ``meta`` too after the move of an
older database's hash secret out of it (:data:`.hashsecret.MOVED_KIND`)."""
EPOCH = "maintenance.epoch"
"""Meta key: the newest epoch the last finished maintenance covered."""
NOTE = walpass.NOTE
"""Meta key: what that maintenance did and could not do (JSON: counts and reasons)."""
LOCK_TIMEOUT = "30s"
"""How long a statement of a maintenance run waits for a lock before this run gives up."""
REWRITE_ATTEMPT = "1s"
"""How long one attempt at a table's rewrite waits for its lock. While it waits, every new
read of the table queues behind it: a forget whose transaction holds the table and whose
evidence read runs on another connection of the pool would wait for the rewrite, which waits
for that transaction (a wait PostgreSQL cannot see as a deadlock; with one 30 s wait, each
such forget stalled 30 s). So an attempt gives up soon, lets the queue through, and tries
again, until :data:`LOCK_PATIENCE`."""
LOCK_PATIENCE = 30.0
"""Seconds a run keeps trying to rewrite a table (a long read holds it) before it gives up
(the compactor's next round tries again)."""
SEGMENT = walpass.SEGMENT


@dataclass(frozen=True)
class Rights:
    """What this process may do and read on the server (see the module docstring)."""

    checkpoint: bool
    switch_wal: bool
    data_dir: str | None
    """The server's data directory as this process reads it; None: not readable here."""
    db_dir: str | None
    """``base/<database oid>`` inside it."""
    lacking: tuple[str, ...]
    """Why a right or the directory is missing, one reason each."""


def rights(conn: psycopg.Connection, data_dir: str | None, schema: str) -> Rights:
    """What the connection's role may do, and whether this process reads the server's files."""
    row = conn.execute(
        "SELECT r.rolsuper, to_regrole('pg_checkpoint') IS NOT NULL"
        " AND pg_has_role(current_user, 'pg_checkpoint', 'MEMBER'),"
        " has_function_privilege('pg_switch_wal()', 'EXECUTE'),"
        " (SELECT setting FROM pg_settings WHERE name = 'data_directory'),"
        " (SELECT oid FROM pg_database WHERE datname = current_database()),"
        " pg_relation_filepath(%s::regclass)"
        " FROM pg_roles r WHERE r.rolname = current_user",
        (f"{schema}.records",),
    ).fetchone()
    assert row is not None
    sup, ckpt, switch, shown, dboid, relpath = row
    lacking: list[str] = []
    checkpoint = bool(sup or ckpt)
    if not checkpoint:
        lacking.append("CHECKPOINT needs superuser or the pg_checkpoint role")
    switch_wal = bool(switch)
    if not switch_wal:
        lacking.append("pg_switch_wal() needs superuser or EXECUTE granted on it")
    where = data_dir or shown
    readable: str | None = None
    if where is None:
        lacking.append(
            "the data directory is not known: pass data_dir= (SHOW data_directory needs superuser or "
            "pg_read_all_settings)"
        )
    elif not os.path.exists(os.path.join(where, str(relpath))):
        lacking.append("the server's data directory is not on this host or not readable by this process")
    elif not all(os.access(os.path.join(where, d), os.R_OK | os.X_OK) for d in ("base", "pg_wal")):
        lacking.append("the server's data directory is not readable by this process")
    else:
        readable = where
    db_dir = None if readable is None else os.path.join(readable, "base", str(dboid))
    return Rights(checkpoint, switch_wal, readable, db_dir, tuple(lacking))


def wal_files(data_dir: str) -> list[str]:
    """The WAL segment files in ``pg_wal`` (not its status folders)."""
    wal = os.path.join(data_dir, "pg_wal")
    return sorted(os.path.join(wal, f) for f in os.listdir(wal) if SEGMENT.match(f))


def db_files(db_dir: str) -> list[str]:
    """Every file of the database's directory (relations, their forks and segments)."""
    return sorted(os.path.join(db_dir, f) for f in os.listdir(db_dir) if os.path.isfile(os.path.join(db_dir, f)))


@dataclass
class Maintenance:
    """Runs the maintenance for one origin (see the module docstring)."""

    schema: str
    keys: Keys
    data_dir: str | None = None
    url: str | None = field(default=None, repr=False)
    """Where a second connection goes (the online rewrite's); None: ``conn``'s own parameters."""
    online: bool = True
    """Rewrite ``records`` and ``claims`` online (:mod:`.online`); False: ``VACUUM FULL`` as the other tables."""
    slice_s: float = walpass.SLICE_S
    """Seconds of WAL rounds one run does at most before it lets the lock go (:mod:`.walpass`)."""

    def run(self, conn: psycopg.Connection) -> dict[str, Any] | None:
        """One maintenance run on ``conn`` (autocommit, this run's own); None when another
        server holds :data:`LOCK` (its run covers what this one would have). Returns what
        it did, as recorded in meta."""
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK,)).fetchone()
        if not got or not got[0]:
            return None
        try:
            return self._run(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK,))

    def _run(self, conn: psycopg.Connection) -> dict[str, Any]:
        s = self.schema
        t0 = time.monotonic()
        online.clean(conn, s)  # what a run killed during the online rewrite left, first
        target = epochs.current(conn, schema=s)
        done = maintained(conn, s)
        retake = walpass.owed(conn, s)  # a verification found erasures still in the WAL
        if target <= done and not retake:
            return note(conn, s)
        pending = walpass.load(conn, s)  # a WAL pass that an earlier run began (its rewrite done)
        rewritten = max(done, pending.epoch) if pending is not None else done
        # an erasure, the rewrite of a database's clear names (schema migration 6) or the move of
        # its hash secret out of meta (migration 7) left old bytes
        owed = conn.execute(
            f"SELECT 1 FROM {s}.receipts WHERE epoch > %s AND epoch <= %s UNION ALL SELECT 1 FROM {s}.mutations"
            " WHERE kind = ANY(%s) AND epoch > %s AND epoch <= %s LIMIT 1",
            (rewritten, target, [REWRITE_KIND, MOVED_KIND], rewritten, target),
        ).fetchone()
        r = rights(conn, self.data_dir, s)
        if pending is not None and owed is not None:
            # erasures since the pass began: it ends first (covering its own epoch), the next run
            # rewrites for them, so a stream of erasures cannot keep every pass from ending
            target, owed = pending.epoch, None
        if owed is not None:
            report = self._rewrite_all(conn, r, rewritten, target)
            # a pass over the WAL as the server holds it now (an earlier pass's segments among it)
            pending = walpass.begin(conn, r.data_dir, target, report) if r.checkpoint and r.switch_wal else None
        elif pending is not None:
            report = pending.report
        else:
            report = {"epoch": target, "erasures": False, "lacking": []}
            if retake:  # what the last run could not do still holds (no rewrite now), and which erasures
                passing = r.checkpoint and r.switch_wal
                report.update(lacking=walpass.kept(note(conn, s), passing), retaken=retake[0], owed=retake)
                pending = walpass.begin(conn, r.data_dir, target, report) if passing else None
                report["lacking"] += [] if passing else [x for x in r.lacking if x not in report["lacking"]]
        report["epoch"] = target
        if pending is not None and not (r.checkpoint and r.switch_wal):
            report["lacking"] += list(r.lacking)  # begun by a role with the rights: this one cannot go on
            pending = None
        if pending is not None and not walpass.go_on(conn, s, r.data_dir, pending, report, self.slice_s, t0):
            return report  # segments left: the next run (the compactor's next round) goes on
        report["seconds"] = round(report.get("seconds", 0) + time.monotonic() - t0, 3)
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE"
                f" SET v = greatest({s}.meta.v::bigint, excluded.v::bigint)::text",
                (EPOCH, str(target)),
            )
            conn.execute(
                f"INSERT INTO {s}.meta(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (NOTE, json.dumps(report)),
            )
            walpass.settle(conn, s, passed="wal" in report)
        return report

    def _rewrite_all(self, conn: psycopg.Connection, r: Rights, since: int, target: int) -> dict[str, Any]:
        """Steps 1-3: the KEK rotated, every touched relation rewritten, a checkpoint; what it
        did, as the report of the run (the WAL pass comes after)."""
        import psycopg

        s = self.schema
        moved = conn.execute(
            f"SELECT 1 FROM {s}.mutations WHERE kind = %s AND epoch > %s AND epoch <= %s LIMIT 1",
            (MOVED_KIND, since, target),
        ).fetchone()
        tables = TOUCHED + (("meta",) if moved is not None else ())
        report: dict[str, Any] = {"epoch": target, "erasures": True, "lacking": []}
        # only this run waits no longer than LOCK_TIMEOUT for a table: the setting must not
        # stay on the pooled connection (a reader given it later would fail, not wait)
        conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        try:
            index_memory(conn, s)  # the rebuild of records' HNSW graph in memory
            if self.keys.pending_destroyed(conn):
                try:
                    rotation = self.keys.rotate(conn)
                    report["rotated"] = {"rewrapped": rotation.rewrapped, "covered": rotation.covered}
                except OSError as e:
                    report["lacking"].append(
                        f"the KEK could not be rotated: its file is not writable here ({e.strerror})"
                    )
            if moved is not None:
                report["lacking"] += _rewrite_statistics(conn, s)
            for table in tables:
                if table not in online.TABLES:
                    _rewrite(conn, f"{s}.{table}")
                    continue
                why = online.unsupported(conn, s, table) if self.online else "not asked"
                if why is None:
                    try:
                        with self._second(conn) as other:
                            report.setdefault("online", {})[table] = online.rewrite(conn, other, s, table)
                        continue
                    except (online.Stalled, psycopg.errors.LockNotAvailable) as e:
                        why = f"the online rewrite gave up: {e}"
                        with contextlib.suppress(psycopg.Error):
                            online.clean(conn, s)
                    except Exception as e:
                        # the copy holds every row in the clear (erased ones too, until the
                        # catch-up): dropped now, and the table rewritten offline, so the
                        # erasure is not held up round after round
                        why = f"the online rewrite failed ({type(e).__name__})"
                        with contextlib.suppress(psycopg.Error):
                            online.clean(conn, s)
                report[f"{table}_offline"] = why
                _rewrite(conn, f"{s}.{table}")
            report["rewritten"] = list(tables)
            report["lacking"] += list(r.lacking)
            if r.checkpoint:
                conn.execute("CHECKPOINT")
                report["checkpoint"] = True
        finally:
            conn.execute("RESET lock_timeout")
            conn.execute("RESET maintenance_work_mem")
        return report

    def _second(self, conn: psycopg.Connection) -> psycopg.Connection:
        """A second autocommit connection to ``conn``'s database (closed by its ``with``)."""
        import psycopg

        return psycopg.connect(self.url or conn.info.dsn, autocommit=True)


def _rewrite_statistics(conn: psycopg.Connection, schema: str) -> list[str]:
    """After the move of the hash secret: rewrite ``pg_statistic`` when the move dropped
    statistics sampled from ``meta`` (:data:`.hashsecret.STATISTICS_DROPPED`), so their old
    bytes leave its file; what could not be done, as reasons."""
    s = schema
    if conn.execute(f"SELECT 1 FROM {s}.meta WHERE k = %s", (STATISTICS_DROPPED,)).fetchone() is None:
        return []
    row = conn.execute(
        "SELECT r.rolsuper OR CASE WHEN current_setting('server_version_num')::int >= 170000"
        " THEN has_table_privilege('pg_catalog.pg_statistic', 'MAINTAIN') ELSE false END"
        " FROM pg_roles r WHERE r.rolname = current_user"
    ).fetchone()
    if not row or not row[0]:
        return [
            "pg_statistic holds old bytes of statistics sampled from efface's meta table before schema 7 (the hash "
            "secret's row among them, possibly): VACUUM FULL pg_catalog.pg_statistic needs superuser or the "
            "pg_maintain role"
        ]
    conn.execute("VACUUM (FULL) pg_catalog.pg_statistic")
    with conn.transaction():
        conn.execute(f"DELETE FROM {s}.meta WHERE k = %s", (STATISTICS_DROPPED,))
    return []


def _rewrite(conn: psycopg.Connection, table: str) -> None:
    """``VACUUM FULL`` of ``table``, attempts of :data:`REWRITE_ATTEMPT` each for up to
    :data:`LOCK_PATIENCE` seconds; then the lock timeout is raised. Its index builds, once
    more serially if a parallel one finds no shared memory (:func:`.indexbuild.parallel_or_serial`)."""
    import psycopg

    def vacuum() -> None:
        deadline = time.monotonic() + LOCK_PATIENCE
        while True:
            try:
                conn.execute(f"VACUUM (FULL) {table}")
                return
            except psycopg.errors.LockNotAvailable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)  # the queued reads and the transaction they serve go first

    conn.execute(f"SET lock_timeout = '{REWRITE_ATTEMPT}'")
    try:
        parallel_or_serial(conn, vacuum)
    finally:
        conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")


def maintained(conn: psycopg.Connection, schema: str) -> int:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (EPOCH,)).fetchone()
    return int(row[0]) if row else 0


def note(conn: psycopg.Connection, schema: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT v FROM {schema}.meta WHERE k = %s", (NOTE,)).fetchone()
    return dict(json.loads(row[0])) if row else {}


@contextlib.contextmanager
def verifying(conn: psycopg.Connection, handle: str) -> Iterator[None]:
    """Hold the verification lock of ``handle`` on ``conn`` (waits for another server's)."""
    conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (VERIFY_CLASS, handle))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (VERIFY_CLASS, handle))


SCANNED_KINDS = ("sealed", "sealed.live", "wrapped", "pgvector", "name_h", "identifier", "key", "tenant")
"""What a scan of the server's files looks for: what the database can hold of an erasure
(ciphertexts, wrapped keys, vectors as pgvector stores them, the keyed hashes standing for
subject names and record keys), and the clear names, identifiers, keys and tenant name, to
prove none reached it (:mod:`.names`); never the text, which is sealed."""


def _check(name: str, state: CopyState, t0: float, recorded: bool = False) -> Check:
    outcome = (
        "recorded"
        if recorded
        else {"erased": "pass", "shredded": "pass", "present": "fail"}.get(state.state, "cannot_verify")
    )
    return Check(name, "erased", outcome, f"{state.state}: {state.reason}", round(t0, 6), round(time.time() - t0, 6))


def unscanned(items: Mapping[str, int] | None, covered: bool, where: str) -> CopyState:
    """The state of a copy efface cannot scan: ``shredded`` only when all it can hold of the
    erasure is ciphertext under destroyed keys whose KEK was rotated away."""
    items = items or {}
    if items.get("pgvector"):
        return CopyState(
            "cannot_verify",
            f"{items['pgvector']} erased vectors are stored in clear by pgvector, and {where} is not scanned by efface",
        )
    if items.get("name_h"):
        return CopyState(
            "cannot_verify",
            f"{items['name_h']} keyed hashes of erased subject names and record keys: with the KEK file, whose name "
            f"key rotations keep, a guessed name can be checked against them, and {where} is not scanned by efface",
        )
    if items.get("sealed.live"):
        return CopyState(
            "cannot_verify",
            f"{items['sealed.live']} sealed values were sealed under data keys that live (their subjects keep other "
            f"claims): {where} may hold them, readable with those keys",
        )
    if not covered:
        return CopyState(
            "cannot_verify",
            "a data key this erasure destroyed is still wrapped by a key-encryption key not rotated away yet "
            "(the maintenance rotates it)",
        )
    return CopyState(
        "shredded",
        f"{where} is not scanned; what it can hold of this erasure is ciphertext under destroyed data keys, "
        "their wrapped copies under retired key-encryption keys",
    )


def copy_checks(
    conn: psycopg.Connection,
    schema: str,
    data_dir: str | None,
    epoch: int,
    items: Mapping[str, int] | None,
    scan: ScanFn | None,
    found: list[str] | None = None,
) -> list[tuple[str, CopyState, Check]]:
    """Where each copy on the server stands for the erasure at ``epoch`` (module docstring);
    the WAL files a scan found it in are added to ``found``."""
    t0 = time.time()
    s = schema
    done = maintained(conn, s)
    noted = note(conn, s)
    row = conn.execute(
        f"SELECT count(*) FROM {s}.destroyed_keys d JOIN {s}.keks k USING (kek_id)"
        f" JOIN {s}.mutations m ON m.epoch = %s WHERE k.state <> 'retired' AND d.destroyed_at <= m.at",
        (epoch,),
    ).fetchone()
    covered = not (row and row[0])
    r = rights(conn, data_dir, s)
    out: list[tuple[str, CopyState, Check]] = []
    live: list[bytes] | None = None
    for name, where in PRIMARY.items():
        if done < epoch:
            state = CopyState(
                "cannot_verify",
                walpass.progress(conn, s)
                or f"the maintenance that removes the bytes has not run past this erasure yet (it covers epoch {done})"
                ": run compact(), or wait(handle)",
            )
        elif r.data_dir is None or r.db_dir is None:
            state = unscanned(items, covered, where)
            state = CopyState(state.state, f"{state.reason} ({'; '.join(r.lacking)})")
        elif items is None or scan is None:
            state = CopyState(
                "erased", "proven by an earlier verification's scan (its ledger entry); not scanned again"
            )
            out.append((name, state, _check(name, state, t0, recorded=True)))
            continue
        else:
            lacking = [x for x in noted.get("lacking", []) if isinstance(x, str)]
            if live is None:  # read once for both copies
                live = live_names(conn, s, erasure_tenant(conn, s, epoch))
            state = _scanned(
                conn, r, name, scan, lacking, live, found if name.endswith(".wal") and found is not None else []
            )
        out.append((name, state, _check(name, state, t0)))
    for replica in replicas(conn):
        where = f"replica {replica}"
        state = unscanned(items, covered, f"the {where} (its files are on its own host)")
        name = f"postgres.replica.{replica}"
        out.append((name, state, _check(name, state, t0)))
    return out


PRIMARY = {"postgres.primary.files": "the primary's data files", "postgres.primary.wal": "the primary's WAL"}
"""The primary's copies, and how a reason names them."""


def copy_names(conn: psycopg.Connection) -> list[str]:
    """The copies :func:`copy_checks` reports, as the server has them now: the primary's
    files and WAL, then each replica (:func:`replicas`)."""
    return [*PRIMARY, *(f"postgres.replica.{r}" for r in replicas(conn))]


def live_names(conn: psycopg.Connection, schema: str, tenant: str | None) -> list[bytes]:
    """The name hashes live rows of ``tenant`` hold now, as stored (a subject erased from a
    tenant and written to it again since has the same hash: the verifier does not count it as
    residue). Only the erasure's tenant's: a name's hash is keyed by its tenant too
    (:meth:`.keys.Keys.name_h`), so another tenant's live rows never hold one of the erasure's
    hashes, and leaving them out changes no judgement. ``tenant`` None (an epoch that names
    none): every tenant's."""
    s = schema
    where = "" if tenant is None else " WHERE tenant = %(t)s"
    # (a claim's subject has a data key: data_keys stands for claims, one row a subject, not one a record)
    rows = conn.execute(
        f"SELECT subject FROM {s}.data_keys{where} UNION SELECT subject FROM {s}.mentions{where}"
        f" UNION SELECT subject FROM {s}.subjects{where}",
        {"t": tenant},
    ).fetchall()
    return [str(r[0]).encode("ascii") for r in rows if r[0] is not None]


def erasure_tenant(conn: psycopg.Connection, schema: str, epoch: int) -> str | None:
    """The tenant (id) the erasure at ``epoch`` was made in, as its epoch recorded it."""
    row = conn.execute(f"SELECT tenant FROM {schema}.mutations WHERE epoch = %s", (epoch,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _scanned(
    conn: psycopg.Connection, r: Rights, name: str, scan: ScanFn, lacking: list[str], live: list[bytes], into: list
) -> CopyState:
    assert r.data_dir is not None and r.db_dir is not None
    if name.endswith(".wal"):
        files, root = wal_files(r.data_dir), r.data_dir
    else:
        files, root = db_files(r.db_dir), r.data_dir
    found, scanned = scan(files, root, live)
    into.extend(found)
    if not found:
        return CopyState("erased", f"none found in {len(files)} files, {scanned:,} bytes scanned")
    where = ", ".join(
        f"{_relation(conn, f)}: " + " ".join(f"{n} {kind}" for kind, n in sorted(per.items()))
        for f, per in sorted(found.items())
    )
    why = f" (the maintenance could not: {'; '.join(lacking)})" if lacking else ""
    return CopyState("present", f"fingerprint windows of this erasure found in {len(found)} files: {where}{why}")


def _relation(conn: psycopg.Connection, path: str) -> str:
    """``base/<db>/<filenode>[.n|_fsm|_vm]`` named by its relation where PostgreSQL knows it."""
    m = re.match(r"^base/\d+/(\d+)", path)
    if m is None:
        return path
    row = conn.execute("SELECT pg_filenode_relation(0, %s)::text", (int(m.group(1)),)).fetchone()
    return f"{path} ({row[0]})" if row and row[0] else path


def replicas(conn: psycopg.Connection) -> list[str]:
    """The replicas this primary streams to, and the physical slots that keep WAL for one
    not connected now (it will receive what they keep)."""
    names = [
        str(r[0] or f"pid{r[1]}")
        for r in conn.execute("SELECT application_name, pid FROM pg_stat_replication ORDER BY pid").fetchall()
    ]
    names += [
        f"slot:{r[0]}"
        for r in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE NOT active AND slot_type = 'physical' ORDER BY slot_name"
        ).fetchall()
    ]
    return names
