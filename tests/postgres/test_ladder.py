"""The evidence ladder on PostgreSQL (issue #34 item 3; docs/evidence-ladder.md): after a
forget, the maintenance (KEK rotated, touched relations rewritten, checkpoint, WAL switched
past its retention) and a byte scan of the server's files make ``erased`` on a server whose
data directory this process reads; elsewhere each copy says ``shredded`` or
``cannot_verify`` with its reason, and the level stays ``unreadable``. Two stores on one
database share the KEK's rotation, the maintenance's lock and the verification's lock."""

from __future__ import annotations

import secrets
import threading

import pytest

import efface
from efface.erasure.verify import SERVER_KINDS
from efface.origin.postgres import maintenance
from efface.origin.postgres.keys import KekFile

T = "acme"
TEXT = "Zebulon Quaxworth keeps a vermilion kettle in the north annex"
OTHER = "Ottoline Brackwater collects copper weathervanes"


def _open(url, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _scan(store, handle, data_dir):
    """Hits of the erasure's server-side fingerprints in the database's files and the WAL."""
    o = store._origin
    blob = o.evidence(handle)["fingerprints"]
    tally = [0]
    scan = store._verifier._scan_fn(blob, tally)
    with o._pool.connection() as conn:
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    files, _ = scan(maintenance.db_files(f"{data_dir}/base/{dboid}"), data_dir)
    wal, _ = scan(maintenance.wal_files(data_dir), data_dir)
    return sum(sum(k.values()) for k in files.values()), sum(sum(k.values()) for k in wal.values()), tally[0]


def test_a_forget_is_erased_on_a_server_whose_files_this_process_reads(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        with pg_db.connect() as conn:
            conn.execute("CHECKPOINT")  # the pages on disk, as the buffers hold them
        before = _scan(s, receipt.handle, str(pg_db.server.datadir))
        assert before[0] > 0 and before[1] > 0, "the dead tuple and the DELETE's WAL record hold the sealed row"
        v = s.verify(receipt.handle)
        assert v.level == "unreadable"
        assert v.copies["postgres.primary.files"].state == "cannot_verify"  # not maintained yet
        st = s.wait(receipt.handle, 60, until="erased")
        assert st.erased
        after = _scan(s, receipt.handle, str(pg_db.server.datadir))
        assert after[:2] == (0, 0)
        v = s.verify(receipt.handle)
        assert v.level == "erased", [c for c in v.checks if c.outcome != "pass"]
        assert {k: c.state for k, c in v.copies.items()} == {
            "cache": "erased",
            "postgres.primary.files": "erased",
            "postgres.primary.wal": "erased",
        }
        assert v.scanned_bytes > after[2] // 2
        with pg_db.connect() as conn:
            states = sorted(r[0] for r in conn.execute("SELECT state FROM efface.keks"))
        assert states == ["current", "retired"], "the KEK was rotated after the data key was destroyed"
        assert s.read("n2", tenant=T, purpose="support").text == OTHER
        again = s.verify(receipt.handle)
        assert again.level == "erased" and again.fingerprints_discarded
        assert again.copies["postgres.primary.files"].state == "erased"
        assert again.to_dict()["copies"]["postgres.primary.wal"]["state"] == "erased"


def test_where_the_files_are_not_readable_each_copy_says_why_and_the_level_stays_unreadable(pg_db, kek, tmp_path):
    """A data directory elsewhere (here: named wrong, as for a managed server): no scan; the
    erased vectors are in clear in pgvector, so the server's copies cannot be verified."""
    with _open(pg_db.url, kek, tmp_path / "a", data_dir=tmp_path / "elsewhere") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        assert s.wait(receipt.handle, 60, until="erased").erased  # the maintenance ran
        v = s.verify(receipt.handle)
        assert v.level == "unreadable"
        for name in ("postgres.primary.files", "postgres.primary.wal"):
            copy = v.copies[name]
            assert copy.state == "cannot_verify"
            assert "stored in clear by pgvector" in copy.reason and "not on this host" in copy.reason
        assert v.copies["cache"].state == "erased"
        assert not v.fingerprints_discarded


def test_an_unscanned_copy_is_shredded_only_when_nothing_but_destroyed_ciphertext_can_remain():
    assert maintenance.unscanned({"sealed": 3, "wrapped": 1}, True, "x").state == "shredded"
    assert maintenance.unscanned({"sealed": 3}, False, "x").state == "cannot_verify"  # KEK not rotated yet
    assert "keep other claims" in maintenance.unscanned({"sealed.live": 1}, True, "x").reason
    assert "pgvector" in maintenance.unscanned({"sealed": 1, "pgvector": 1}, True, "x").reason
    # subject names and identifiers never reach the database in clear (schema 6): their
    # fingerprints alone do not keep a copy from shredded, the hashes standing for them do
    assert maintenance.unscanned({"sealed": 3, "identifier": 2, "key": 1}, True, "x").state == "shredded"
    assert "guessed name" in maintenance.unscanned({"sealed": 1, "name_h": 1}, True, "x").reason
    assert set(SERVER_KINDS) == set(maintenance.SCANNED_KINDS)


def test_a_role_without_checkpoint_rights_gets_cannot_verify_with_the_reason(pg_db, kek, tmp_path):
    role = f"low_{secrets.token_hex(4)}"
    with pg_db.connect() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT CREATE ON DATABASE {pg_db.name} TO {role}")
    url = pg_db.url.replace("://", f"://{role}@", 1) if "@" not in pg_db.url else None
    if url is None:
        url = pg_db.url.split("://", 1)[0] + f"://{role}@" + pg_db.url.split("@", 1)[1]
    try:
        with _open(url, kek, tmp_path / "a") as s:
            s._origin._maint.data_dir = str(pg_db.server.datadir)  # readable here, yet no rights
            s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
            receipt = s.forget(tenant=T, subject="zq")
            assert s.wait(receipt.handle, 60, until="erased").erased
            v = s.verify(receipt.handle)
            check = next(c for c in v.checks if c.name == "origin.maintenance")
            assert "CHECKPOINT needs superuser or the pg_checkpoint role" in check.detail
            assert "pg_switch_wal() needs superuser" in check.detail
            r = maintenance.rights(s._origin._w, None, "efface")
            assert not r.checkpoint and not r.switch_wal and r.data_dir is None  # SHOW data_directory refused
            assert v.level in ("unreadable", "erased")
            if v.level == "unreadable":  # the files kept a copy the scan found, or could not be scanned
                assert any(c.state in ("present", "cannot_verify") for c in v.copies.values())
            with pg_db.connect() as conn:
                states = sorted(r[0] for r in conn.execute("SELECT state FROM efface.keks"))
            assert states == ["current", "retired"], "the owner may rotate the KEK without superuser"
    finally:
        with pg_db.connect() as conn:
            conn.execute(f"DROP OWNED BY {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")


def test_two_stores_share_the_rotated_kek_and_one_maintenance_at_a_time(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as a, _open(pg_db.url, kek, tmp_path / "b") as b:
        a.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        a.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        before = set(KekFile(kek).keys())
        receipt = a.forget(tenant=T, subject="zq")
        # another server holds the maintenance lock: this one leaves the work to it
        with pg_db.connect() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (maintenance.LOCK,))
            assert b._origin.maintain() is False
            assert a._origin.erased_epoch() < receipt.epoch
            conn.execute("SELECT pg_advisory_unlock(%s)", (maintenance.LOCK,))
        assert b._origin.maintain() is True  # the other server's maintenance covers a's erasure
        assert a._origin.erased_epoch() >= receipt.epoch
        after = set(KekFile(kek).keys())
        assert after and not (after & before), "the file now holds only the new KEK"
        # both servers read and write under the new KEK: a's cached keys, b's file re-read
        assert b.read("n2", tenant=T, purpose="support").text == OTHER
        b.write("n3", "Marisol Pennyfeather sketches lighthouses", tenant=T, subject="mp", purpose="support")
        assert a.read("n3", tenant=T, purpose="support").text.startswith("Marisol")
        b.wait(receipt.handle, 60, until="erased")  # b's own derived files (its ANN index)
        v = b.verify(receipt.handle)
        assert v.level == "erased", [c for c in v.checks if c.outcome not in ("pass", "recorded")]


def test_two_servers_never_verify_one_handle_at_once(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        s.wait(receipt.handle, 60, until="erased")
        done: list = []
        with pg_db.connect() as conn:
            conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (maintenance.VERIFY_CLASS, receipt.handle))
            t = threading.Thread(target=lambda: done.append(s.verify(receipt.handle)))
            t.start()
            # the verification waits for the lock another server holds (seen in pg_locks)
            waiting = 0
            while not waiting:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s",
                    (maintenance.VERIFY_CLASS,),
                ).fetchone()
                waiting = row[0]
            assert not done
            conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (maintenance.VERIFY_CLASS, receipt.handle))
        t.join()
        assert done[0].level == "erased"


def test_a_replica_is_a_copy_efface_cannot_scan(pg_db, pg_replica, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        s.wait(receipt.handle, 60, until="erased")
        v = s.verify(receipt.handle)
        replicas = {k: c for k, c in v.copies.items() if k.startswith("postgres.replica.")}
        assert replicas, "pg_stat_replication names the streaming replica"
        assert all(c.state == "cannot_verify" and "its own host" in c.reason for c in replicas.values())
        assert v.level == "unreadable"
        # The replica's hot_standby_feedback holds the primary's xmin back: VACUUM FULL keeps
        # the dead tuples a replica's snapshot may still see, and the scan says so, naming the
        # relation (the online rewrite of records copies only the rows live now: not it).
        primary = v.copies["postgres.primary.files"]
        assert primary.state in ("erased", "present")
        if primary.state == "present":
            assert "(efface." in primary.reason and "(efface.records)" not in primary.reason


@pytest.mark.parametrize("origin", ["sqlite", "memory"])
def test_the_embedded_origins_report_their_copies_too(tmp_path, origin):
    """The store's own files are one copy (erased after its byte scan); a Verification carries
    its copies over the HTTP wire as the client decodes it."""
    from pydantic import TypeAdapter

    with efface.open(str(tmp_path / "s"), embedder="hashing", origin=origin, background=False) as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        s.wait(receipt.handle, 30)
        v = s.verify(receipt.handle)
    assert v.level == "erased" and {k: c.state for k, c in v.copies.items()} == {"store": "erased"}
    wire = TypeAdapter(efface.model.Verification)
    back = wire.validate_json(wire.dump_json(v))
    assert back.copies == v.copies and back.to_dict()["copies"]["store"]["state"] == "erased"


def test_what_analyze_samples_never_holds_an_erased_subject(pg_db, kek, tmp_path):
    """Regression: ANALYZE (autovacuum runs it on every table that grows) sampled sealed values,
    subject names and wrapped data keys into pg_statistic, a catalog the maintenance cannot
    rewrite: at 100k records verify found them there and said 'present'. efface's columns of
    content, names and keys now carry no statistics (schema migration 5)."""
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        items = [{"key": f"k{i}", "text": f"note number {i} about topic {i % 17}"} for i in range(300)]
        for n in range(20):
            s.write_many(items[n * 15 : (n + 1) * 15], tenant=T, subject=f"subject-{n:03d}", purpose="support")
        with pg_db.connect() as conn:
            conn.execute("ANALYZE")
            sampled = conn.execute(
                "SELECT count(*) FROM pg_stats WHERE schemaname = 'efface' AND attname IN "
                "('subject', 'text', 'wrapped', 'identifiers', 'name') AND most_common_vals IS NOT NULL"
            ).fetchone()[0]
        assert sampled == 0
        receipt = s.forget(tenant=T, subject="subject-007")
        assert s.wait(receipt.handle, 60, until="erased").erased
        v = s.verify(receipt.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
        assert v.copies["postgres.primary.files"].state == "erased"


def test_a_maintenance_that_gives_up_on_a_lock_leaves_no_lock_timeout_on_the_pool(pg_db, kek, tmp_path, monkeypatch):
    """Regression (test_concurrency on postgres, in CI's rehearsal): a maintenance run whose
    VACUUM FULL timed out waiting for a reader's lock left its ``lock_timeout`` on the pooled
    connection, and a later read given that connection failed (LockNotAvailable) instead of
    waiting for the next run's rewrite."""
    monkeypatch.setattr(maintenance, "LOCK_TIMEOUT", "200ms")
    monkeypatch.setattr(maintenance, "LOCK_PATIENCE", 0.0)  # one attempt
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.forget(tenant=T, subject="zq")
        with pg_db.connect() as holder:
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE efface.records IN ACCESS SHARE MODE")  # a long read
            assert s._origin.maintain() is False  # gave up on the lock: the next round retries
            holder.execute("ROLLBACK")
        pool = s._origin._pool
        held = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]  # every one it holds
        try:
            assert {c.execute("SHOW lock_timeout").fetchone()[0] for c in held} == {"0"}
        finally:
            for c in held:
                pool.putconn(c)
        assert s._origin.maintain() is True


def test_the_maintenance_rebuilds_the_vector_index_in_memory_and_leaves_no_setting_on_the_pool(pg_db, kek, tmp_path):
    """The rewrite of ``records`` rebuilds its HNSW graph; past ``maintenance_work_mem``
    pgvector builds it on disk, many times slower (bench/pg_maintenance.py), so the
    maintenance raises its own session's setting to the index's needs (never lowering the
    server's), and RESETs it, so no pooled connection keeps it."""
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write_many(
            [{"key": f"n{i}", "text": f"{OTHER} number {i}"} for i in range(300)],
            tenant=T,
            subject="ob",
            purpose="support",
        )
        with pg_db.connect() as conn:
            server = conn.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem'))").fetchone()[0]
            index = conn.execute("SELECT pg_relation_size('efface.records_embedding')").fetchone()[0]
            want = min(maintenance.GRAPH_MEM_MAX, index * 5 // 4 + 64 * 2**20)
            assert index > 0 and want > server  # the test server keeps PostgreSQL's 64MB
            assert maintenance.index_memory(conn, "efface") == want
            got = conn.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem'))").fetchone()[0]
            assert got == want // 1024 * 1024
            conn.execute("SET maintenance_work_mem = '3GB'")  # an operator's larger setting stays
            assert maintenance.index_memory(conn, "efface") == 3 * 2**30
            assert conn.execute("SHOW maintenance_work_mem").fetchone()[0] == "3GB"
        s.write("n-zq", TEXT, tenant=T, subject="zq", purpose="support")
        s.forget(tenant=T, subject="zq")
        assert s._origin.maintain() is True
        pool = s._origin._pool
        held = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
        try:
            settings = {
                c.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem'))").fetchone()[0] for c in held
            }
            assert settings == {server}
        finally:
            for c in held:
                pool.putconn(c)


def test_a_rewrite_whose_parallel_build_finds_no_shared_memory_is_built_serially(pg_db):
    """A parallel HNSW build keeps its graph in dynamic shared memory; in a container whose
    /dev/shm is small, PostgreSQL answers "could not resize shared memory segment" (disk full).
    The rewrite then builds once more without parallel workers, instead of failing every round,
    and leaves the session's setting as it found it. The failure is injected (this host's
    /dev/shm is large): the connection below is real, only its first VACUUM FULL fails."""
    import psycopg

    with pg_db.connect() as real:
        real.execute("CREATE TABLE shm_t (id int)")
        real.execute("INSERT INTO shm_t SELECT generate_series(1, 100)")
        before = real.execute("SELECT pg_relation_filenode('shm_t')").fetchone()[0]
        seen: list[str] = []

        class FirstRewriteFails:
            def execute(self, sql, *args):
                workers = real.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]
                if sql.startswith("VACUUM (FULL)"):
                    seen.append(workers)
                    if workers != "0":
                        raise psycopg.errors.DiskFull("could not resize shared memory segment")
                return real.execute(sql, *args)

        maintenance._rewrite(FirstRewriteFails(), "shm_t")
        assert seen == ["2", "0"]  # PostgreSQL's default, then serially
        assert real.execute("SELECT pg_relation_filenode('shm_t')").fetchone()[0] != before  # rewritten
        assert real.execute("SHOW max_parallel_maintenance_workers").fetchone()[0] == "2"

        class AlwaysFails:
            def execute(self, sql, *args):
                if sql.startswith("VACUUM (FULL)"):
                    raise psycopg.errors.DiskFull("could not resize shared memory segment")
                return real.execute(sql, *args)

        with pytest.raises(psycopg.errors.DiskFull):  # a second failure is the maintenance's to report
            maintenance._rewrite(AlwaysFails(), "shm_t")
        assert real.execute("SHOW max_parallel_maintenance_workers").fetchone()[0] == "2"
