"""Shared fixtures.

* ``backend``     the origin backend a test runs on; every store fixture is parametrized
                  over ``BACKENDS`` (only ``sqlite``, the embedded store, exists today), so
                  adding PostgreSQL later runs every contract test on it too.
* ``store_path``  a fresh directory for one store (it does not exist yet).
* ``clock``       a :class:`FakeClock`; stores opened through the fixtures read time from
                  it, so TTLs are tested by ``clock.advance(...)``, never by sleeping.
* ``open_store``  a factory: ``open_store(path=None, **options)`` opens a store with test
                  defaults (hashing embedder, no background compactor, the fake clock)
                  and closes it at teardown.
* ``store``       one store opened by ``open_store()``.
* ``reopen``      ``reopen(store, **options)`` closes a store and opens the same one again.
* ``small_disk``  a 3 MiB tmpfs (``mount``/``unmount``; skips where mounting is not allowed).
* ``pg``          a real PostgreSQL 18 + pgvector primary (``tests/pgserver.py``), started the
                  first time a test needs one, with a template database ``efface_tpl`` (the
                  extensions) and ``efface_tpl_hashing`` (efface's schema migrated for the hashing
                  embedder, nothing else); the ``postgres`` backend gives each store of a test a
                  fresh database copied from one of them. Where PostgreSQL cannot start, those
                  tests skip saying why; with ``CI=true`` they fail.

Slow tests (the ``slow`` marker): long crash loops and the longest property tests and state
machines. By default (and in CI) each runs a bounded sample: fewer seeds, rounds or examples,
chosen with :func:`bounded`. ``EFFACE_SLOW=1`` (or selecting them with ``-m slow``) runs them
whole; ``-m "not slow"`` leaves them out of a quick local run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import efface

BACKENDS = ("sqlite", "memory", "http", "postgres")
"""Backends the contract tests run on. Add a name here and teach ``store_location`` about it.
``memory`` is the in-memory reference origin (``efface.open(dir, origin="memory")``): nothing
of it persists, so tests marked ``sqlite_only`` (file bytes, reopen, crash, WAL) skip it.
``http`` is a real ``efface serve`` app on a loopback port over a SQLite store, reached through
``efface.Client`` (see ``served.py``). It runs only in modules that set ``HTTP_CONTRACT = True``
(the API-level contract); there tests that reach internals are marked ``local_only``.
``postgres`` is the PostgreSQL origin (``efface.open("postgresql://...")``) on the ``pg``
primary, a fresh database per store; tests it cannot pass yet are marked
``postgres_pending(reason)``."""

SLOW_ENV = "EFFACE_SLOW"
"""``EFFACE_SLOW=1``: the ``slow`` tests run whole (every seed, round and example), not CI's sample."""


def slow_run() -> bool:
    """Whether the ``slow`` tests run whole (``EFFACE_SLOW=1``, or ``-m slow``: see
    :func:`pytest_configure`); otherwise each runs its bounded sample."""
    return os.environ.get(SLOW_ENV, "").strip().lower() in ("1", "true", "yes")


def bounded(sample, whole):
    """``sample`` in a default (CI) run, ``whole`` with ``EFFACE_SLOW=1``: the size of a
    ``slow`` test (its seeds, rounds or Hypothesis examples)."""
    return whole if slow_run() else sample


def examples(backend: str, n: int) -> int:
    """Hypothesis examples for a property test of a layer above the store (an adapter against
    its framework's reference): ``n`` on the in-process origins (sqlite, memory); on ``http``
    and ``postgres``, whose every call is a round trip and whose own contract the contract
    suite proves, a quarter of ``n`` (at least 5) in a default run, ``n`` with ``EFFACE_SLOW=1``.
    The test's explicit ``@example`` cases run on every backend either way."""
    if backend in ("sqlite", "memory"):
        return n
    return bounded(max(5, n // 4), n)


T0 = 1_800_000_000.0
"""Where the fake clock starts (a fixed instant in 2027), so runs are reproducible."""


class FakeClock:
    """A clock the test moves by hand. Pass it as ``clock=``: the store calls it for now."""

    def __init__(self, start: float = T0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move time forward and return the new now."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.now += float(seconds)
        return self.now

    def set(self, when: float) -> None:
        self.now = float(when)


def pytest_configure(config) -> None:
    # `-m slow` asks for the slow tests: run them whole (the environment carries it to the
    # worker processes the crash tests start). "not slow" leaves them out instead.
    expr = config.getoption("markexpr", default="") or ""
    if re.search(r"\bslow\b", expr) and not re.search(r"\bnot\s+slow\b", expr):
        os.environ[SLOW_ENV] = "1"
    config.addinivalue_line(
        "markers",
        "sqlite_only(reason): the test needs the SQLite origin (its file, its bytes, a reopen); "
        "it is skipped on every other backend",
    )
    config.addinivalue_line(
        "markers",
        "local_only(reason): the test reaches the store's internals or its process (private "
        "attributes, raw files, callbacks, backups); it is skipped on the http backend",
    )
    config.addinivalue_line(
        "markers",
        "ann_files(reason): the test is about the per-process ANN files absorbed after the commit "
        "(a lag, a delta); skipped on the postgres backend, whose vector path is pgvector's index",
    )
    config.addinivalue_line(
        "markers",
        "postgres_pending(reason): the PostgreSQL origin cannot pass this test yet (the reason says "
        "what is missing); it is skipped on the postgres backend",
    )


def pytest_report_header(config) -> str:
    if slow_run():
        return f"efface: slow tests run whole ({SLOW_ENV}=1 or -m slow)"
    return f"efface: slow tests run a bounded sample ({SLOW_ENV}=1 or -m slow runs them whole)"


def pytest_collection_modifyitems(config, items) -> None:
    """The http backend runs only in modules that opt in (``HTTP_CONTRACT = True``)."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_http = callspec is not None and callspec.params.get("backend") == "http"
        opted_in = getattr(getattr(item, "module", None), "HTTP_CONTRACT", False)
        (drop if on_http and not opted_in else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    marker = request.node.get_closest_marker("sqlite_only")
    if marker is not None and request.param != "sqlite":
        why = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "the SQLite origin's files")
        pytest.skip(f"{request.param} origin: {why}")
    local = request.node.get_closest_marker("local_only")
    if local is not None and request.param == "http":
        why = local.kwargs.get("reason") or (local.args[0] if local.args else "it reaches the store's internals")
        pytest.skip(f"http backend: {why}")
    lagging = request.node.get_closest_marker("ann_files")
    if lagging is not None and request.param == "postgres":
        why = lagging.kwargs.get("reason") or (lagging.args[0] if lagging.args else "an ANN path that lags")
        pytest.skip(f"postgres origin: its vector path is pgvector's index, absorbed in the transaction ({why})")
    pending = request.node.get_closest_marker("postgres_pending")
    if pending is not None and request.param == "postgres":
        why = pending.kwargs.get("reason") or (pending.args[0] if pending.args else "not built yet")
        pytest.skip(f"postgres origin pending: {why}")
    return request.param


def backend_options(backend: str) -> dict:
    """The efface.open options a backend needs beside its location."""
    return {"origin": "memory"} if backend == "memory" else {}


@pytest.fixture(params=["numpy", "compiled"])
def scan_kernel(request, monkeypatch) -> Iterator[str]:
    """Runs a test with the byte scan's numpy versions, then with its compiled loops
    (efface.compiled): both must find and judge the same bytes."""
    from efface import compiled

    monkeypatch.setenv(compiled.KERNEL_ENV, request.param)
    compiled.reset()
    # the compiled loops are chosen up front, so that even a small test's scan runs them
    assert compiled.on() == (request.param == "compiled"), "numba should load and compile"
    yield request.param
    compiled.reset()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A directory path for one embedded store (created by efface.open)."""
    return tmp_path / "store"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def store_location(backend: str, store_path: Path) -> str:
    """What to pass to efface.open for a backend: a directory (``postgres``: the directory
    that stands for its database and is its cache directory, see ``PgStores``)."""
    if backend in ("sqlite", "memory", "http", "postgres"):
        return os.fspath(store_path)
    raise NotImplementedError(f"no test location for backend {backend!r}")  # pragma: no cover


@pytest.fixture(scope="package")
def pg_base() -> Iterator[Path]:
    # Not pytest's tmp_path: that lives under a 0700 directory the server's user cannot enter.
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="efface-pg-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="package")
def pg(pg_base: Path):
    """The PostgreSQL primary every test of the run shares (started on first use)."""
    from pgserver import PgUnavailable, start_primary, unavailable

    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as e:
        unavailable(f"psycopg 3 and its pool are not installed (pip install -e '.[postgres]'): {e}")
    try:
        server = start_primary(pg_base)
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    try:
        with server.connect() as conn:
            conn.execute(f"CREATE DATABASE {PG_TEMPLATE}")
        with server.connect(PG_TEMPLATE) as conn:
            for ext in ("vector", "pageinspect", "pg_walinspect"):
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        _make_migrated_template(server)
        yield server
    finally:
        server.stop()


PG_TEMPLATE = "efface_tpl"
"""The template database on ``pg``: the extensions, nothing of efface."""
PG_MIGRATED = "efface_tpl_hashing"
"""A copy of :data:`PG_TEMPLATE` with efface's schema migrated for the hashing embedder's
dimension: nothing else (no store secret, no keys; a store's first open makes those). The
``postgres`` backend's stores opened with ``embedder="hashing"`` in the default schema start
from a copy of it (see :class:`PgPool`). The migration from an empty database still runs in
every other store (``pg_db``, the crash tests, other embedders and schemas) and in
``tests/postgres/test_schema.py``."""


def _make_migrated_template(server) -> None:  # the template PgPool copies
    from efface.embed import HashingEmbedder
    from efface.origin.postgres import schema

    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {PG_MIGRATED} TEMPLATE {PG_TEMPLATE}")
    with server.connect(PG_MIGRATED) as conn:
        schema.migrate(conn, dim=HashingEmbedder().dim)


_SHAPE = """
SELECT 'rel', n.nspname || '.' || c.relname || ':' || c.relkind::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
UNION ALL SELECT 'schema', nspname FROM pg_namespace
UNION ALL SELECT 'ext', extname || ' ' || extversion FROM pg_extension
UNION ALL SELECT 'trigger', tgname FROM pg_trigger WHERE NOT tgisinternal
UNION ALL SELECT 'proc', p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND NOT EXISTS
  (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
UNION ALL SELECT 'acl', relname || coalesce(relacl::text, '') FROM pg_class WHERE relnamespace = 'efface'::regnamespace
ORDER BY 1, 2
"""
"""What a database holds besides its rows: its relations, schemas, extensions, triggers,
functions and efface's grants. A test's database goes back to :class:`PgPool` only if this is
still the template's."""


class PgPool:
    """Databases copied from :data:`PG_MIGRATED`, reused from test to test: when a test ends,
    its databases are emptied (every table of efface's schema truncated, its sequences
    restarted, the template's few rows put back) and handed to the next test, instead of a
    ``DROP DATABASE`` and a ``CREATE DATABASE`` (together about 0.3 s, 0.6 s on a loaded host,
    for each of ~600 tests). A database whose shape a test changed (:data:`_SHAPE`: a table, a
    schema, an extension, a grant) or that could not be emptied is dropped instead. What the
    emptied database keeps of the last test is what a dropped one leaves too: the server's WAL
    (shared by every database) and nothing in the database's files (a truncated table's old
    files are emptied at the commit and unlinked at the next checkpoint)."""

    def __init__(self, server) -> None:
        self.server = server
        self.free: list[str] = []
        with server.connect(PG_MIGRATED) as conn:
            self.shape = conn.execute(_SHAPE).fetchall()
            self.tables = [
                r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'efface' ORDER BY 1")
            ]
            self.sequences = [
                r[0]
                for r in conn.execute("SELECT sequencename FROM pg_sequences WHERE schemaname = 'efface' ORDER BY 1")
            ]
            self.rows = {t: [r[0] for r in conn.execute(f"SELECT to_jsonb(t) FROM efface.{t} t")] for t in self.tables}

    def take(self) -> str:
        import uuid

        if self.free:
            return self.free.pop()
        name = f"c_{uuid.uuid4().hex[:12]}"
        with self.server.connect() as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {PG_MIGRATED}")
        return name

    def give_back(self, name: str) -> None:
        """Empty ``name`` for the next test, or drop it if it cannot be."""
        from psycopg.types.json import Jsonb

        with self.server.connect() as conn:  # a store a test left open (or a process it started)
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        try:
            with self.server.connect(name) as conn:
                if conn.execute(_SHAPE).fetchall() != self.shape:
                    raise ValueError("the test changed the database's shape")
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '10s'")
                    conn.execute(f"TRUNCATE {', '.join(f'efface.{t}' for t in self.tables)} RESTART IDENTITY")
                    for seq in self.sequences:
                        conn.execute(f"ALTER SEQUENCE efface.{seq} RESTART")
                    for t, rows in self.rows.items():
                        for row in rows:
                            conn.execute(
                                f"INSERT INTO efface.{t} OVERRIDING SYSTEM VALUE"
                                f" SELECT * FROM jsonb_populate_record(NULL::efface.{t}, %s)",
                                (Jsonb(row),),
                            )
        except Exception:
            with self.server.connect() as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            return
        self.free.append(name)


@pytest.fixture(scope="package")
def pg_pool(pg) -> PgPool:
    """The ``postgres`` backend's reused databases (:class:`PgPool`) on ``pg``."""
    return PgPool(pg)


class PgStores:
    """The ``postgres`` backend's locations for one test: each store path the test opens
    stands for a database of its own on ``pg`` (created on first use, dropped at teardown), and
    is that store's ``cache_dir``, so ``reopen(store)`` (which opens ``store.path``) finds the
    same database again. One key-encryption key file per test."""

    def __init__(self, server, tmp: Path, pool: PgPool | None = None) -> None:
        import secrets

        from efface.origin.postgres.keys import KekFile

        self.server = server
        self.pool = pool
        self.pooled: set[str] = set()
        self.kek_file = tmp / "efface.kek"
        KekFile(self.kek_file).create(secrets.token_bytes(32))  # made here: no "back it up" warning per test
        self.urls: dict[str, str] = {}

    def url(self, path: str, template: str = PG_TEMPLATE) -> str:
        """The database for ``path``, created from ``template`` on first use."""
        import uuid

        if path not in self.urls:
            if template == PG_MIGRATED and self.pool is not None:
                name = self.pool.take()
                self.pooled.add(name)
            else:
                name = f"c_{uuid.uuid4().hex[:12]}"
                with self.server.connect() as conn:
                    conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
            self.urls[path] = self.server.url(name)
        return self.urls[path]

    def options(self, path: str) -> dict:
        return {"kek_file": os.fspath(self.kek_file), "cache_dir": path}

    def drop(self) -> None:
        """Drop the test's databases (those of :class:`PgPool` go back to it, emptied)."""
        names = [url.rsplit("/", 1)[1] for url in self.urls.values()]
        self.urls.clear()
        for name in names:
            if name in self.pooled and self.pool is not None:
                self.pool.give_back(name)
                continue
            with self.server.connect() as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.pooled.clear()


@pytest.fixture(scope="module")
def http_contract_server(tmp_path_factory):
    """The ``http`` backend's server, one per test module (see ``served.SharedServer``)."""
    from served import SharedServer

    s = SharedServer(tmp_path_factory.mktemp("http-server") / "keys.db")
    yield s
    s.close()


@pytest.fixture
def open_store(request, backend: str, store_path: Path, clock: FakeClock) -> Callable[..., efface.Store]:
    """Factory: open (or reopen) a store with the test defaults; every store it opened is
    closed at teardown (close() is idempotent, so tests may close stores themselves)."""
    opened: list[efface.Store] = []
    pg_stores = (
        PgStores(request.getfixturevalue("pg"), store_path.parent, request.getfixturevalue("pg_pool"))
        if backend == "postgres"
        else None
    )

    def _open(path: str | os.PathLike | None = None, **options) -> efface.Store:
        options.setdefault("embedder", "hashing")
        options.setdefault("background", False)
        options.setdefault("clock", clock)
        for name, value in backend_options(backend).items():
            options.setdefault(name, value)
        target = store_location(backend, store_path) if path is None else os.fspath(path)
        s: Any
        if pg_stores is not None:
            for name, value in pg_stores.options(os.path.abspath(target)).items():
                options.setdefault(name, value)
            migrated = options["embedder"] == "hashing" and "schema" not in options
            target = pg_stores.url(os.path.abspath(target), PG_MIGRATED if migrated else PG_TEMPLATE)
            s = efface.open(target, **options)
        elif backend == "http":
            from served import Served, TenantRouter

            shared = request.getfixturevalue("http_contract_server")
            s = TenantRouter(Served(target, shared=shared, **options))
        else:
            s = efface.open(target, **options)
        opened.append(s)
        return s

    yield _open
    errors = []
    for s in reversed(opened):
        try:
            s.close()
        except Exception as exc:  # close every store even if one fails, then report
            errors.append(exc)
    if pg_stores is not None:
        pg_stores.drop()
    if errors:
        raise errors[0]


@pytest.fixture
def store(open_store) -> efface.Store:
    return open_store()


@pytest.fixture
def reopen(open_store, backend: str) -> Callable[..., efface.Store]:
    """``reopen(store, **options)``: close ``store`` and open the same store again with the
    test defaults (options override them)."""

    def _reopen(s: efface.Store, **options) -> efface.Store:
        if backend not in ("sqlite", "http", "postgres"):
            pytest.skip(f"{backend} origin: nothing persists across reopen")
        s.close()
        return open_store(s.path, **options)

    return _reopen


def behind(store):
    """The embedded store behind ``store``: the store itself, or, on the ``http`` backend, the
    one the server serves. Helpers that read behind the store's API (the origin's files and
    tables) read there, as an operator on the server's machine would; the calls under test
    still go through the client."""
    served = getattr(store, "served", None)
    return store if served is None else served.store


def on_postgres(store) -> bool:
    """Whether ``store`` runs on the PostgreSQL origin (helpers read its database instead)."""
    from efface.origin.postgres.origin import PostgresOrigin

    return isinstance(behind(store)._origin, PostgresOrigin)


def pg_rows(store, sql: str, args: tuple = ()) -> list[tuple]:
    """Rows of ``sql`` (``{s}`` for efface's schema) on a PostgreSQL store's database, read
    (or written) on a connection of its own, committed at once."""
    origin = behind(store)._origin
    with origin._pool.connection() as conn:
        cur = conn.execute(sql.format(s=origin._s), args)
        return cur.fetchall() if cur.description else []


def raw_db(store):
    """A read-only connection to a SQLite store's origin file, for tests of what the file holds
    (bytes, FTS rows, raw tables): the store's own objects are not touched."""
    import apsw

    store = behind(store)
    if on_postgres(store):
        pytest.skip("postgres origin: the test reads the SQLite origin's file (origin.db)")
    if getattr(store._origin, "physical", None) is None:
        pytest.skip("memory origin: there is no origin file to read")
    conn = apsw.Connection(os.path.join(store.path, "origin.db"), flags=apsw.SQLITE_OPEN_READWRITE)
    conn.setbusytimeout(5000)
    return conn


def in_memory(store) -> bool:
    """Whether ``store`` runs on the memory origin (no file: helpers read its state instead)."""
    return getattr(behind(store)._origin, "physical", None) is None and not on_postgres(store)


def record_id_of(store, tenant: str, key: str) -> int | None:
    """The origin's record id for (tenant, key), read behind the store's API."""
    store = behind(store)
    if on_postgres(store):
        t = store._tenant(tenant)  # the key is stored as its keyed hash (origin/postgres/names.py)
        rows = pg_rows(
            store, "SELECT id FROM {s}.records WHERE tenant = %s AND key = %s", (t, store._origin._sealer.key_h(t, key))
        )
        return None if not rows else int(rows[0][0])
    if in_memory(store):
        return store._origin._state.by_key.get((store._tenant(tenant), key))
    row = (
        raw_db(store)
        .execute("SELECT id FROM records WHERE tenant=? AND key=?", (store._tenant(tenant), key))
        .fetchone()
    )
    return None if row is None else row[0]


def fts_ids(store, word: str) -> list[int]:
    """Record ids the full-text index itself holds ``word`` for (its rows, not a recall)."""
    store = behind(store)
    if on_postgres(store):
        text = store._origin.text
        text.refresh()
        return text._post.matches([word]).tolist()
    if in_memory(store):
        return sorted(store._origin._state.postings.get(word, ()))
    return sorted(r[0] for r in raw_db(store).execute("SELECT rowid FROM fts WHERE fts MATCH ?", (f'"{word}"',)))


def ledger_rows(store) -> list[dict]:
    """The ledger as stored (each row as a dict), read behind the store's API."""
    store = behind(store)
    cols = ("seq", "at", "kind", "handle", "body", "prev", "hash")
    if on_postgres(store):
        rows = pg_rows(store, f"SELECT {', '.join(cols)} FROM {{s}}.ledger ORDER BY seq")
        return [dict(zip(cols, r, strict=True)) for r in rows]
    if in_memory(store):
        return [dict(e) for e in store._origin._state.ledger]
    rows = raw_db(store).execute(f"SELECT {', '.join(cols)} FROM ledger ORDER BY seq")
    return [dict(zip(cols, r, strict=True)) for r in rows]


def receipt_rows(store) -> list[list]:
    """Every stored receipt row, read behind the store's API."""
    store = behind(store)
    if on_postgres(store):
        return [
            list(r)
            for r in pg_rows(store, "SELECT handle, epoch, kind, tenant_h, created_at, body::text FROM {s}.receipts")
        ]
    if in_memory(store):
        return [[h, *row] for h, row in store._origin._state.receipts.items()]
    return [list(r) for r in raw_db(store).execute("SELECT * FROM receipts")]


def set_ledger_body(store, seq: int, body: str) -> None:
    """Rewrite one stored ledger entry's body behind the store's back (tampering)."""
    store = behind(store)
    if on_postgres(store):
        pg_rows(store, "UPDATE {s}.ledger SET body = %s WHERE seq = %s", (body, seq))
        return
    if in_memory(store):
        store._origin._replace(
            lambda s: s.ledger.__setitem__(
                slice(None), [{**e, "body": body} if e["seq"] == seq else e for e in s.ledger]
            )
        )
        return
    conn = raw_db(store)
    with conn:
        conn.execute("UPDATE ledger SET body=? WHERE seq=?", (body, seq))


def ann_vectors(store, tenant: str) -> int:
    """Record vectors the store's ANN index holds for ``tenant`` (public stats)."""
    return store.stats(tenant=tenant)["ann_vectors"]


@pytest.fixture
def open_raw(tmp_path):
    """``efface.open`` on ``tmp_path / name`` with the hashing embedder and no background
    compactor (the test drives it); every store it opened is closed at teardown."""
    opened: list[efface.Store] = []

    def _open(name: str = "s", **options) -> efface.Store:
        options.setdefault("background", False)
        s = efface.open(tmp_path / name, embedder="hashing", **options)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


def mount(*args: str) -> str | None:
    """Run mount(8); None when it worked, else why not (the reason a test skips with)."""
    if os.geteuid() != 0:
        return "mounting needs root"
    if shutil.which("mount") is None:
        return "no mount(8) here"
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount {' '.join(args[:2])} is not allowed here: {done.stderr.strip()}"


def unmount(at: str) -> None:
    """Unmount, lazily if something still holds a file there (code that leaks a handle must
    not leave a mount behind)."""
    if subprocess.run(["umount", at], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", at], check=True)


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 3 MiB tmpfs, unmounted at teardown (skips where mounting is not allowed)."""
    at = tmp_path / "disk"
    at.mkdir()
    why = mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", os.fspath(at))
    if why is not None:
        pytest.skip(why)
    yield at
    unmount(os.fspath(at))


@pytest.fixture
def served(tmp_path: Path):
    """A real efface server on a free loopback port over a fresh SQLite store (hashing
    embedder, the compactor running), with its key ring: see ``served.py``."""
    from served import Served

    s = Served(tmp_path / "served-store", embedder="hashing", access_log=True)
    yield s
    s.close()
