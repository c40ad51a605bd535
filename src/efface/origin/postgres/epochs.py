"""Epochs on PostgreSQL: assigned in the committing transaction, in commit order across any
number of processes, each recorded with its commit's LSN; and reads that demand a state
including epoch E (docs/concepts.md §9: epochs follow commit order across processes).

**How an epoch is assigned.** Every mutating transaction runs, in READ COMMITTED,

    UPDATE efface.epoch_counter SET epoch = epoch + 1 RETURNING epoch

on the counter's single row. The row lock it takes is held until the transaction ends, so a
second committer's UPDATE waits for the first to commit (or roll back), then re-reads the row
(READ COMMITTED re-evaluates an updated row) and gets the next number. Hence:

* **order**: epoch E+1's transaction takes its number only after E's committed, so it commits
  after E: its commit record is later in the WAL, and every snapshot (on the primary) or
  replayed state (on a replica) that holds E+1 holds E and everything before it;
* **no gaps**: the counter's update is part of the transaction; a transaction that rolls back
  (or whose process is killed, which the server rolls back) leaves the counter as it was, and
  the next committer takes the same number. No committed state ever held the abandoned one,
  so the number is never seen twice. Committed epochs are exactly 1..counter.
* **cost**: committers are serialised from the UPDATE to their commit, as SQLite's write
  lock serialises them; a transaction should assign its epoch when its reads are done.

Not a sequence: ``nextval`` is not transactional and not ordered by commit (two transactions
take 7 and 8 and may commit 8 first; a reader seeing 8 would not see 7's erasure, and a
rolled-back 7 leaves a gap no reader can tell from a late commit). Not an advisory lock plus
``max(epoch) + 1``: that orders commits just as well, but needs a lock id reserved in a
database that others use, and a read of the table it then writes; the row lock comes with the
write. (Advisory locks do order efface's maintenance, where no row is written.)

**The commit's LSN.** A transaction cannot know where its own commit record will land. The
committing session reads ``pg_current_wal_insert_lsn()`` right after COMMIT returned and
stores it as the epoch's ``commit_lsn``: at or past the end of that commit record (the record
was inserted before COMMIT returned), possibly a little past it (other sessions' records),
never before. A replica whose replay position has reached it holds the commit. If the process
dies between its commit and that update, the LSN is filled in by :func:`backfill_lsns` with
the then-current insert position, which is past the commit all the same.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import ErasureNotSettled
from .schema import DEFAULT_SCHEMA, check_name

if TYPE_CHECKING:
    import psycopg


def lsn_int(lsn: str) -> int:
    """``'16/B374D848'`` as one integer, for comparing WAL positions."""
    hi, lo = str(lsn).split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


@dataclass(frozen=True)
class Committed:
    """An epoch whose transaction committed."""

    epoch: int
    commit_lsn: str
    """At or just past the end of the transaction's commit record (see the module docstring)."""


@dataclass(frozen=True)
class Reached:
    """What :func:`at_least` found: the state read from now on includes ``epoch``."""

    epoch: int
    """The epoch asked for."""
    applied_epoch: int
    """The newest epoch the connection's state holds (at least ``epoch``)."""
    replica: bool
    """Whether the connection is to a replica (in recovery)."""
    replay_lsn: str | None
    """On a replica, its replay position when the epoch was found there."""
    waited_s: float
    """How long the call waited (0 when the state already held the epoch)."""


class EpochTx:
    """One open mutating transaction with its epoch (``tx.epoch``); its connection is
    ``tx.conn``. The epoch's ``commit_lsn`` is known once the block has exited: ``tx.committed``."""

    def __init__(self, conn: psycopg.Connection, epoch: int) -> None:
        self.conn = conn
        self.epoch = epoch
        self.committed: Committed | None = None


def assign(conn: psycopg.Connection, kind: str, tenant: str | None, now: float, *, schema: str = DEFAULT_SCHEMA) -> int:
    """Take the next epoch inside ``conn``'s open transaction and record it in ``mutations``.

    The transaction must be READ COMMITTED (PostgreSQL's default): under REPEATABLE READ a
    second committer would fail with a serialization error instead of waiting its turn."""
    s = check_name(schema)
    if conn.autocommit and not conn.info.transaction_status:  # 0: IDLE, no transaction open
        raise ValueError("assign() must run inside a transaction")
    row = conn.execute(f"UPDATE {s}.epoch_counter SET epoch = epoch + 1 RETURNING epoch").fetchone()
    if row is None:
        raise RuntimeError("efface's epoch counter row is missing: run schema.migrate()")
    epoch = int(row[0])
    conn.execute(
        f"INSERT INTO {s}.mutations(epoch, kind, tenant, at) VALUES (%s, %s, %s, %s)", (epoch, kind, tenant, now)
    )
    return epoch


def record_commit_lsn(conn: psycopg.Connection, epoch: int, *, schema: str = DEFAULT_SCHEMA) -> Committed:
    """Right after ``epoch``'s transaction committed on ``conn``: store and return its LSN."""
    s = check_name(schema)
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    lsn = str(row[0])
    with conn.transaction():
        conn.execute(
            f"UPDATE {s}.mutations SET commit_lsn = %s::pg_lsn WHERE epoch = %s AND commit_lsn IS NULL", (lsn, epoch)
        )
    return Committed(epoch, lsn)


@contextlib.contextmanager
def transaction(
    conn: psycopg.Connection, kind: str, tenant: str | None, now: float, *, schema: str = DEFAULT_SCHEMA
) -> Iterator[EpochTx]:
    """A mutating transaction on ``conn`` (an autocommit connection: the block is one
    transaction) with its epoch assigned first. Commits on a clean exit, then records the
    commit's LSN; on an exception nothing of it stays, the epoch included."""
    if not conn.autocommit:
        raise ValueError("epochs.transaction() needs an autocommit connection (it opens the transaction)")
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        tx = EpochTx(conn, assign(conn, kind, tenant, now, schema=schema))
        yield tx
    tx.committed = record_commit_lsn(conn, tx.epoch, schema=schema)


def current(conn: psycopg.Connection, *, schema: str = DEFAULT_SCHEMA) -> int:
    """The newest committed epoch in ``conn``'s view (a replica: what it has replayed)."""
    s = check_name(schema)
    row = conn.execute(f"SELECT epoch FROM {s}.epoch_counter").fetchone()
    return 0 if row is None else int(row[0])


def backfill_lsns(conn: psycopg.Connection, *, schema: str = DEFAULT_SCHEMA) -> int:
    """Give every committed epoch still without a ``commit_lsn`` (its process died between
    COMMIT and recording it) the current insert position, which is past its commit; returns
    how many. Runs on the primary; idempotent."""
    s = check_name(schema)
    with conn.transaction():
        cur = conn.execute(
            f"UPDATE {s}.mutations SET commit_lsn = pg_current_wal_insert_lsn() WHERE commit_lsn IS NULL"
            f" AND epoch <= (SELECT epoch FROM {s}.epoch_counter)"
        )
        return cur.rowcount


def lsn_of(primary: psycopg.Connection, epoch: int, *, schema: str = DEFAULT_SCHEMA) -> str | None:
    """A WAL position at or past ``epoch``'s commit, read on the primary; None when the
    epoch is not committed (yet)."""
    s = check_name(schema)
    row = primary.execute(f"SELECT commit_lsn::text FROM {s}.mutations WHERE epoch = %s", (epoch,)).fetchone()
    if row is None:
        return None
    if row[0] is not None:
        return str(row[0])
    # committed, its LSN not recorded yet (its session is between COMMIT and the update, or
    # died there): the primary's insert position now is past its commit
    now = primary.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert now is not None
    return str(now[0])


def _replay_lsn(conn: psycopg.Connection) -> str | None:
    row = conn.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _in_recovery(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


def at_least(
    conn: psycopg.Connection,
    epoch: int,
    *,
    primary: psycopg.Connection | None = None,
    timeout: float = 5.0,
    poll: float = 0.01,
    schema: str = DEFAULT_SCHEMA,
) -> Reached:
    """Return once reads on ``conn`` see a state that includes ``epoch``, or raise
    :class:`efface.errors.ErasureNotSettled` after ``timeout`` seconds.

    ``conn`` is an autocommit connection (each later statement takes a new snapshot).

    * On the primary: READ COMMITTED statements see every committed epoch; the call only
      checks the counter (and waits, if ``epoch`` has not committed yet).
    * On a replica: waits until its replay position reaches ``epoch``'s commit LSN, read on
      ``primary`` when given, then checks the replica's own counter holds ``epoch`` (replay
      is in commit order, so it then holds every epoch up to it). Without ``primary`` it waits
      on the replica's counter alone. A replica never goes back, so every later statement on
      ``conn`` sees the epoch too.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout
    replica = _in_recovery(conn)
    target: str | None = None
    while True:
        applied = current(conn, schema=schema)
        replayed = _replay_lsn(conn) if replica else None
        if replica and primary is not None and target is None:
            target = lsn_of(primary, epoch, schema=schema)
        lsn_ok = target is None or (replayed is not None and lsn_int(replayed) >= lsn_int(target))
        if applied >= epoch and lsn_ok:
            return Reached(epoch, applied, replica, replayed, time.monotonic() - t0)
        if time.monotonic() >= deadline:
            where = "replica" if replica else "primary"
            raise ErasureNotSettled(
                f"the {where} holds epochs up to {applied}, not {epoch}, after waiting {timeout:g} s"
                + (f" (replayed to {replayed}, the epoch's commit is at or before {target})" if target else "")
                + ": read from the primary, or retry later",
                scope=where,
                required_epoch=epoch,
                applied_epoch=applied,
            )
        time.sleep(poll)
