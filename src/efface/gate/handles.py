"""The gate proxy's handles: one per delete it forwarded, kept in the gate's state file.

A handle (``gph_...``) names one erasure the gate recorded. Beside it the file keeps only
what holds no personal data: the upstream tool's name, the erasure's id (whose scope is a
keyed hash), an efface receipt's handle when the upstream gave one, and the best level a
verification reached. Never a tool's arguments or answer.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from dataclasses import dataclass

_SCHEMA = """
CREATE TABLE IF NOT EXISTS proxy_handles(
    handle TEXT PRIMARY KEY,
    erasure_id INTEGER NOT NULL,
    tool TEXT NOT NULL,
    created_at REAL NOT NULL,
    upstream_handle TEXT,
    verified_level TEXT,
    verified_at REAL
);
"""


@dataclass(frozen=True)
class ProxyHandle:
    """One delete the proxy forwarded."""

    handle: str
    erasure_id: int
    tool: str
    """The upstream tool that deleted."""
    created_at: float
    upstream_handle: str | None
    """The upstream's own verification handle (an efface receipt's), when it gave one."""
    verified_level: str | None
    """The level the upstream's own verification reached (``unreadable``, ``erased``), if any."""
    verified_at: float | None


class HandleBook:
    """The handles table, in the gate's state file (its own connection; WAL lets both share it)."""

    def __init__(self, path: str | os.PathLike):
        self._lock = threading.Lock()
        self._c = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False, timeout=30)
        self._c.execute("PRAGMA synchronous=FULL")  # a handle is given out only once it is on disk
        self._c.executescript(_SCHEMA)

    def add(self, erasure_id: int, tool: str, now: float, upstream_handle: str | None) -> str:
        handle = "gph_" + secrets.token_urlsafe(16)
        with self._lock:
            self._c.execute(
                "INSERT INTO proxy_handles(handle, erasure_id, tool, created_at, upstream_handle)"
                " VALUES (?, ?, ?, ?, ?)",
                (handle, erasure_id, tool, now, upstream_handle),
            )
        return handle

    def get(self, handle: str) -> ProxyHandle | None:
        with self._lock:
            row = self._c.execute(
                "SELECT handle, erasure_id, tool, created_at, upstream_handle, verified_level, verified_at"
                " FROM proxy_handles WHERE handle=?",
                (handle,),
            ).fetchone()
        return None if row is None else ProxyHandle(*row)

    def verified(self, handle: str, level: str, now: float) -> None:
        with self._lock:
            self._c.execute(
                "UPDATE proxy_handles SET verified_level=?, verified_at=? WHERE handle=?", (level, now, handle)
            )

    def close(self) -> None:
        with self._lock:
            self._c.close()
