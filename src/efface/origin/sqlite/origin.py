"""The embedded origin: one SQLite file in WAL mode with ``secure_delete=ON``.

We use apsw rather than the standard library's sqlite3 because apsw bundles a current
SQLite (3.54 here): FTS5's ``contentless_delete`` and ``secure-delete`` need >= 3.43,
and the Python build on this machine links 3.40.

:class:`SQLiteOrigin` owns the file's connections (:mod:`.conn`: one writer under a lock, a
reader per thread) and hands them to its parts: the word index (:mod:`.text`), the
byte-level capability (:mod:`.physical`) and the copy of liveness (:mod:`.liveness`). Its
reads are :mod:`.reads`; here are its write transactions, group commit, and the wiring.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from ...dirs import fsync_dir
from ...errors import EffaceError, StoreUnwritable
from ...model import Check
from ...vectors import read_many
from ..base import require_epoch
from .conn import WAL_AUTOCHECKPOINT, Connections
from .edge import edge, guarded, savepoint
from .liveness import Liveness, drawn
from .physical import SQLitePhysical
from .reads import SQLiteReads
from .rows import NOT_QUARANTINED
from .schema import _SCHEMA, FTS_SCHEMA, PATH_EVIDENCE, SCHEMA_VERSION
from .text import SQLiteText
from .tx import SQLiteTx

__all__ = ["GROUP_LOST", "WAL_AUTOCHECKPOINT", "SQLiteOrigin", "fsync_dir"]

GROUP_LOST = (
    "SQLite rolled back the transaction these writes shared (a full disk or an I/O error): none of them "
    "was committed; free space or fix the disk and send them again"
)


@guarded
class SQLiteOrigin(SQLiteReads):
    """The origin on one SQLite file (see :mod:`.conn` for its threads). Its errors leave it
    as efface's (:mod:`.edge`): a damaged file as ``StoreDamaged``, a full disk or a
    read-only directory as ``StoreUnwritable``."""

    def __init__(self, path: str):
        self._members: list[SQLiteTx] = []
        """The members of the open group (:meth:`group`) that committed their savepoints."""
        self._alone = self._abandoned = False
        """Whether the open group has one member (no savepoint), and whether it raised."""
        new = not os.path.exists(path)
        super().__init__(Connections(path))
        self.write_lock = self._db.write_lock
        """Held for every use of the writer connection."""
        self._c: Any = self._db.writer
        try:
            self._setup(new)
        except BaseException:  # a damaged or unwritable file: leave no connection open behind
            self.close()
            raise

    def _setup(self, new: bool) -> None:
        path = self.path
        self._db.configure()
        with savepoint(self._c):
            self._c.execute(_SCHEMA)
            self._c.execute(FTS_SCHEMA)
            self._c.execute(PATH_EVIDENCE)
            # A delete takes the row's entries out of the index pages at once (see .text and
            # .separators), so an erasure rewrites the pages it touched instead of merging the
            # whole index. Set once: an open that writes nothing can still serve reads on a
            # full disk.
            if self._c.execute("SELECT 1 FROM fts_config WHERE k='secure-delete' AND v=1").fetchone() is None:
                self._c.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 1)")
        if new:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
        schema = self.meta_get("schema")
        if schema is None:
            self.meta_set("schema", SCHEMA_VERSION)
        elif schema != SCHEMA_VERSION:
            self.close()
            raise EffaceError(
                f"this store's schema is version {schema}, this efface needs {SCHEMA_VERSION} "
                "(tenant names are no longer kept in clear): back it up with the efface that made it, "
                "and restore into a new store"
            )
        self.physical = SQLitePhysical(self._db, self._vacuumed)
        """Byte-level capabilities (checkpoint, index rebuild, live regions): see :mod:`.physical`."""
        self.text = SQLiteText(self._db, self.live_ids)
        """The full-text word index (FTS5 in this file): see :mod:`.text`."""
        self.text.fold_index()
        self.text.start_postings()
        (top,) = self._r().execute("SELECT coalesce(max(id), 0) FROM records").fetchone()
        self.liveness = Liveness(path, self._c, self.write_lock, top)
        """Which records are live, in memory: recall's first check (:mod:`.liveness`)."""

    def _vacuumed(self) -> None:
        """After a VACUUM (:meth:`.SQLitePhysical.rewrite`): it dropped the writer's TEMP
        objects, the triggers that keep the copy of liveness up."""
        self.liveness.install()

    @property
    def writer(self) -> Any:
        """The writer connection; use it only with :attr:`write_lock` held."""
        return self._c

    def vector_sample(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """A few of ``tenant``'s live records' vectors, from the copy of liveness in memory
        (:meth:`.liveness.Liveness.sample`); while it loads (a large store's first seconds
        after it opens), the same draw read here (:meth:`_sample_here`). Recall judges its
        vector leg's vote against this sample: with none while the copy loaded, the same
        store answered a sixth of the queries differently in its first seconds (all of
        Debian, MiniLM: bench/experiments/same_store_forced.py)."""
        return self.liveness.sample(tenant, purpose, now, n, lambda: self._sample_here(tenant, purpose, now, n))

    def _sample_here(self, tenant: str, purpose: str, now: float, n: int) -> np.ndarray:
        """:meth:`vector_sample` from the file, in this thread's snapshot, while the copy loads:
        the ids the copy would hold for ``tenant`` (records with a claim, not quarantined), the
        same draw of them (:func:`.liveness.drawn`), those live for ``purpose`` at ``now``, and
        their vectors at the half precision the copy holds them in. The copy keeps it until the
        next commit, as it keeps its own draws (one read of the tenant's ids: about 40 ms in all at
        60k records, once per commit while the copy loads)."""
        with self.snapshot():
            (ids,) = (
                self._r()
                .execute(
                    f"SELECT json_group_array(r.id) FROM records r WHERE r.tenant=? AND {NOT_QUARANTINED}"
                    " AND EXISTS (SELECT 1 FROM claims c WHERE c.record_id=r.id)",
                    (tenant,),
                )
                .fetchone()
            )
            mine = drawn(np.sort(np.asarray(json.loads(ids), dtype=np.int64)), n).tolist()  # ids are distinct
            blobs = self.live_embeddings(mine, tenant, purpose, None, now)
        rows = [blobs[i] for i in mine if blobs.get(i)]
        rows = [b for b in rows if len(b) == len(rows[0])]  # one dimension, as the copy holds
        if not rows:
            return np.empty((0, 0), dtype=np.float32)
        return read_many(rows).astype(np.float16).astype(np.float32)

    @contextlib.contextmanager
    def snapshot(self, at_least: int | None = None) -> Iterator[SQLiteOrigin]:
        """Hold one read snapshot across every read made in this thread inside the block
        (``at_least``: see :meth:`efface.origin.base.Origin.snapshot`)."""
        with self._db.snapshot():
            require_epoch(self, at_least)
            yield self

    @contextlib.contextmanager
    def transaction(self, kind: str, tenant: str | None, now: float) -> Iterator[SQLiteTx]:
        """One write transaction; the epoch is assigned in it. Commits (fsynced) on exit."""
        with self.write_lock, edge(self.path):
            self._c.execute("BEGIN IMMEDIATE")
            try:
                self._c.execute("INSERT INTO mutations(kind, tenant, at) VALUES(?,?,?)", (kind, tenant, now))
                tx = SQLiteTx(self._c, self._c.last_insert_rowid())
                yield tx
            except BaseException:
                self._c.execute("ROLLBACK")
                self.liveness.rolled_back()
                raise
            self._c.execute("COMMIT")
            self.text.committed(tx.text_changes)
            self.liveness.committed(tx.touched, tx.fresh)

    @contextlib.contextmanager
    def group(
        self, members: int | None = None
    ) -> Iterator[Callable[[str, str | None, float], AbstractContextManager[SQLiteTx]]]:
        """Group commit: several write transactions in one SQLite transaction, committed with
        one fsync. The block gets ``member(kind, tenant, now)``, a context manager like
        :meth:`transaction`: each member is a savepoint with its own epoch, rolled back alone
        when its block raises. Nothing of any member is durable before the group's COMMIT;
        if SQLite rolled the whole transaction back (a full disk), the group raises at its
        end and no member stays.

        ``members``: how many members the caller has at most. A group of one runs its member
        without a savepoint, and rolls the whole transaction back if its block raises (there
        is nothing else in it): inside a savepoint SQLite copies every page a statement changes
        for the first time since the savepoint began into a statement journal, so that it can
        roll back to it, and an import's inserts change index pages at random: at 60k records
        a 1000-record upsert cost 36-45 us a record in a savepoint against 10-15 without."""
        with self.write_lock, edge(self.path):
            self._c.execute("BEGIN IMMEDIATE")
            self._members = []
            self._alone, self._abandoned = members == 1, False
            try:
                yield self._member
                if self._abandoned:  # the one member raised: its transaction is rolled back already
                    self.liveness.rolled_back()
                    return
                if not self._c.in_transaction:
                    raise StoreUnwritable(GROUP_LOST)
            except BaseException:
                if self._c.in_transaction:
                    self._c.execute("ROLLBACK")
                self.liveness.rolled_back()
                raise
            self._c.execute("COMMIT")
            self.text.committed([ch for tx in self._members for ch in tx.text_changes])
            self.liveness.committed(
                [rid for tx in self._members for rid in tx.touched],
                {rid: row for tx in self._members for rid, row in tx.fresh.items()},
            )

    @contextlib.contextmanager
    def _member(self, kind: str, tenant: str | None, now: float) -> Iterator[SQLiteTx]:
        with edge(self.path):
            if not self._c.in_transaction:  # an earlier member's failure took the transaction with it
                raise StoreUnwritable(GROUP_LOST)
            if self._alone and (self._members or self._abandoned):
                raise RuntimeError("a group of one was given a second member")
            mark = not self._alone
            if mark:
                self._c.execute("SAVEPOINT member")
            try:
                self._c.execute("INSERT INTO mutations(kind, tenant, at) VALUES(?,?,?)", (kind, tenant, now))
                tx = SQLiteTx(self._c, self._c.last_insert_rowid())
                yield tx
            except BaseException:
                if self._c.in_transaction:
                    if mark:
                        self._c.execute("ROLLBACK TO member")
                        self._c.execute("RELEASE member")
                    else:
                        self._c.execute("ROLLBACK")
                self._abandoned = not mark
                raise
            if mark:
                self._c.execute("RELEASE member")
            self._members.append(tx)  # its changes reach the postings once the group commits

    def meta_set(self, key: str, value: str) -> None:
        self._db.meta_set(key, value)

    def prune_changes(self, upto: int) -> None:
        with self.write_lock, savepoint(self._c):
            self._c.execute("DELETE FROM changes WHERE epoch<=?", (upto,))

    def record_verification(
        self, handle: str, body: dict, receipt_level: str, discard: bool, now: float, verified: dict | None = None
    ) -> tuple[int, str]:
        """Append a verification to the ledger, raise the receipt's level, and (once erased is
        proven) delete the fingerprints and the word hashes: one transaction, so a crash
        leaves all or none."""
        with self.write_lock:
            self._c.execute("BEGIN IMMEDIATE")
            try:
                tx = SQLiteTx(self._c, self.current_epoch())
                seq, digest = tx.append_ledger("verify", handle, body, now)
                self._c.execute(
                    "UPDATE receipts SET body=json_set(body, '$.level', ?) WHERE handle=?", (receipt_level, handle)
                )
                if verified is not None:  # what it found of each copy, for status
                    self._c.execute(
                        "UPDATE receipts SET body=json_set(body, '$.verified', json(?)) WHERE handle=?",
                        (json.dumps(verified, sort_keys=True), handle),
                    )
                if discard:
                    # the word hashes too: beside the secret they are a dictionary away from the words
                    self._c.execute("UPDATE evidence SET fingerprints=NULL, tokens=X'5B5D' WHERE handle=?", (handle,))
                    self._c.execute("DELETE FROM path_evidence WHERE handle=? AND path='fts'", (handle,))
            except BaseException:
                self._c.execute("ROLLBACK")
                raise
            self._c.execute("COMMIT")
        return seq, digest

    def erased_epoch(self) -> int:
        """The newest epoch whose erased bytes are gone from the origin's own files."""
        return self.physical.checkpointed_epoch()

    def erased_checks(self, epoch: int) -> list[Check]:
        """``origin.wal``: the WAL, where committed pages wait, checkpointed and truncated
        past the erasure (the database file's bytes are the byte scan's)."""
        t0 = time.time()
        done = self.erased_epoch()
        return [
            Check(
                name="origin.wal",
                rung="erased",
                outcome="pass" if done >= epoch else "fail",
                detail=f"WAL checkpointed and truncated at epoch {done} (erasure epoch {epoch})",
                at=round(t0, 6),
                duration_s=round(time.time() - t0, 6),
            )
        ]

    def close(self) -> None:
        if hasattr(self, "text"):
            self.text.stop_postings()
        if hasattr(self, "liveness"):
            self.liveness.stop()
        self._db.close()
