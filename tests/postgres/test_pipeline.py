"""Recall's first round trip written to libpq's pipeline directly (efface.origin.postgres.pipeline):
it works on a libpq older than 17, whatever the socket's descriptor number, raises what
interrupted it (a lost connection as efface's own error), prepares again and sends once more
when the server dropped its prepared statements, and a recall with a turn filter runs once."""

from __future__ import annotations

import ctypes.util
import os
import resource
import subprocess
import sys
import textwrap

import psycopg
import pytest

import efface
from efface.errors import OriginUnreachable
from efface.origin.postgres import pipeline
from efface.paths import recall as recall_module

T = "acme"

RECALL = textwrap.dedent(
    """
    import os, resource, sys
    from pathlib import Path
    if sys.argv[4] != "0":  # descriptors held open first, so the connections' sockets number past them
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(int(sys.argv[4]))]
    import psycopg
    import efface
    print("libpq", psycopg.pq.__impl__, psycopg.pq.version(), flush=True)
    with efface.open(sys.argv[1], embedder="hashing", kek_file=Path(sys.argv[2]), cache_dir=sys.argv[3],
                     background=False) as s:
        s.write("n1", "a vermilion kettle whistles on the zebra stove", tenant="acme", subject="alice", purpose="p")
        s.write("n2", "a vermilion kettle on the stove", tenant="acme", subject="bob", purpose="p")
        s.write("n3", "the stove is cold", tenant="acme", subject="bob", purpose="p")
        s.compact()
        for _ in range(3):
            print(",".join(h.key for h in s.recall("vermilion kettle zebra stove", tenant="acme", purpose="p", k=2)))
        if sys.argv[4] != "0":
            print("fd", max(os.listdir("/proc/self/fd"), key=int))
    """
)


def _run(pg_db, kek, cache, *, fds: int = 0, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", RECALL, pg_db.url, str(kek), str(cache), str(fds)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_recall_runs_on_a_system_libpq_older_than_17(pg_db, kek, tmp_path):
    """psycopg's pure-Python build on the system's libpq (Debian 12's is 15, without
    ``PQsendClosePrepared``): every recall answers, the same as on psycopg's own libpq."""
    if ctypes.util.find_library("pq") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no system libpq (Debian's libpq5): .ci/run installs it")
        pytest.skip("no system libpq found (install Debian's libpq5) for psycopg's pure-Python build")
    lines = _run(pg_db, kek, tmp_path / "c", env={"PSYCOPG_IMPL": "python"})
    assert lines[0].startswith("libpq python ")
    assert lines[1:] == ["n1,n2"] * 3


def test_recall_runs_with_descriptors_numbered_past_1024(pg_db, kek, tmp_path):
    """``select()`` takes no descriptor past 1023: the wait is psycopg's (poll)."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2048:
        pytest.skip("this process may not open 1100 more descriptors (RLIMIT_NOFILE's hard limit is below 2048)")
    lines = _run(pg_db, kek, tmp_path / "c", fds=1100)
    assert lines[1:4] == ["n1,n2"] * 3
    assert int(lines[4].split()[1]) > 1100


def _begin(conn, then, *, last=True):
    return pipeline.begin(conn, ("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",), "SELECT 1, 7", then, last=last)


def test_an_error_half_way_is_raised_as_it_is_and_the_connection_closed(pg_db):
    """A parameter of no known form fails after statements were sent: its own TypeError, not
    libpq's "cannot exit pipeline mode while busy" over it; the connection is closed."""
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        with pytest.raises(TypeError, match="no text form here"):
            _begin(conn, ("SELECT %(a)s::int", {"a": object()}))
        assert conn.closed


def test_statements_dropped_by_the_server_are_prepared_again_in_the_same_call(pg_db):
    """Prepared statements gone (``DEALLOCATE ALL``: psycopg's after a rollback, a pooler's
    ``DISCARD ALL``): the round trip is sent again on the same connection, under new names,
    and answers; no internal signal escapes."""
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        assert _begin(conn, ("SELECT %(a)s::int + 1", {"a": 41})) == ((1, 7), [(42,)])
        conn.execute("DEALLOCATE ALL")
        assert _begin(conn, ("SELECT %(a)s::int + 1", {"a": 1})) == ((1, 7), [(2,)])
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE  # its COMMIT went
        held = {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")}
        assert len(held) == 2 and all(n.startswith("efface_") for n in held)


def test_after_a_failed_statement_the_next_round_trip_uses_the_prepares_that_took(pg_db):
    """A statement that fails after its prepare took: the next round trip runs it under the same
    name, preparing nothing again (no clash with the name the server holds, and no ``Close``,
    which libpq before 17 lacks)."""
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            _begin(conn, ("SELECT 1 / %(a)s::int", {"a": 0}), last=False)
        conn.execute("ROLLBACK")
        before = {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")}
        assert len(before) == 2 and {n.decode() for n in pipeline._prepared[conn].names} == before
        assert _begin(conn, ("SELECT 1 / %(a)s::int", {"a": 1})) == ((1, 7), [(1,)])
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")} == before


def test_failed_round_trips_leave_no_prepared_statements_behind(pg_db):
    """Failures on one long-lived connection (a statement's error, as a statement_timeout or a
    cancellation would be; a statement that does not even prepare) never grow what the server
    holds: the two statements' names, prepared once, and nothing else."""
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        for i in range(50):
            if i % 10 == 9:
                with pytest.raises(psycopg.errors.UndefinedColumn):
                    _begin(conn, ("SELECT no_such_column + %(a)s::int", {"a": 1}), last=False)
            else:
                with pytest.raises(psycopg.errors.DivisionByZero):
                    _begin(conn, ("SELECT 1 / %(a)s::int", {"a": 0}), last=False)
            conn.execute("ROLLBACK")
        assert _begin(conn, ("SELECT 1 / %(a)s::int", {"a": 1})) == ((1, 7), [(1,)])
        held = {r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'efface%'")}
        assert len(held) == 2
        assert {n.decode() for n in pipeline._prepared[conn].names} == held


def _write(s) -> None:
    s.write("n1", "a vermilion kettle whistles on the zebra stove", tenant=T, subject="alice", purpose="p")
    s.write("n2", "a vermilion kettle on the stove", tenant=T, subject="bob", purpose="p")
    s.write("n3", "the stove is cold", tenant=T, subject="bob", purpose="p")


def test_a_connection_lost_during_recall_is_origin_unreachable(pg_db, kek, tmp_path):
    """The server ends the pooled connections' sessions: the recall on one of them raises
    :class:`OriginUnreachable` (efface's own, saying to try again), and a later one answers."""
    with efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=tmp_path / "c", background=False) as s:
        _write(s)
        s.compact()
        expected = [h.key for h in s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)]
        assert expected == ["n1", "n2"]
        with pg_db.connect(autocommit=True) as admin:
            pids = [  # the pool's (the writer's own connection kept)
                r[0]
                for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    " AND pid <> %s",
                    (s._origin._w.info.backend_pid,),
                )
            ]
            assert pids
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        raised, answers = [], []
        for _ in range(6):
            try:
                answers.append([h.key for h in s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)])
            except OriginUnreachable as e:
                raised.append(e)
        assert raised, "no recall met a lost connection"
        assert "try again" in str(raised[0])
        assert answers and answers[-1] == expected


def test_a_recall_with_a_turn_filter_runs_once(pg_db, kek, tmp_path, monkeypatch):
    """``said_by``'s eligibility is read after the vector statement: that statement reads
    nothing ahead and does not end the snapshot, so the recall is not run a second time."""
    runs: list[bool] = []
    real = recall_module._hybrid

    def counted(*a, **kw):
        runs.append(kw.get("ahead", True))
        return real(*a, **kw)

    monkeypatch.setattr(recall_module, "_hybrid", counted)
    with efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=tmp_path / "c", background=False) as s:
        for i in range(6):
            s.write(
                f"n{i}",
                f"a vermilion kettle number {i} on the stove",
                tenant=T,
                subject="bob",
                purpose="p",
                metadata={"speaker": "ann" if i % 2 else "bo", "session": "s1", "at": 1000 + i},
            )
        s.compact()
        for _ in range(3):
            runs.clear()
            hits = s.recall("vermilion kettle stove", tenant=T, purpose="p", k=2, said_by="ann")
            assert [h.key for h in hits] == ["n1", "n3"]
            assert runs == [True]
        assert s._origin._early.after == 0  # no early end had to be read again
