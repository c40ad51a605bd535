"""The SQLite origin's connections: one writer, one read-only reader per thread, and the meta rows.

:class:`Connections` is what every part of the origin is handed (:class:`~.origin.SQLiteOrigin`
owns it; its word index, its byte-level capability and the segment merge get it too), so no
part reaches into another's private members and imports run one way: this module imports no
other part of the origin but :mod:`.edge` and :mod:`.schema`.

Concurrency: one writer connection, used only under :attr:`Connections.write_lock` (every
transaction, and the maintenance writes of :mod:`.physical` and :mod:`.text`), and one
read-only connection per reading thread. WAL gives each read its own snapshot, so reads
never wait for a write, a checkpoint, an index rebuild, a verification or a backup; and
:meth:`Connections.snapshot` holds one snapshot across the several statements of one read
(a recall resolves candidates and reads their text from the same state). apsw releases the
GIL inside SQLite, so readers run in parallel with each other and with maintenance.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import apsw

from .edge import edge, savepoint

WAL_AUTOCHECKPOINT = 4096
"""Pages in the WAL past which a commit runs a passive checkpoint (see :meth:`Connections.configure`)."""

READ_MMAP = 1 << 40
"""A reader connection maps the database file (its first TiB) instead of copying each page
it reads into its own cache with a read call: recall's live checks look up a few hundred
scattered rows, and cost a quarter to a third less so (``docs/benchmarks-history.md``). Read-only:
writes still go through the writer's ``pwrite``, and a page the gap scrub zeroes is zero in
every map at once. The mapped pages are the kernel's page cache, shared, so they count in
the process's RSS as they are read."""


class Connections:
    """The connections to one SQLite file (see the module docstring for its threads)."""

    def __init__(self, path: str):
        self.path = path
        self.write_lock = threading.RLock()
        """Held for every use of the writer connection."""
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_mu = threading.Lock()
        self._closed = False
        # Any: apsw types rows as tuples of any SQLite value; each method says what it returns.
        self.writer: Any = apsw.Connection(path)
        """The writer connection; use it only with :attr:`write_lock` held."""

    def configure(self) -> None:
        """The writer's settings: WAL, fsynced commits, zeroed frees (before the schema)."""
        w = self.writer
        w.setbusytimeout(5000)
        w.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit fsyncs the WAL, so an acknowledgement means the tombstone is durable.
        w.execute("PRAGMA synchronous=FULL")
        # Freed pages and cells are overwritten with zeros, not left behind.
        w.execute("PRAGMA secure_delete=ON")
        w.execute("PRAGMA foreign_keys=ON")
        # The writer's page cache (SQLite's default is 2 MiB): a batch of writes inserts into
        # the (tenant, key) and claim indexes at random places, and at 100k records those
        # index pages no longer fit, so every batch read them back from the OS; measured at
        # 100k, 32-64 MiB took the records and claims inserts from ~42 to ~18 ms of CPU per
        # 1000 records. Only the writer's: readers keep the default.
        w.execute("PRAGMA cache_size=-32768")
        # A passive checkpoint once the WAL holds this many pages (SQLite's default: 1000, about
        # every commit of a 1000-record import at 200k records, which dirties ~1,100 pages: each
        # page copied and fsynced once per commit). At 4096, the index pages that consecutive
        # commits dirty again are copied once. An erasure's checkpoint empties the WAL whatever
        # this is (.physical); the WAL a verify scans is what was written after it.
        w.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")

    def reader(self) -> Any:
        """This thread's read-only connection (opened on first use)."""
        c = getattr(self._local, "conn", None)
        if c is None:
            if self._closed:
                raise apsw.ConnectionClosedError("the origin is closed")
            c = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READONLY)
            c.setbusytimeout(5000)
            c.execute(f"PRAGMA mmap_size={READ_MMAP}")
            self._local.conn = c
            self._local.depth = 0
            with self._readers_mu:
                self._readers.append(c)
        return c

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Hold one read snapshot across every read made in this thread inside the block."""
        with edge(self.path):
            c = self.reader()
            if self._local.depth == 0:
                c.execute("BEGIN")
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
                if self._local.depth == 0:
                    c.execute("COMMIT")

    def meta_get(self, key: str) -> str | None:
        row = self.reader().execute("SELECT v FROM meta WHERE k=?", (key,)).fetchone()
        return row[0] if row else None

    def meta_set(self, key: str, value: str) -> None:
        with self.write_lock, savepoint(self.writer):
            self.writer.execute(
                "INSERT INTO meta(k, v) VALUES(?,?) ON CONFLICT(k) DO UPDATE SET v=excluded.v", (key, value)
            )

    def current_epoch(self) -> int:
        row = self.reader().execute("SELECT seq FROM sqlite_sequence WHERE name='mutations'").fetchone()
        return row[0] if row else 0

    def close(self) -> None:
        """Close every reader, then the writer (once no transaction holds it)."""
        self._closed = True
        with self._readers_mu:
            readers, self._readers = self._readers, []
        for c in readers:
            c.close()
        with self.write_lock:
            self.writer.close()
