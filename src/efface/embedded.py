"""The embedded store: one directory, locked by one process, over an origin built here.

``efface.open(dir)`` lands here. The directory holds the origin (``origin.db`` for the SQLite
origin) and the read paths' files (``ann/``); an advisory lock keeps a second process out
(it gets :class:`~efface.errors.StoreLocked`). ``origin="memory"`` builds the in-memory
reference origin instead (nothing of it survives ``close()``): the contract tests run every
behaviour on both.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from typing import Any

from .dirs import lock_dir
from .errors import InvalidInput, StoreDamaged
from .faults import os_faults
from .origin.base import Origin
from .store import Store

ORIGINS = ("sqlite", "memory")


def open_embedded(path: str | os.PathLike, embedder: Any = None, *, origin: str = "sqlite", **options: Any) -> Store:
    if origin not in ORIGINS:
        raise InvalidInput(f"origin must be one of {', '.join(ORIGINS)}")
    root = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if os.path.exists(root) and not os.path.isdir(root):
        raise InvalidInput("the store path exists and is not a directory: give a directory path")
    above = os.path.dirname(root)
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if not os.path.isdir(above):  # was StoreDamaged ("restore the store from a backup"): nothing is damaged
        raise InvalidInput("a part of the store path is a file, not a directory: give a directory path")
    lockfile = lock_dir(
        root,
        "this store is open already (in another process, or another handle in this one): "
        "close it (or stop `efface serve`) and try again",
    )

    def release() -> None:
        try:
            if origin == "memory":
                # Its index files die with it: left behind, they would look like a SQLite
                # store's indexes whose origin.db is gone (refused by _check_layout).
                shutil.rmtree(os.path.join(root, "ann"), ignore_errors=True)
            fcntl.flock(lockfile, fcntl.LOCK_UN)
        finally:
            lockfile.close()

    o: Origin | None = None
    try:
        with os_faults():
            _check_layout(root, origin)
        if origin == "memory":
            from .origin.memory import MemoryOrigin

            # An earlier memory store's index files: orphaned (their origin is gone), never served.
            shutil.rmtree(os.path.join(root, "ann"), ignore_errors=True)
            o = MemoryOrigin()
        else:
            from .origin.sqlite import SQLiteOrigin

            with os_faults():
                o = SQLiteOrigin(os.path.join(root, "origin.db"))
        assert o is not None
        return Store(root, embedder, origin=o, on_close=release, **options)
    except BaseException:
        if o is not None:
            o.close()
        release()
        raise


def _check_layout(root: str, origin: str) -> None:
    """Refuse a directory whose parts do not belong together, before anything is written
    into it: a new origin next to old index files would start an empty store with a new
    secret and vectors nobody can erase or verify."""
    ann = os.path.join(root, "ann")
    if os.path.lexists(ann) and not os.path.isdir(ann):
        raise StoreDamaged(
            "the store is damaged: its 'ann' entry is a file, not the index directory; move that file "
            "out of the store directory (efface rebuilds the index from origin.db)"
        )
    if origin != "sqlite":
        return
    db = os.path.join(root, "origin.db")
    if os.path.lexists(db) and not os.path.isfile(db):
        raise StoreDamaged("the store is damaged: its origin.db is not a file; restore the store from a backup copy")
    if os.path.isfile(db) and os.path.getsize(db) > 0:
        return
    leftovers = os.path.isdir(ann) and any(name.endswith(".usearch") for name in os.listdir(ann))
    wal = os.path.join(root, "origin.db-wal")
    if leftovers or (os.path.isfile(wal) and os.path.getsize(wal) > 0):
        raise StoreDamaged(
            "the store is damaged: its origin.db is missing or empty, but the files built from it remain "
            "(ann/, origin.db-wal); restore origin.db from a backup copy of the store. Opening it would start "
            "an empty store with a new secret beside vectors nobody could erase or verify; to start afresh "
            "on purpose, use a new directory"
        )
