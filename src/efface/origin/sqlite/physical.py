"""The SQLite origin's byte-level capability: what verify and the compactor need of its file.

An origin that keeps bytes on disk declares this capability beside :class:`~efface.origin.base.Origin`
(see :class:`~efface.origin.base.Physical`): make erased bytes physically go (checkpoint the WAL,
zero the stale cell bytes in the gaps of the pages it wrote), and say which regions of which files may
legitimately hold a copy of live content, so the verifier can tell a live copy from residue
without knowing what a SQLite page is.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ... import foreground
from .cells import (
    ALLOWED,
    CELL_PAGES,
    CONTENT,
    FRAME_HEADER,
    NAME,
    TERM,
    WAL_HEADER,
    LiveCells,
    LiveRegions,
    children,
    close_map,
)
from .conn import Connections
from .edge import guarded, savepoint
from .gaps import INDEX_INTERIOR, TABLE_INTERIOR, PageLog, Scrubbed, scrub
from .schema import CHECKPOINTED, REINDEX, REINDEXED
from .segments import consolidate

LIVE_BTREES = (
    "tenants",
    "records",
    "sqlite_autoindex_records_1",
    "claims",
    "claims_subject",
    "sqlite_autoindex_claims_1",
    "subjects",
    "sqlite_autoindex_subjects_1",
    "mentions",
    "sqlite_autoindex_mentions_1",
    "mentions_subject",
    "subject_keys",
    "sqlite_autoindex_subject_keys_1",
    "sqlite_autoindex_subject_keys_2",
)
"""The b-trees where a live record, claim or subject legitimately holds bytes."""

NAME_BTREES = (
    "purposes",
    "sqlite_autoindex_purposes_1",
    "policies",
    "sqlite_autoindex_policies_1",
    "changes",
    "mutations",
    "receipts",
    "sqlite_autoindex_receipts_1",
    "ledger",
    "sqlite_schema",
    "sqlite_master",
)
"""The b-trees that hold no content, only names: tenants and purposes in use (beside keyed
hashes), and the schema's own words."""

TERM_BTREES = ("fts_data", "fts_idx")
"""The full-text index's b-trees: the terms of live records (merged after every erasure)."""

LIVE_VALUES = (
    "SELECT key, text, metadata, sources{embedding} FROM records",
    "SELECT DISTINCT subject FROM claims",
    "SELECT subject, identifiers FROM subjects",
    "SELECT DISTINCT subject FROM mentions",
    "SELECT subject FROM subject_keys",
)
"""Every content value the rows of :data:`LIVE_BTREES` hold that may share bytes with erased content."""

NAME_VALUES = (
    "SELECT name FROM tenants",
    "SELECT DISTINCT tenant FROM purposes",
    "SELECT DISTINCT purpose FROM purposes",
    "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL",
    "SELECT kind, handle, body, prev, hash FROM ledger",
    "SELECT handle, kind, tenant_h, body FROM receipts",
)
"""The tenant names in use (and their ids, which the other tables hold), the purpose names,
the schema's statements, and the ledger's entries and the receipts (keyed hashes, handles
and counts: the first entry's ``prev`` is 64 zeros, which a text of zeros shares)."""

TERM_VALUES = ("SELECT term FROM fts_vocab",)


@guarded
class SQLitePhysical:
    """The byte-level capability of the origin whose connections it is handed. ``vacuumed``
    is called after a VACUUM (:meth:`rewrite`), which drops the writer's TEMP objects."""

    def __init__(self, db: Connections, vacuumed: Callable[[], None]):
        self._db = db
        self._vacuumed = vacuumed
        self.scrubbed = Scrubbed()
        """What the last gap scrub did (pages examined, pages and bytes zeroed)."""
        w = db.writer
        (page_size,) = w.execute("PRAGMA page_size").fetchone()
        self._page_size = int(page_size)
        (self._auto,) = w.execute("PRAGMA wal_autocheckpoint").fetchone()
        self._log: PageLog | None = PageLog(db.path + "-wal", page_size)
        # Replaces SQLite's default WAL hook, which is its automatic checkpoint: run below.
        w.set_wal_hook(self._committed)

    def _committed(self, conn: Any, name: str, frames: int) -> int:
        """SQLite's WAL hook: after each commit of the writer, log the pages it wrote, then do
        what SQLite's own hook does (a passive checkpoint past ``wal_autocheckpoint`` frames)."""
        try:
            if name == "main" and self._log is not None:
                self._log.commit(frames)
            if self._auto > 0 and frames >= self._auto:
                conn.wal_checkpoint(name)
        except Exception:  # a hook must not raise into SQLite's commit: fail safe, scrub all later
            if self._log is not None:
                self._log.lost()
        return 0  # SQLITE_OK

    def files(self) -> list[str]:
        """The origin's files (absolute paths)."""
        return [self._db.path + suffix for suffix in ("", "-wal", "-shm")]

    def growing(self) -> tuple[str, ...]:
        """The files a write makes larger: the database and its WAL (not the WAL's index)."""
        return tuple(f for f in self.files() if not f.endswith("-shm"))

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to zero bytes, so no old page
        image (with secure_delete, the only place deleted bytes can linger) stays in the WAL.
        Records the epoch it covers; returns False if a reader kept it from completing."""
        o = self._db
        with o.write_lock:
            epoch = o.current_epoch()
            busy, _log, _done = o.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                return False
            # The WAL is empty and nothing else writes: the file is the whole current state.
            if not self._scrub():
                return False
            o.meta_set(CHECKPOINTED, str(epoch))
            # The meta row just went into the WAL; checkpoint again so the file is empty.
            o.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return True

    def rebuild_indexes(self) -> bool:
        """Rebuild the indexes that hold keys and subjects if anything was erased since the last
        rebuild, where the checkpoint's gap scrub cannot run. secure_delete zeroes a deleted
        cell, but when SQLite rebuilds a page it leaves the old cell bytes in the page's
        unallocated gap; the scrub (:mod:`.gaps`) zeroes those gaps on the pages that changed,
        and this REINDEX (O(index)) is left for a file it cannot read safely."""
        o = self._db
        if o.meta_get(REINDEX) != "1":
            return False
        if self._log is not None:
            # The checkpoint's gap scrub reaches those bytes on the pages that changed: no
            # index needs rebuilding (see .gaps).
            with o.write_lock:
                o.meta_set(REINDEX, "0")
            return False
        with o.write_lock, savepoint(o.writer):
            for index in REINDEXED:
                o.writer.execute(f"REINDEX {index}")
            o.writer.execute("UPDATE meta SET v='0' WHERE k=?", (REINDEX,))
        return True

    def merge_segments(self, stop: Callable[[], bool] | None = None, *, always: bool = False) -> bool:
        """Merge the word index's segments into one, in short steps (:mod:`.segments`): an
        idle store's forgets then delete from one segment. Returns True when none is left."""
        return consolidate(self._db, stop, always=always)

    def rewrite(self) -> bool:
        """Rebuild the whole database file (VACUUM) and checkpoint it; True once the WAL is
        empty again. For erased bytes that no rebuild of an index reaches: when SQLite
        rebuilds a *table* page in a rebalance it also leaves old cells in the page's
        unallocated gap, and a cell that stays live then leaves a stale copy there that
        outlives the cell's own (zeroed) deletion; the byte scan finds those (see
        ``Store.wait``). VACUUM writes every page afresh. Its temporary copy of the
        database is kept in memory (``temp_store``), never in a temporary file."""
        o = self._db
        with o.write_lock:
            (before,) = o.writer.execute("PRAGMA temp_store").fetchone()
            o.writer.execute("PRAGMA temp_store=MEMORY")
            try:
                o.writer.execute("VACUUM")
            finally:
                o.writer.execute(f"PRAGMA temp_store={int(before)}")
                # a change of temp_store drops the connection's TEMP objects: the triggers
                # that keep the copy of liveness up (VACUUM changed no row meanwhile)
                self._vacuumed()
            return self.checkpoint()

    def _scrub(self) -> bool:
        """Zero the unallocated gaps of the pages committed since the last scrub (every page
        after opening), then drop the writer's cached pages so none is written back with the
        old bytes. Call with the write lock held and the WAL just truncated. False if the file
        could not be written (the pages stay owed)."""
        log = self._log
        if log is None:
            return True
        pages, upto = log.owed()
        try:
            self.scrubbed = scrub(self._db.path, pages)
        except ValueError:
            # A file this scrub cannot read safely: back to rebuilding the indexes, now, before
            # the checkpoint that follows says the erased bytes are gone.
            self._log = None
            self._db.meta_set(REINDEX, "1")
            self.rebuild_indexes()
            self._db.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return True
        except OSError:
            return False
        if self.scrubbed.zeroed_pages:  # else no cached page differs from the file
            self._db.writer.release_memory()
        log.scrubbed(upto)
        return True

    def scan_token(self) -> tuple[int, int] | None:
        """A token for a scan of the database file starting now (see :meth:`changed_pages`)."""
        return self._log.token() if self._log is not None else None

    def changed_pages(self, token: tuple[int, int] | None) -> tuple[str, int, np.ndarray] | None:
        """(database file, page size, pages) where the file may differ from what a scan that
        began at ``token`` read: every other page holds the bytes that scan saw. None when
        that cannot be shown (no token, or a write the page log did not see)."""
        log = self._log
        if token is None or log is None:
            return None
        pages = log.changed_since(token)
        if pages is None:
            return None
        return self._db.path, self._page_size, pages

    def checkpointed_epoch(self) -> int:
        return int(self._db.meta_get(CHECKPOINTED) or 0)

    def live_regions(self, root: str) -> LiveRegions:
        """Where, in the origin's file, a live record, claim or subject legitimately holds bytes."""
        r = self._db.reader()
        kinds = {n: ALLOWED[CONTENT] for n in LIVE_BTREES}
        kinds.update({n: ALLOWED[NAME] for n in NAME_BTREES})
        kinds.update({n: ALLOWED[TERM] for n in TERM_BTREES})
        marks = ",".join("?" * len(kinds))
        pages = {
            row[0]: kinds[row[1]]
            for row in r.execute(f"SELECT pageno, name FROM dbstat WHERE name IN ({marks})", list(kinds))
        }
        page = r.execute("PRAGMA page_size").fetchone()[0]
        name = os.path.relpath(self._db.path, root)
        return LiveRegions(name, pages, page, name + "-wal")

    @contextlib.contextmanager
    def live_cells(self, root: str) -> Iterator[LiveCells | None]:
        """The bytes of live cells in the database file (see :class:`LiveCells`), in a read
        snapshot held until the block ends; None if the file cannot be read so. Finding the
        pages reads only the interior pages of the live b-trees (a few thousand at a million
        records), where ``dbstat`` reads every page."""
        o = self._db
        with o.snapshot(), contextlib.ExitStack() as stack:
            r = o.reader()
            marks = ",".join("?" * len(LIVE_BTREES))
            sql = f"SELECT rootpage FROM sqlite_schema WHERE name IN ({marks})"
            roots = [row[0] for row in r.execute(sql, LIVE_BTREES)]  # the snapshot starts here
            (page_size,) = r.execute("PRAGMA page_size").fetchone()
            try:
                f = stack.enter_context(open(o.path, "rb"))
                size = os.fstat(f.fileno()).st_size
            except OSError:
                size = 0
            if size < page_size:
                yield None
                return
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            stack.callback(close_map, mm)
            data = np.frombuffer(mm, dtype=np.uint8)
            pages = self._cell_pages(data, page_size, roots, self._wal_pages(page_size))
            usable = page_size - int(data[20])  # reserved bytes at each page's end
            cells = LiveCells(os.path.relpath(o.path, root), data, page_size, usable, pages)
            del data
            stack.callback(cells.release)
            yield cells

    def _wal_pages(self, page_size: int) -> set[int]:
        """Every page with a frame in the WAL, as it is now (in the caller's snapshot the WAL
        only grows): those pages may differ in the file, so no decision is made on them."""
        try:
            with open(self._db.path + "-wal", "rb") as f:
                raw = f.read()
        except OSError:
            return set()
        step = FRAME_HEADER + page_size
        n = max(0, (len(raw) - WAL_HEADER) // step)
        if n == 0:
            return set()
        arr = np.frombuffer(raw, dtype=np.uint8)
        at = WAL_HEADER + step * np.arange(n)
        nums = (arr[at].astype(np.int64) << 24) | (arr[at + 1].astype(np.int64) << 16)
        nums |= (arr[at + 2].astype(np.int64) << 8) | arr[at + 3]
        return set(nums.tolist())

    @staticmethod
    def _cell_pages(data: np.ndarray, ps: int, roots: Sequence[int], wal: set[int]) -> np.ndarray:
        """Pages of the b-trees under ``roots`` whose cells hold values, found level by level
        from the roots down, every level in array operations (a Python step per interior
        page, and ``np.unique`` over each level, cost 0.7 s at a million records). A page
        with a frame in the WAL is neither counted nor descended into."""
        npages = data.size // ps
        out = np.zeros(npages + 1, dtype=bool)
        # pages already walked, or never to be walked (in the WAL): a level keeps only the rest
        done = np.zeros(npages + 1, dtype=bool)
        skip = np.asarray(sorted(wal), dtype=np.int64)
        done[skip[(skip >= 1) & (skip <= npages)]] = True
        level = np.asarray([p for p in roots if p], dtype=np.int64)
        while level.size:
            level = level[(level >= 1) & (level <= npages)]
            fresh = np.zeros(npages + 1, dtype=bool)
            fresh[level] = True
            level = np.flatnonzero(fresh & ~done)
            if level.size == 0:
                break
            done[level] = True
            base = (level - 1) * ps
            head = base + np.where(level == 1, 100, 0)
            kind = data[head]
            out[level[np.isin(kind, CELL_PAGES)]] = True
            inner = np.isin(kind, (TABLE_INTERIOR, INDEX_INTERIOR))
            level = children(data, ps, base[inner], head[inner])
        return out

    def live_values(self, embeddings: bool) -> Iterator[tuple[bytes, str]]:
        """Every value a live row holds (texts as their UTF-8 bytes, as stored), and its kind
        (content, name or term: see :data:`ALLOWED`), from one snapshot: what a live copy of
        erased bytes may belong to."""
        emb = ", embedding" if embeddings else ""
        queries = (
            [(sql.format(embedding=emb), CONTENT) for sql in LIVE_VALUES]
            + [(sql, NAME) for sql in NAME_VALUES]
            + [(sql, TERM) for sql in TERM_VALUES]
        )
        with self._db.snapshot():
            r = self._db.reader()
            for sql, name in queries:
                for row in r.execute(sql):
                    for value in row:
                        if isinstance(value, str):
                            yield value.encode("utf-8"), name
                        elif isinstance(value, bytes):
                            yield value, name

    def pending_fingerprints(self, handle: str) -> list[bytes]:
        """The fingerprints of every other erasure not yet proven erased (newest first)."""
        rows = self._db.reader().execute(
            "SELECT fingerprints FROM evidence WHERE fingerprints IS NOT NULL AND handle != ? ORDER BY epoch DESC",
            (handle,),
        )
        return [row[0] for row in rows]

    def live_holding(self, windows: set[bytes], embeddings: bool) -> set[bytes]:
        """Which of these byte windows occur in a live record's text or key (or embedding), or
        in a live subject's name or identifiers: copies that are allowed to be there, such as
        a retained duplicate or another subject whose name shares the bytes. One pass over
        the records with an Aho-Corasick automaton, whatever the number of windows."""
        import ahocorasick

        if not windows:
            return set()
        automaton = ahocorasick.Automaton()
        for w in windows:
            automaton.add_word(w.decode("latin-1"), w)
        automaton.make_automaton()
        found: set[bytes] = set()
        cols = "text, key" + (", embedding" if embeddings else "")
        queries = (
            f"SELECT {cols} FROM records",
            "SELECT DISTINCT subject FROM claims",
            "SELECT subject, identifiers FROM subjects",
            "SELECT subject FROM subject_keys",
            "SELECT name FROM tenants",
        )
        with self._db.snapshot():
            r = self._db.reader()
            for sql in queries:
                for n, row in enumerate(r.execute(sql)):
                    if n % 256 == 0:
                        foreground.give_way()  # a long Python loop: recalls first
                    for value in row:
                        raw = value.encode("utf-8") if isinstance(value, str) else value
                        for _end, w in automaton.iter(raw.decode("latin-1")):
                            found.add(w)
                    if len(found) == len(windows):
                        return found
        return found

    def page_images(self, names: Sequence[str]) -> set[int]:  # pragma: no cover - diagnostics
        r = self._db.reader()
        marks = ",".join("?" * len(names))
        return {row[0] for row in r.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", list(names))}
