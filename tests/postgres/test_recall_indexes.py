"""Recall's indexes of schema migration 10 (issue #34 item 6): claims' liveness answered from
an index, and the HNSW graph built with fewer neighbours a node (``schema.HNSW_BUILD``).

Recall checks each of its ~150 candidates for a live claim (a subquery per record:
``reads.live_claim``). Through the index by ``record_id`` alone each check read the claim's
row too; the index by record and purpose carrying the subject and the expiry answers it from
the index alone where the table's pages are all-visible. A store made before it gets it when
this efface opens it (its graph rebuilt), and recalls the same records with the same scores."""

from __future__ import annotations

import pytest

import efface
from efface.origin.postgres import schema
from efface.origin.postgres.reads import live_claim
from efface.origin.postgres.schema import CLAIMS_LIVE_INDEX

T, P = "acme", "assistant"
DIM = 384


def _open(pg_db, kek, cache):
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False)


def _indexes(conn) -> set[str]:
    return {
        r[0]
        for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'efface' AND tablename = 'claims'")
    }


def _graph(conn) -> str:
    return conn.execute("SELECT pg_get_indexdef(to_regclass('efface.records_embedding'))").fetchone()[0]


def _recalls(store, queries, **kw) -> list[list[tuple[str, float]]]:
    return [[(h.key, round(h.score, 9)) for h in store.recall(q, tenant=T, purpose=P, k=5, **kw)] for q in queries]


def test_a_store_at_schema_9_is_migrated_and_recalls_the_same(pg_db, kek, tmp_path, monkeypatch):
    words = ["river", "stone", "lamp", "paper", "cloud", "garden", "engine", "violin"]
    items = [
        {
            "key": f"k{i}",
            "text": f"note {i} about the {words[i % 8]} and the {words[(i * 3) % 8]}",
            "subject": f"s{i % 3}",
        }
        for i in range(60)
    ]
    queries = ["the river and the stone", "a lamp in the garden", "engine", "violin paper cloud"]
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:9])
        m.setattr(schema, "SCHEMA_VERSION", 9)
        with _open(pg_db, kek, tmp_path / "c") as s:
            s.write_many(items, tenant=T, purpose=P)
            s.write_many(
                [{"key": "other", "text": "the river and the stone, for billing", "subject": "s1"}],
                tenant=T,
                purpose="billing",
            )
            s.forget(tenant=T, key="k3")
            before = _recalls(s, queries)
            before_subject = _recalls(s, queries, subject="s1")
        with pg_db.connect() as conn:
            assert schema.schema_version(conn) == 9
            assert "claims_record" in _indexes(conn) and CLAIMS_LIVE_INDEX not in _indexes(conn)
            assert "m=" not in _graph(conn).replace(" ", "")  # pgvector's defaults
    assert all(before) and all(before_subject)
    with _open(pg_db, kek, tmp_path / "c") as s:
        with pg_db.connect() as conn:
            assert schema.schema_version(conn) == 10 == schema.SCHEMA_VERSION
            have = _indexes(conn)
            assert CLAIMS_LIVE_INDEX in have and "claims_record" not in have, have
            graph = _graph(conn).replace(" ", "")
            assert "hnsw" in graph and "m='8'" in graph and "ef_construction='128'" in graph, graph
        assert _recalls(s, queries) == before
        assert _recalls(s, queries, subject="s1") == before_subject
        assert "k3" not in {k for hits in _recalls(s, queries) for k, _ in hits}


def test_the_live_claim_check_reads_the_index_only(pg_db):
    """At 20,000 claims, vacuumed (as autovacuum keeps a table), recall's check of a record's
    live claim, with and without a subject, is an index-only scan of the new index."""
    with pg_db.connect() as conn:
        schema.migrate(conn, dim=DIM)
        conn.execute("DROP INDEX efface.records_embedding")  # the HNSW graph: not this test's, and slow to fill
        conn.execute(
            "INSERT INTO efface.records(tenant, key, text, metadata, sources, sealed_by, created_at, updated_at)"
            " SELECT 't', 'k' || g, '', '', '', '', 0, 0 FROM generate_series(1, 20000) AS g"
        )
        conn.execute(
            "INSERT INTO efface.claims(record_id, subject, purpose, basis, created_at, expires_at)"
            " SELECT id, md5('s' || id % 50), CASE WHEN id % 3 = 0 THEN 'billing' ELSE 'assistant' END, 'b', 0,"
            " CASE WHEN id % 7 = 0 THEN 100 END FROM efface.records"
        )
        conn.execute("VACUUM ANALYZE efface.records, efface.claims")
        for subject in (None, "x"):
            sql = f"SELECT r.id FROM efface.records r WHERE r.id = ANY(%s) AND {live_claim('efface', subject)}"
            args = [list(range(1, 200, 2)), "t", "assistant", 150.0] + ([subject] if subject else [])
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, args))
            assert f"Index Only Scan using {CLAIMS_LIVE_INDEX} on claims" in plan, plan
            live = {r[0] for r in conn.execute(sql, args)}
            want = {
                i
                for i in range(1, 200, 2)
                if i % 3 != 0 and i % 7 != 0 and (subject is None)  # no claim has subject 'x'
            }
            assert live == want


def test_migration_10_never_locks_reads_while_it_builds(pg_db, kek, tmp_path, monkeypatch):
    """Migration 10 builds its two indexes (the graph about 50 s at 100k records) before it drops
    the old ones: a ``DROP INDEX`` locks its table against every read until the migration's
    commit, so a drop before a build would stop every other server's reads for the build's
    length. Each of its statements is run in one open transaction; after each one up to the
    graph's build, another connection still reads ``records`` and ``claims`` at once."""
    import psycopg

    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:9])
        m.setattr(schema, "SCHEMA_VERSION", 9)
        with _open(pg_db, kek, tmp_path / "c") as s:
            s.write_many(
                [{"key": f"k{i}", "text": f"note {i}", "subject": "s"} for i in range(20)], tenant=T, purpose=P
            )
    v10 = next(m for m in schema.MIGRATIONS if m.version == 10).statements
    build = next(i for i, st in enumerate(v10) if "USING hnsw" in st)
    probe = [
        "SELECT count(*) FROM efface.records WHERE embedding IS NOT NULL",
        "SELECT count(*) FROM efface.claims WHERE purpose = 'assistant'",
    ]
    with psycopg.connect(pg_db.url, autocommit=True) as mig, psycopg.connect(pg_db.url, autocommit=True) as reader:
        reader.execute("SET lock_timeout = '2s'")
        with mig.transaction():
            for stmt in v10[: build + 1]:
                mig.execute(stmt.format(s="efface"))
                for q in probe:
                    assert reader.execute(q).fetchone()[0] >= 1
            for stmt in v10[build + 1 :]:
                mig.execute(stmt.format(s="efface"))
            # from the first drop on, reads wait for the commit (the order is the point)
            with pytest.raises(psycopg.errors.LockNotAvailable):
                reader.execute(probe[0])
    with _open(pg_db, kek, tmp_path / "c") as s:
        assert len(s.recall("note 3", tenant=T, purpose=P, k=3)) == 3


def _at_schema_9(pg_db, kek, cache, monkeypatch, n: int = 20) -> None:
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:9])
        m.setattr(schema, "SCHEMA_VERSION", 9)
        with _open(pg_db, kek, cache) as s:
            s.write_many([{"key": f"k{i}", "text": f"note {i}", "subject": "s"} for i in range(n)], tenant=T, purpose=P)


def _migrating(pg_db, conn, locktype: str = "relation"):
    """schema.migrate on ``conn`` in a thread; the thread, its result (or error), and a wait
    until the migration waits for a lock of ``locktype`` (its connection's request not granted)."""
    import threading
    import time

    import psycopg

    pid, out = conn.info.backend_pid, {}

    def run() -> None:
        try:
            out["v"] = schema.migrate(conn, dim=DIM)
        except Exception as e:
            out["err"] = e

    t = threading.Thread(target=run)
    t.start()
    with psycopg.connect(pg_db.url, autocommit=True) as watch:
        q = "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted AND locktype = %s"
        while t.is_alive() and watch.execute(q, (pid, locktype)).fetchone() is None:
            time.sleep(0.01)
    return t, out


_INSERT_RECORD = (
    "INSERT INTO efface.records(tenant, key, text, metadata, sources, sealed_by, created_at, updated_at)"
    " VALUES ('t', 'w', '', '', '', '', 0, 0)"
)
_INSERT_CLAIM = (
    "INSERT INTO efface.claims(record_id, subject, purpose, basis, created_at)"
    " SELECT id, 's', 'assistant', 'b', 0 FROM efface.records WHERE key = 'w'"
)


def test_migration_10_and_a_write_of_a_server_still_running_both_finish(pg_db, kek, tmp_path, monkeypatch):
    """A write of a server of the previous version, running during the upgrade, holds
    ``records`` (its insert) and then inserts into ``claims``. Migration 10 takes its locks in
    that order: it waits for the write, the write finishes, then the migration does. (Taken in
    its builds' order, claims then records, the two deadlocked.)"""
    import psycopg

    _at_schema_9(pg_db, kek, tmp_path / "c", monkeypatch)
    with psycopg.connect(pg_db.url, autocommit=True) as w, psycopg.connect(pg_db.url, autocommit=True) as m:
        w.execute("BEGIN")
        w.execute(_INSERT_RECORD)
        t, out = _migrating(pg_db, m)  # waits for the writer's lock on records
        w.execute(_INSERT_CLAIM)
        w.execute("COMMIT")
        t.join()
        assert out == {"v": 10}, out
    with pg_db.connect() as conn:
        assert schema.schema_version(conn) == 10
        assert CLAIMS_LIVE_INDEX in _indexes(conn) and "claims_record" not in _indexes(conn)
        n = conn.execute("SELECT count(*) FROM efface.claims c JOIN efface.records r ON r.id = c.record_id")
        assert n.fetchone()[0] == 21


def test_migration_10_ended_by_a_deadlock_is_run_again(pg_db, kek, tmp_path, monkeypatch, caplog):
    """A transaction that takes the tables in the other order (claims, then records) can still
    deadlock with the migration; the migration's transaction is atomic, so it is rolled back
    whole and run again, and both finish. The order is forced: the migration is the one that
    detects the deadlock (its deadlock_timeout fires first; the other's never does)."""
    import logging

    import psycopg

    _at_schema_9(pg_db, kek, tmp_path / "c", monkeypatch)
    with psycopg.connect(pg_db.url, autocommit=True) as w, psycopg.connect(pg_db.url, autocommit=True) as m:
        w.execute("SET deadlock_timeout = '1h'")
        m.execute("SET deadlock_timeout = '2s'")
        w.execute("BEGIN")
        w.execute("LOCK TABLE efface.claims IN ROW EXCLUSIVE MODE")  # as an insert into claims
        with caplog.at_level(logging.WARNING, logger="efface"):
            t, out = _migrating(pg_db, m)  # holds records SHARE, waits for claims
            w.execute(_INSERT_RECORD)  # waits for the migration's SHARE: a deadlock, the migration's to find
            w.execute(_INSERT_CLAIM)
            w.execute("COMMIT")
            t.join()
        assert out == {"v": 10}, out
    retried = [r.getMessage() for r in caplog.records if "schema migration" in r.getMessage()]
    assert any("DeadlockDetected" in r and "attempt 2 of" in r for r in retried), retried
    with pg_db.connect() as conn:
        assert schema.schema_version(conn) == 10
        assert conn.execute("SELECT count(*) FROM efface.claims").fetchone()[0] == 21


def test_migration_10_runs_under_a_role_statement_timeout(pg_db):
    """A ``statement_timeout`` (and PostgreSQL 17's ``transaction_timeout``) set for efface's
    role (here: for it in this database) is shorter than the graph's rebuild; the migration
    sets none for itself, so it still succeeds, with the role's setting in force around it."""
    import psycopg

    with pg_db.connect() as conn:
        full = schema.MIGRATIONS
        try:
            schema.MIGRATIONS = full[:9]
            schema.migrate(conn, dim=DIM)
        finally:
            schema.MIGRATIONS = full
        conn.execute("DROP INDEX efface.records_embedding")  # filled without it, built by the migration
        conn.execute(
            "INSERT INTO efface.records(tenant, key, text, metadata, sources, sealed_by, created_at, updated_at,"
            " embedding) SELECT 't', 'k' || g, '', '', '', '', 0, 0,"
            f" (SELECT array_agg(random() + g * 0 + d * 0)::vector({DIM}) FROM generate_series(1, {DIM}) d)"
            " FROM generate_series(1, 4000) g"
        )
        conn.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {pg_db.name} SET statement_timeout = '300ms'")
        conn.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {pg_db.name} SET transaction_timeout = '400ms'")
    with psycopg.connect(pg_db.url, autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "300ms"
        with pytest.raises(psycopg.errors.QueryCanceled):  # what the graph's build would meet
            conn.execute("SELECT pg_sleep(1)")
        assert schema.migrate(conn, dim=DIM) == 10
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "300ms"  # the role's, after
        assert "m='8'" in _graph(conn).replace(" ", "")
        assert conn.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 4000


def test_migration_10_builds_the_graph_with_the_maintenance_s_memory_and_says_so(
    pg_db, kek, tmp_path, monkeypatch, caplog
):
    """The graph's rebuild gets the maintenance's ``maintenance_work_mem`` (for the migration's
    transaction only), is built once more serially when a parallel build finds no shared
    memory (injected: this host's /dev/shm is large; the connection is real, only the first
    build fails), and says in the log how big it is, without a name."""
    import logging

    import psycopg

    _at_schema_9(pg_db, kek, tmp_path / "c", monkeypatch)
    seen: list[tuple[str, int]] = []
    with psycopg.connect(pg_db.url, autocommit=True) as real:
        server = real.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem'))").fetchone()[0]

        class FirstGraphFails:
            def __getattr__(self, name):
                return getattr(real, name)

            def execute(self, sql, *args):
                if "USING hnsw" in str(sql):
                    row = real.execute(
                        "SELECT current_setting('max_parallel_maintenance_workers'),"
                        " pg_size_bytes(current_setting('maintenance_work_mem'))"
                    ).fetchone()
                    seen.append((row[0], int(row[1])))
                    if row[0] != "0":
                        raise psycopg.errors.DiskFull("could not resize shared memory segment")
                return real.execute(sql, *args)

        with caplog.at_level(logging.INFO, logger="efface"):
            assert schema.migrate(FirstGraphFails(), dim=DIM) == 10
        assert [w for w, _ in seen] == ["2", "0"]  # PostgreSQL's default, then serially
        assert all(mem > server for _, mem in seen), (seen, server)  # the maintenance's, not the server's 64MB
        after = real.execute(
            "SELECT current_setting('max_parallel_maintenance_workers'),"
            " pg_size_bytes(current_setting('maintenance_work_mem'))"
        ).fetchone()
        assert after == ("2", server)  # neither setting outlives the migration
        assert "m='8'" in _graph(real).replace(" ", "")
    said = [r.getMessage() for r in caplog.records if "HNSW graph" in r.getMessage()]
    assert len(said) == 1 and "about 20 records" in said[0] and "maintenance_work_mem" in said[0], said
    assert "efface" not in said[0] and "note" not in said[0]  # sizes only: no schema, table or text


def test_migration_10_waiting_to_drop_the_old_indexes_stops_no_read(pg_db, kek, tmp_path, monkeypatch):
    """Built, the new indexes replace the old under ACCESS EXCLUSIVE on both tables. A request
    for it waiting in the lock queue (here behind a long read transaction) would stop every read
    queued after it; migration 10 tries it without queueing until it is granted, so other reads
    go on meanwhile, and it finishes once the long read ends."""
    import threading
    import time

    import psycopg

    _at_schema_9(pg_db, kek, tmp_path / "c", monkeypatch)
    with (
        psycopg.connect(pg_db.url, autocommit=True) as long,
        psycopg.connect(pg_db.url, autocommit=True) as m,
        psycopg.connect(pg_db.url, autocommit=True) as other,
    ):
        long.execute("BEGIN")
        long.execute("SELECT count(*) FROM efface.records")  # holds records until its commit
        out: dict[str, object] = {}
        t = threading.Thread(target=lambda: out.update(v=schema.migrate(m, dim=DIM)))
        t.start()
        pid = m.info.backend_pid
        q = (
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND query LIKE '%%ACCESS EXCLUSIVE MODE%%'"
            " UNION ALL SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted"
        )
        while t.is_alive() and other.execute(q, (pid, pid)).fetchone() is None:
            time.sleep(0.01)  # until the migration tries for the swap's lock, or waits for it
        try:
            assert t.is_alive()
            other.execute("SET lock_timeout = '2s'")
            for _ in range(3):  # reads of another server go on while it tries
                assert other.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 20
                assert other.execute("SELECT count(*) FROM efface.claims").fetchone()[0] == 20
        finally:
            long.execute("COMMIT")
            t.join()
        assert out == {"v": 10}
    with pg_db.connect() as conn:
        assert schema.schema_version(conn) == 10 and CLAIMS_LIVE_INDEX in _indexes(conn)


def test_migration_10_waits_for_another_server_s_migration_under_a_role_lock_timeout(pg_db, kek, tmp_path, monkeypatch):
    """Another server holds the migration's advisory lock (its run of migration 10 rebuilds the
    graph for about 50 s at 100k records); a server opening meanwhile under a role's short
    ``lock_timeout`` waits for it, however long (the wait queues no table lock), where it
    failed with StoreUnwritable once its attempts had each met the ``lock_timeout``. The
    role's setting is in force again after."""
    import time

    import psycopg

    _at_schema_9(pg_db, kek, tmp_path / "c", monkeypatch)
    monkeypatch.setattr(schema, "MIGRATE_ATTEMPTS", 2)
    with pg_db.connect() as conn:
        conn.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {pg_db.name} SET lock_timeout = '50ms'")
    with psycopg.connect(pg_db.url) as holder, psycopg.connect(pg_db.url, autocommit=True) as m:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (schema.MIGRATE_LOCK,))  # another server migrating
        t, out = _migrating(pg_db, m, "advisory")
        time.sleep(0.5)  # ten times the role's lock_timeout, while the other migrates
        holder.rollback()
        t.join()
        assert out == {"v": 10}, out
        assert m.execute("SHOW lock_timeout").fetchone()[0] == "50ms"
    with pg_db.connect() as conn:
        assert schema.schema_version(conn) == 10 and CLAIMS_LIVE_INDEX in _indexes(conn)


def test_migration_10_never_queues_without_bound_behind_an_idle_transaction(pg_db, kek, tmp_path, monkeypatch, caplog):
    """A session left idle in a transaction that read ``records`` holds it for ever. Migration 10
    never waits in the lock queue for it without a bound (every read of another server would
    queue behind the wait, for ever): past the patience its queued tries each end after
    ``SWAP_QUEUED`` seconds, reads go on between them, the log says what holds the tables, and
    past ``SWAP_LIMIT`` it gives up with StoreUnwritable saying so, the schema left at 9."""
    import logging
    import threading
    import time

    import psycopg

    from efface.errors import StoreUnwritable
    from efface.origin.postgres import indexbuild

    _at_schema_9(pg_db, kek, tmp_path / "c", monkeypatch)
    monkeypatch.setattr(indexbuild, "SWAP_PATIENCE", 0.2)
    monkeypatch.setattr(indexbuild, "SWAP_QUEUED", 0.3)
    monkeypatch.setattr(indexbuild, "SWAP_QUEUED_EVERY", 0.5)
    monkeypatch.setattr(indexbuild, "SWAP_SAY", 0.5)
    monkeypatch.setattr(indexbuild, "SWAP_LIMIT", 4.0)
    with (
        psycopg.connect(pg_db.url, autocommit=True) as idle,
        psycopg.connect(pg_db.url, autocommit=True) as m,
        psycopg.connect(pg_db.url, autocommit=True) as other,
    ):
        idle.execute("BEGIN")
        idle.execute("SELECT count(*) FROM efface.records")  # then idle in transaction
        out: dict[str, object] = {}

        def run() -> None:
            try:
                out["v"] = schema.migrate(m, dim=DIM)
            except Exception as e:
                out["err"] = e

        other.execute("SET lock_timeout = '3s'")  # ten times a queued try's bound
        blocked = None
        with caplog.at_level(logging.WARNING, logger="efface"):
            t = threading.Thread(target=run)
            t.start()
            try:
                reads = 0
                while t.is_alive():
                    try:
                        assert other.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 20
                        reads += 1
                    except psycopg.errors.LockNotAvailable as e:  # queued behind the migration
                        blocked = e
                        break
                    time.sleep(0.02)
            finally:
                idle.execute("ROLLBACK")  # unblocks a migration waiting in the queue (without the bound)
                t.join()
        assert blocked is None and reads > 0
        err = out.get("err")
        assert isinstance(err, StoreUnwritable), out
        assert "idle in transaction" in str(err) and "efface" not in str(err).replace("efface's", "")
    said = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert said and all("idle in transaction" in s and "records" not in s for s in said), said
    with pg_db.connect() as conn:
        assert schema.schema_version(conn) == 9 and "claims_record" in _indexes(conn)
