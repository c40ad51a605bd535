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

from .errors import InvalidInput, StoreLocked
from .origin.base import Origin
from .store import Store

ORIGINS = ("sqlite", "memory")


def open_embedded(path: str | os.PathLike, embedder: Any = None, *, origin: str = "sqlite", **options: Any) -> Store:
    if origin not in ORIGINS:
        raise InvalidInput(f"origin must be one of {', '.join(ORIGINS)}")
    root = os.path.abspath(os.fspath(path))
    if os.path.exists(root) and not os.path.isdir(root):
        raise InvalidInput("the store path exists and is not a directory: give a directory path")
    os.makedirs(root, exist_ok=True)
    lockfile = open(os.path.join(root, "efface.lock"), "a+")  # noqa: SIM115 - held until close()
    try:
        fcntl.flock(lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lockfile.close()
        raise StoreLocked(
            "another process has this store open; close it (or stop `efface serve`) and try again"
        ) from None

    def release() -> None:
        try:
            fcntl.flock(lockfile, fcntl.LOCK_UN)
        finally:
            lockfile.close()

    o: Origin | None = None
    try:
        if origin == "memory":
            from .origin.memory import MemoryOrigin

            # An earlier memory store's index files: orphaned (their origin is gone), never served.
            shutil.rmtree(os.path.join(root, "ann"), ignore_errors=True)
            o = MemoryOrigin()
        else:
            from .origin.sqlite import SQLiteOrigin

            o = SQLiteOrigin(os.path.join(root, "origin.db"))
        assert o is not None
        return Store(root, embedder, origin=o, on_close=release, **options)
    except BaseException:
        if o is not None:
            o.close()
        release()
        raise
