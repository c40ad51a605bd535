"""efface's schema on PostgreSQL: created, migrated idempotently, refused when too new."""

from __future__ import annotations

import pytest

from efface.errors import EmbedderMismatch
from efface.origin.postgres import SchemaTooNew
from efface.origin.postgres.schema import SCHEMA_VERSION, TABLES, migrate, schema_version


def _tables(conn, schema="efface"):
    return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}


def test_migrate_creates_every_table_in_its_own_schema(pg_db):
    with pg_db.connect() as conn:
        assert schema_version(conn) is None
        assert migrate(conn, dim=8) == SCHEMA_VERSION
        assert _tables(conn) == set(TABLES)
        assert schema_version(conn) == SCHEMA_VERSION
        assert not _tables(conn, "public")  # nothing outside efface's schema
        idx = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'efface'")}
        assert "records_embedding" in idx


def test_migrate_is_idempotent_and_keeps_data(pg_db):
    with pg_db.connect() as conn:
        migrate(conn, dim=8)
        conn.execute("INSERT INTO efface.meta(k, v) VALUES ('x', 'kept')")
        before = conn.execute("SELECT epoch FROM efface.epoch_counter").fetchall()
        migrate(conn, dim=8)
        assert conn.execute("SELECT v FROM efface.meta WHERE k = 'x'").fetchone() == ("kept",)
        assert conn.execute("SELECT epoch FROM efface.epoch_counter").fetchall() == before == [(0,)]


def test_another_schema_name_coexists(pg_db):
    with pg_db.connect() as conn:
        migrate(conn, dim=8)
        migrate(conn, dim=4, schema="efface_two")
        assert _tables(conn, "efface_two") == set(TABLES)
        with pytest.raises(ValueError):
            migrate(conn, dim=4, schema="bad; DROP TABLE x")


def test_newer_schema_and_other_dimension_are_refused(pg_db):
    with pg_db.connect() as conn:
        migrate(conn, dim=8)
        with pytest.raises(EmbedderMismatch):
            migrate(conn, dim=16)
        conn.execute("UPDATE efface.meta SET v = %s WHERE k = 'schema_version'", (str(SCHEMA_VERSION + 1),))
        with pytest.raises(SchemaTooNew):
            migrate(conn, dim=8)


def test_an_unprivileged_role_migrates_and_commits_epochs(pg_db):
    """docs/postgres.md: efface needs no superuser once the vector extension exists."""
    import psycopg

    from efface.origin.postgres import epochs

    role = f"efface_{pg_db.name}"
    with pg_db.connect() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        conn.execute(f"CREATE SCHEMA efface AUTHORIZATION {role}")
    try:
        dsn = pg_db.dsn.replace("user=postgres", f"user={role}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
            migrate(conn, dim=8)
            with epochs.transaction(conn, "write", None, 1.0) as tx:
                pass
            assert tx.committed is not None and tx.committed.epoch == 1
            assert epochs.at_least(conn, 1).applied_epoch == 1
            for fn in ("pg_last_wal_replay_lsn()", "pg_current_wal_insert_lsn()", "pg_is_in_recovery()"):
                assert conn.execute("SELECT has_function_privilege(%s, 'execute')", (fn,)).fetchone() == (True,)
    finally:
        with pg_db.connect() as conn:
            conn.execute("DROP SCHEMA efface CASCADE")
            conn.execute(f"DROP ROLE {role}")


def test_a_current_schema_opens_while_another_server_migrates_under_a_role_lock_timeout(pg_db):
    """Another server holds the migration's advisory lock (its migration may run for minutes);
    a server opening a schema already current under a role's short ``lock_timeout`` reads the
    version without the lock and goes on (it waited for the lock, failed five times, and raised
    StoreUnwritable). The dimension is still checked."""
    import psycopg

    from efface.origin.postgres.schema import MIGRATE_LOCK

    with pg_db.connect() as conn:
        migrate(conn, dim=8)
        conn.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {pg_db.name} SET lock_timeout = '50ms'")
    with psycopg.connect(pg_db.url) as holder, psycopg.connect(pg_db.url, autocommit=True) as conn:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))  # another server migrating
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "50ms"
        assert migrate(conn, dim=8) == SCHEMA_VERSION
        with pytest.raises(EmbedderMismatch):
            migrate(conn, dim=16)
        holder.rollback()
