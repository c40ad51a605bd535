"""Epochs on PostgreSQL (efface.origin.postgres.epochs): commit order across processes, no gap
and no half epoch when a committer dies, the commit's LSN, and reads demanding "at least E"
on the primary and on a streaming replica."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import time

import pytest

from efface.errors import ErasureNotSettled
from efface.origin.postgres import epochs
from efface.origin.postgres.schema import migrate

from pgserver import require, wait_replayed

psycopg = require("psycopg")

PROCS = 4
EACH = 40
ROWS_PER_EPOCH = 5
MP = multiprocessing.get_context("fork")


@pytest.fixture
def db(pg_db):
    with pg_db.connect() as conn:
        migrate(conn, dim=4)
        conn.execute("CREATE TABLE probe(epoch bigint NOT NULL, pid int NOT NULL, n int NOT NULL)")
    return pg_db


def _committer(dsn: str, n: int, go) -> None:
    go.wait()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n):
            with epochs.transaction(conn, "write", None, time.time()) as tx:
                conn.execute("INSERT INTO probe VALUES (%s, %s, %s)", (tx.epoch, os.getpid(), i))


def _exact_commits(conn, start: str) -> dict[int, int]:
    """xid -> end LSN of its COMMIT record, read from the WAL itself (pg_walinspect)."""
    conn.execute("CHECKPOINT")  # flushes the WAL: pg_walinspect reads only up to the flushed position
    rows = conn.execute(
        "SELECT xid::text::bigint, end_lsn::text FROM pg_get_wal_records_info(%s, pg_current_wal_flush_lsn())"
        " WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'",
        (start,),
    ).fetchall()
    return {xid: epochs.lsn_int(lsn) for xid, lsn in rows}


def test_epochs_follow_commit_order_across_processes(db):
    with db.connect() as conn:
        start = str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
    go = MP.Event()
    procs = [MP.Process(target=_committer, args=(db.dsn, EACH, go)) for _ in range(PROCS)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with db.connect() as conn:
        total = PROCS * EACH
        assert epochs.current(conn) == total
        rows = conn.execute(
            "SELECT epoch, xid::text::bigint % 4294967296, commit_lsn::text FROM efface.mutations"
        ).fetchall()
        assert sorted(e for e, _x, _l in rows) == list(range(1, total + 1))  # no gap, no repeat
        assert conn.execute("SELECT count(DISTINCT pid) FROM probe").fetchone()[0] == PROCS
        commits = _exact_commits(conn, start)
    # sort the epochs by where their commit records really are in the WAL
    by_lsn = sorted(rows, key=lambda r: commits[r[1]])
    in_commit_order = [e for e, _x, _l in by_lsn]
    assert in_commit_order == sorted(in_commit_order)
    assert all(a < b for a, b in itertools.pairwise(in_commit_order))
    # the recorded LSN is never before the commit record's end (a replica at it holds the commit)
    for _e, xid, lsn in rows:
        assert epochs.lsn_int(lsn) >= commits[xid]


def test_a_rolled_back_transaction_leaves_no_gap(db):
    with db.connect() as conn:
        with epochs.transaction(conn, "write", None, 1.0) as tx:
            first = tx.epoch
        with pytest.raises(RuntimeError), epochs.transaction(conn, "write", None, 2.0) as tx:
            assert tx.epoch == first + 1
            conn.execute("INSERT INTO probe VALUES (%s, 0, 0)", (tx.epoch,))
            raise RuntimeError("abandon")
        assert epochs.current(conn) == first
        assert conn.execute("SELECT count(*) FROM probe").fetchone()[0] == 0
        with epochs.transaction(conn, "write", None, 3.0) as tx:
            assert tx.epoch == first + 1  # the abandoned number, never seen committed, is taken again
        assert tx.committed is not None and tx.committed.epoch == first + 1


def _loop_forever(dsn: str, progress) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            with epochs.transaction(conn, "write", None, time.time()) as tx:
                for n in range(ROWS_PER_EPOCH):
                    conn.execute("INSERT INTO probe VALUES (%s, %s, %s)", (tx.epoch, os.getpid(), n))
            with progress.get_lock():
                progress.value += 1


def _stop_inside(dsn: str, inside) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, epochs.transaction(conn, "write", None, time.time()) as tx:
        for n in range(ROWS_PER_EPOCH - 1):
            conn.execute("INSERT INTO probe VALUES (%s, %s, %s)", (tx.epoch, os.getpid(), n))
        inside.set()
        time.sleep(3600)  # killed here: epoch assigned, rows written, not committed


def _assert_whole_epochs(conn) -> int:
    counter = epochs.current(conn)
    per_epoch = dict(conn.execute("SELECT epoch, count(*) FROM probe GROUP BY epoch").fetchall())
    assert set(per_epoch) == set(range(1, counter + 1))
    assert set(per_epoch.values()) == {ROWS_PER_EPOCH}
    mutations = [r[0] for r in conn.execute("SELECT epoch FROM efface.mutations ORDER BY epoch")]
    assert mutations == list(range(1, counter + 1))
    return counter


def test_kill_9_of_committing_processes_leaves_no_half_epoch(db):
    progress = MP.Value("i", 0)
    looping = [MP.Process(target=_loop_forever, args=(db.dsn, progress)) for _ in range(2)]
    inside = MP.Event()
    stuck = MP.Process(target=_stop_inside, args=(db.dsn, inside))
    for p in looping:
        p.start()
    deadline = time.monotonic() + 60
    while progress.value < 30 and time.monotonic() < deadline:
        time.sleep(0.01)
    stuck.start()
    assert inside.wait(60)
    for p in [*looping, stuck]:
        os.kill(p.pid, signal.SIGKILL)  # wherever each is: mid-transaction, in COMMIT, between
    for p in [*looping, stuck]:
        p.join(30)
        assert p.exitcode == -signal.SIGKILL
    assert progress.value >= 30
    with db.connect() as conn:
        # the server rolls the dead sessions back and releases the counter's row lock
        conn.execute("SET lock_timeout = '30s'")
        counter = _assert_whole_epochs(conn)
        assert counter >= progress.value  # every acknowledged epoch is there
        with epochs.transaction(conn, "write", None, time.time()) as tx:
            for n in range(ROWS_PER_EPOCH):
                conn.execute("INSERT INTO probe VALUES (%s, 0, %s)", (tx.epoch, n))
        assert tx.epoch == counter + 1
        _assert_whole_epochs(conn)
        epochs.backfill_lsns(conn)
        assert conn.execute("SELECT count(*) FROM efface.mutations WHERE commit_lsn IS NULL").fetchone()[0] == 0


def test_at_least_on_the_primary(db):
    with db.connect() as conn:
        with epochs.transaction(conn, "forget", None, 1.0) as tx:
            pass
        got = epochs.at_least(conn, tx.epoch)
        assert got.applied_epoch >= tx.epoch and not got.replica
        with pytest.raises(ErasureNotSettled) as e:
            epochs.at_least(conn, tx.epoch + 1, timeout=0.05)
        assert e.value.required_epoch == tx.epoch + 1 and e.value.applied_epoch == tx.epoch


def test_at_least_on_a_replica_waits_for_replay(db, pg, pg_replica):
    with db.connect() as primary:
        with epochs.transaction(primary, "forget", None, 1.0) as first:
            pass
        with pg_replica.connect() as r:  # the test's database reaches the replica by replay
            wait_replayed(r, first.committed.commit_lsn)
        with pg_replica.connect(db.name) as replica:
            got = epochs.at_least(replica, first.epoch, primary=primary)
            assert got.replica and got.applied_epoch >= first.epoch
            assert epochs.lsn_int(got.replay_lsn) >= epochs.lsn_int(first.committed.commit_lsn)
            replica.execute("SELECT pg_wal_replay_pause()")
            try:
                with epochs.transaction(primary, "forget", None, 2.0) as second:
                    primary.execute("INSERT INTO probe VALUES (%s, 0, 0)", (second.epoch,))
                with pytest.raises(ErasureNotSettled) as e:
                    epochs.at_least(replica, second.epoch, primary=primary, timeout=0.3)
                assert e.value.scope == "replica"
                assert e.value.required_epoch == second.epoch
                assert e.value.applied_epoch == first.epoch
                assert replica.execute("SELECT count(*) FROM probe").fetchone()[0] == 0
            finally:
                replica.execute("SELECT pg_wal_replay_resume()")
            got = epochs.at_least(replica, second.epoch, primary=primary, timeout=30)
            assert got.applied_epoch == second.epoch
            # from now on the replica's reads include the erasure's commit
            assert replica.execute("SELECT epoch FROM probe").fetchall() == [(second.epoch,)]
            # without the primary, it waits on the replica's own counter
            assert epochs.at_least(replica, second.epoch).applied_epoch == second.epoch


def test_an_epoch_whose_lsn_was_never_recorded_still_has_a_bound(db):
    """A process that dies between COMMIT and recording the LSN: readers bound the commit by
    the primary's position now, and backfill_lsns records one."""
    with db.connect() as conn:
        start = str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
        with conn.transaction():
            e = epochs.assign(conn, "forget", None, 1.0)  # committed, LSN never recorded
        assert conn.execute("SELECT commit_lsn FROM efface.mutations WHERE epoch = %s", (e,)).fetchone() == (None,)
        commits = _exact_commits(conn, start)
        xid = conn.execute("SELECT xid::text::bigint FROM efface.mutations WHERE epoch = %s", (e,)).fetchone()[0]
        bound = epochs.lsn_of(conn, e)
        assert epochs.lsn_int(bound) >= commits[xid]
        assert epochs.lsn_of(conn, e + 1) is None  # not committed: no bound
        assert epochs.backfill_lsns(conn) == 1
        stored = conn.execute("SELECT commit_lsn::text FROM efface.mutations WHERE epoch = %s", (e,)).fetchone()[0]
        assert epochs.lsn_int(stored) >= commits[xid]
        assert epochs.backfill_lsns(conn) == 0
        with pytest.raises(ValueError):
            epochs.assign(conn, "forget", None, 1.0)  # autocommit, no transaction open
