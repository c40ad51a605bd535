"""A store on PostgreSQL: ``efface.open("postgresql://...", kek_file=...)`` lands here.

Builds the PostgreSQL origin (:mod:`efface.origin.postgres`) and the store over it. Unlike
the embedded store, nothing is locked: any number of efface processes may open one
database. Recall's vectors are searched in the database (pgvector's index:
:mod:`efface.paths.indexed`); what each process keeps for itself (a little meta, its lock)
lives in a local directory of its own, ``cache_dir``:

* given, it is used as is, and kept at close (a later open with the same directory starts
  from its files, checked against the database's change log); it is locked while open
  (``efface.lock``, as an embedded store's directory): a second process naming it gets
  :class:`~efface.errors.StoreLocked`, and should name a directory of its own;
* not given, it is ``$XDG_CACHE_HOME/efface/postgres/<database>-<pid>-<random>`` (or
  ``~/.cache/...``), where ``<database>`` is a hash of the connection's host, port, database,
  user and schema (never its password); it is removed at close.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
from typing import Any

from .dirs import lock_dir
from .embed import Embedder, for_store
from .errors import InvalidInput, OriginUnreachable, StoreUnwritable
from .origin.base import Origin
from .origin.postgres import schema as pg_schema
from .store import Store

URL_SCHEMES = ("postgresql://", "postgres://")


def check_url(url: str) -> None:
    """:class:`InvalidInput` unless ``url`` parses as a PostgreSQL connection string; the
    message never repeats it (it may hold a password), nor psycopg's, which may."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as e:
        raise InvalidInput(
            f"the PostgreSQL URL is malformed ({type(e).__name__}): write it as "
            "postgresql://user:password@host:port/database (a query string may add libpq's own options only)"
        ) from None


def default_cache_dir(url: str, schema_name: str) -> str:
    """Where a process keeps its derived files of the store at ``url`` (see the module docstring)."""
    from psycopg.conninfo import conninfo_to_dict

    parts = {k: v for k, v in conninfo_to_dict(url).items() if k in ("host", "port", "dbname", "user")}
    ident = hashlib.sha256(repr((sorted(parts.items()), schema_name)).encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "efface", "postgres", f"{ident}-{os.getpid()}-{secrets.token_hex(4)}")


def _recorded_embedder(url: str, schema_name: str) -> str | None:
    import psycopg

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as e:
        # psycopg's message names the host and may name the user; never the URL, which may hold a password
        raise OriginUnreachable(
            f"the PostgreSQL database could not be reached ({type(e).__name__}): check the URL's host, port, "
            "database and credentials, and that the server runs, then try again"
        ) from None
    with conn:
        if pg_schema.schema_version(conn, schema_name) is None:
            return None
        row = conn.execute(f"SELECT v FROM {schema_name}.meta WHERE k = 'embedder'").fetchone()
        return None if row is None else str(row[0])


def _first_comer(url: str, schema_name: str, embedder: str) -> None:
    """Record the store's embedder if no process has yet, the first one's winning (servers
    started together on a new database would otherwise each record theirs). The store's
    keyed-hash secret is not here: it lives in the KEK file, made under the file's lock
    (:mod:`efface.origin.postgres.hashsecret`)."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            f"INSERT INTO {schema_name}.meta(k, v) VALUES ('embedder', %s) ON CONFLICT (k) DO NOTHING", (embedder,)
        )


def _local(path: str | os.PathLike[str]) -> str:
    """A local path option made absolute, a leading ``~`` expanded."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def open_postgres(
    url: str,
    embedder: str | Embedder | None = None,
    *,
    kek_file: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    schema: str = pg_schema.DEFAULT_SCHEMA,
    data_dir: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Store:
    """Open (or create) the store in the PostgreSQL database at ``url``. ``kek_file``: the
    key-encryption key file (else ``EFFACE_KEK_FILE``; created on a store's first use, with
    a warning to back it up). ``cache_dir``: this process's local directory (module docstring).
    ``data_dir``: the server's data directory as this process reads it (else
    ``EFFACE_PG_DATA_DIR``, else ``SHOW data_directory`` where the role may), for the byte scan
    that proves ``erased`` (docs/evidence-ladder.md); without one readable, ``verify`` says per
    copy ``shredded`` or ``cannot_verify``. Other options as for the embedded store."""
    if "origin" in options:
        raise InvalidInput("a postgresql:// store is its own origin: leave origin= out")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as e:
        raise StoreUnwritable(
            f"a PostgreSQL store needs psycopg 3 and its pool (pip install 'efface[postgres]'): {e}"
        ) from None
    from .origin.postgres.origin import DATA_DIR_ENV, PostgresOrigin

    check_url(url)
    name = pg_schema.check_name(schema)
    if data_dir is None:
        data_dir = os.environ.get(DATA_DIR_ENV) or None  # expanded as the option is
    chosen = for_store(embedder, _recorded_embedder(url, name))
    owned = cache_dir is None
    root = default_cache_dir(url, name) if cache_dir is None else _local(cache_dir)
    lockfile = lock_dir(
        root, "another process uses this cache directory for its store: give each process its own cache_dir", mode=0o700
    )

    def release() -> None:
        try:
            if owned:
                shutil.rmtree(root, ignore_errors=True)
            fcntl.flock(lockfile, fcntl.LOCK_UN)
        finally:
            lockfile.close()

    o: Origin | None = None
    try:
        o = PostgresOrigin(
            url,
            dim=chosen.dim,
            kek_file=kek_file,  # a leading ~ is expanded where the file is named (kekring.resolve_path)
            local_dir=root,
            schema_name=name,
            data_dir=None if data_dir is None else _local(data_dir),
        )
        _first_comer(url, name, chosen.name)
        return Store(root, chosen, origin=o, on_close=release, **options)
    except BaseException:
        if o is not None:
            o.close()
        release()
        raise
