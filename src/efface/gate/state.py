"""The gate's memory of erasures: one small SQLite file that survives an agent restart.

It holds no personal data. Scopes, subjects, keys and texts enter it only as keyed hashes
(HMAC-SHA256 under a random secret created with the file and kept in it), so the file says
*that* something in a scope was erased and lets the gate recognise it again, never *what*.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ..keyed_hash import keyed_hash

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS erasures(
    id INTEGER PRIMARY KEY,
    scope_h TEXT NOT NULL,
    subject_h TEXT,
    requested_at REAL NOT NULL,
    acknowledged_at REAL,
    epoch INTEGER,
    window_s REAL,
    evidence_but_window INTEGER NOT NULL DEFAULT 0,
    settled_at REAL,
    settled_by TEXT
);
CREATE INDEX IF NOT EXISTS erasures_unsettled ON erasures(scope_h) WHERE settled_at IS NULL;
CREATE INDEX IF NOT EXISTS erasures_epoch ON erasures(scope_h, epoch);
CREATE TABLE IF NOT EXISTS erased_keys(
    erasure_id INTEGER NOT NULL REFERENCES erasures(id),
    key_h TEXT NOT NULL,
    PRIMARY KEY (erasure_id, key_h)
);
CREATE TABLE IF NOT EXISTS rewrites(
    scope_h TEXT NOT NULL,
    key_h TEXT NOT NULL,
    text_h TEXT NOT NULL,
    PRIMARY KEY (scope_h, key_h, text_h)
);
"""


@dataclass(frozen=True)
class Erasure:
    """One forget the gate recorded, as the state file keeps it."""

    id: int
    scope_h: str
    subject_h: str | None
    requested_at: float
    acknowledged_at: float | None
    """None when the tool never answered (it raised, or the agent died mid-call)."""
    epoch: int | None
    window_s: float | None
    """The tool's declared propagation bound (None: none or unbounded)."""
    evidence_but_window: bool
    """The acknowledgement met every requirement of evidence except the elapsed window."""
    key_hs: frozenset[str]
    settled_at: float | None = None
    """When it settled (None: not yet); only :meth:`GateState.get` fills it."""
    settled_by: str | None = None
    """How: ``epoch``, ``probe``, ``evidence``, ``verified`` or ``released``."""


class GateState:
    """The erasure state file. Every change is committed durably before it returns."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._c.execute("PRAGMA journal_mode=WAL")
        # FULL: a forget is acknowledged to the agent only after its record is on disk.
        self._c.execute("PRAGMA synchronous=FULL")
        self._c.execute("PRAGMA secure_delete=ON")
        with self._lock:
            self._c.executescript(_SCHEMA)
            row = self._c.execute("SELECT v FROM meta WHERE k='secret'").fetchone()
            if row is None:
                os.chmod(self.path, 0o600)  # the secret is in here: readable by its owner only
                self._c.execute("INSERT OR IGNORE INTO meta(k, v) VALUES ('secret', ?)", (secrets.token_hex(32),))
                row = self._c.execute("SELECT v FROM meta WHERE k='secret'").fetchone()
        self._secret = bytes.fromhex(row[0])

    def hash(self, kind: str, *parts: str) -> str:
        """A keyed hash of an identifying value, stable for this state file."""
        return keyed_hash(self._secret, kind, *parts)

    def begin(self, scope_h: str, subject_h: str | None, key_hs: Iterable[str], now: float) -> int:
        """Record a forget before the tool is called, so a crash during the call leaves the
        scope unsettled rather than forgotten."""
        with self._lock:
            self._c.execute("BEGIN IMMEDIATE")
            try:
                cur = self._c.execute(
                    "INSERT INTO erasures(scope_h, subject_h, requested_at) VALUES (?, ?, ?)", (scope_h, subject_h, now)
                )
                eid = cur.lastrowid
                assert eid is not None  # an INSERT into a rowid table always sets it
                key_hs = list(key_hs)
                self._c.executemany(
                    "INSERT OR IGNORE INTO erased_keys(erasure_id, key_h) VALUES (?, ?)", [(eid, k) for k in key_hs]
                )
                # A rewrite's text is what this new forget erases now: no longer an excuse for a hit.
                # Without keys (a subject forget) every rewrite in the scope is dropped: fail closed.
                if key_hs:
                    self._c.executemany(
                        "DELETE FROM rewrites WHERE scope_h=? AND key_h=?", [(scope_h, k) for k in key_hs]
                    )
                else:
                    self._c.execute("DELETE FROM rewrites WHERE scope_h=?", (scope_h,))
                self._c.execute("COMMIT")
            except BaseException:
                self._c.execute("ROLLBACK")
                raise
        return eid

    def acknowledge(
        self,
        eid: int,
        *,
        acknowledged_at: float,
        epoch: int | None,
        window_s: float | None,
        evidence_but_window: bool,
        key_hs: Iterable[str],
    ) -> None:
        """Add what the tool's acknowledgement said."""
        with self._lock:
            self._c.execute("BEGIN IMMEDIATE")
            try:
                self._c.execute(
                    "UPDATE erasures SET acknowledged_at=?, epoch=?, window_s=?, evidence_but_window=? WHERE id=?",
                    (acknowledged_at, epoch, window_s, int(evidence_but_window), eid),
                )
                self._c.executemany(
                    "INSERT OR IGNORE INTO erased_keys(erasure_id, key_h) VALUES (?, ?)", [(eid, k) for k in key_hs]
                )
                self._c.execute("COMMIT")
            except BaseException:
                self._c.execute("ROLLBACK")
                raise

    def unsettled(self, scope_h: str | None = None) -> list[Erasure]:
        """Erasures not settled yet, oldest first (in one scope, or all)."""
        with self._lock:
            where = " WHERE settled_at IS NULL" + (" AND scope_h=?" if scope_h else "")
            args = (scope_h,) if scope_h else ()
            rows = self._c.execute(
                "SELECT id, scope_h, subject_h, requested_at, acknowledged_at, epoch, window_s, evidence_but_window"
                " FROM erasures" + where + " ORDER BY id",
                args,
            ).fetchall()
            keys: dict[int, set[str]] = {}
            for eid, key_h in self._c.execute(
                "SELECT erasure_id, key_h FROM erased_keys WHERE erasure_id IN (SELECT id FROM erasures" + where + ")",
                args,
            ):
                keys.setdefault(eid, set()).add(key_h)
        return [
            Erasure(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), frozenset(keys.get(r[0], ()))) for r in rows
        ]

    def get(self, eid: int) -> Erasure | None:
        """One erasure by id, settled or not, with when and how it settled."""
        with self._lock:
            r = self._c.execute(
                "SELECT id, scope_h, subject_h, requested_at, acknowledged_at, epoch, window_s, evidence_but_window,"
                " settled_at, settled_by FROM erasures WHERE id=?",
                (eid,),
            ).fetchone()
            if r is None:
                return None
            keys = frozenset(k for (k,) in self._c.execute("SELECT key_h FROM erased_keys WHERE erasure_id=?", (eid,)))
        return Erasure(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), keys, r[8], r[9])

    def floor(self, scope_h: str) -> int | None:
        """The newest erasure epoch recorded in a scope, settled or not (None: no epoch)."""
        with self._lock:
            return self._c.execute("SELECT max(epoch) FROM erasures WHERE scope_h=?", (scope_h,)).fetchone()[0]

    def settle(self, ids: Iterable[int], now: float, by: str) -> None:
        """Mark erasures settled (``by``: ``epoch``, ``probe``, ``evidence``, ``verified`` or ``released``)."""
        ids = list(ids)
        if not ids:
            return
        with self._lock:
            self._c.execute("BEGIN IMMEDIATE")
            try:
                self._c.executemany(
                    "UPDATE erasures SET settled_at=?, settled_by=? WHERE id=? AND settled_at IS NULL",
                    [(now, by, i) for i in ids],
                )
                self._c.execute("COMMIT")
            except BaseException:
                self._c.execute("ROLLBACK")
                raise

    def add_rewrite(self, scope_h: str, key_h: str, text_h: str) -> None:
        """Remember that a key was written again through the gate (with this text)."""
        with self._lock:
            self._c.execute(
                "INSERT OR IGNORE INTO rewrites(scope_h, key_h, text_h) VALUES (?, ?, ?)", (scope_h, key_h, text_h)
            )

    def rewrites(self, scope_h: str) -> set[tuple[str, str]]:
        """(key hash, text hash) of every write made through the gate to an erased key."""
        with self._lock:
            return set(self._c.execute("SELECT key_h, text_h FROM rewrites WHERE scope_h=?", (scope_h,)).fetchall())

    def close(self) -> None:
        with self._lock:
            self._c.close()
