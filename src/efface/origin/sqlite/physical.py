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
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import compiled, foreground
from .edge import guarded, savepoint
from .gaps import PageLog, Scrubbed, scrub
from .schema import CHECKPOINTED, REINDEX, REINDEXED
from .segments import consolidate

if TYPE_CHECKING:  # pragma: no cover
    from .origin import SQLiteOrigin

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
)
"""The tenant names in use (and their ids, which the other tables hold), the purpose names,
and the schema's statements."""

TERM_VALUES = ("SELECT term FROM fts_vocab",)

CONTENT, NAME, TERM = "content", "name", "term"
ALLOWED = {CONTENT: frozenset({CONTENT, NAME}), NAME: frozenset({NAME}), TERM: frozenset({TERM})}
"""Which kinds of live value may lie in the pages of each kind of b-tree."""

WAL_HEADER, FRAME_HEADER = 32, 24


class LiveRegions:
    """The file regions where a live copy of content may sit (for one verification): the
    pages of the live b-trees in the database file, and the page images of those pages in
    the current WAL (written after the last checkpoint: a live record written since is
    there before it is in the database file). Pages of :data:`NAME_BTREES` may hold only
    names, pages of :data:`TERM_BTREES` only the terms of live records."""

    def __init__(self, file: str, pages: dict[int, frozenset[str]], page_size: int, wal: str):
        self._file, self._pages, self._page, self._wal = file, pages, page_size, wal

    def bounds(
        self, file: str, offset: int, read: Callable[[str, int, int], bytes]
    ) -> tuple[int, int, frozenset[str]] | None:
        """The page ``[start, end)`` of ``file`` (relative to the store directory) around
        ``offset``, and the kinds of live value it may hold, if it is a page of a b-tree
        that holds live values; else None. ``read`` reads the bytes the scan saw (the WAL may
        be truncated under it)."""
        ps = self._page
        if file == self._file:
            page = offset // ps + 1
            return ((page - 1) * ps, page * ps, self._pages[page]) if page in self._pages else None
        if file != self._wal or offset < WAL_HEADER:
            return None
        header = read(file, 0, WAL_HEADER)
        if len(header) < WAL_HEADER or int.from_bytes(header[8:12], "big") != ps:
            return None
        frame = (offset - WAL_HEADER) // (FRAME_HEADER + ps)
        start = WAL_HEADER + frame * (FRAME_HEADER + ps)
        fh = read(file, start, FRAME_HEADER)
        # a frame of this WAL (its salts) holding a page of a live b-tree; stale frames of an
        # earlier WAL generation, and the frame headers themselves, are not live content
        if len(fh) < FRAME_HEADER or fh[8:16] != header[16:24] or offset < start + FRAME_HEADER:
            return None
        page = int.from_bytes(fh[0:4], "big")
        if page not in self._pages:
            return None
        return start + FRAME_HEADER, start + FRAME_HEADER + ps, self._pages[page]

    def contains(self, file: str, offset: int, width: int, read: Callable[[str, int, int], bytes]) -> bool:
        """Whether ``width`` bytes at ``offset`` lie inside one page of a live b-tree."""
        b = self.bounds(file, offset, read)
        return b is not None and CONTENT in b[2] and offset + width <= b[1]


TABLE_INTERIOR, TABLE_LEAF, INDEX_INTERIOR, INDEX_LEAF = 0x05, 0x0D, 0x02, 0x0A
CELL_PAGES = (TABLE_LEAF, INDEX_LEAF, INDEX_INTERIOR)
"""B-tree pages whose cells hold values (a table's interior pages hold child pointers and
rowids only)."""


class LiveCells:
    """Which bytes of the database file are bytes of live cells of the live b-trees, decided
    per hit with a few array operations rather than by reading the live values.

    A b-tree page keeps its cells in its cell content area, from the offset its header names
    to the page's end. With ``secure_delete`` every freed cell there is zeroed (a freeblock
    keeps only its 4-byte link), and SQLite leaves stale bytes only in the unallocated gap
    between the cell pointer array and the content area, where a page rebuilt in a rebalance
    keeps its old cells. So a window that lies in the content area of a page of a live
    b-tree, and in no freeblock, is bytes of a live row: a live copy, like the whole live
    value :mod:`efface.erasure.residue` otherwise looks for. Everything else (the gap, pages
    of other b-trees, overflow pages, pages with a newer image in the WAL) is left to it.

    Made inside a read snapshot that stays open while the hits are judged: a page with no
    frame in the WAL is then the snapshot's page in the file, and no checkpoint can change it
    (a checkpoint never copies frames past a reader's snapshot)."""

    def __init__(self, name: str, data: np.ndarray, page_size: int, usable: int, pages: np.ndarray):
        self.name = name
        self._data, self._ps, self._usable, self._pages = data, page_size, usable, pages

    def release(self) -> None:
        self._data = np.empty(0, dtype=np.uint8)
        self._pages = np.zeros(1, dtype=bool)

    def words(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two little-endian 64-bit words at each (8-aligned) offset (0 past the end)."""
        n = self._data.size // 8
        w = self._data[: n * 8].view("<u8")
        at = offsets // 8
        first = np.where(at < n, w[np.minimum(at, n - 1)], 0).astype(np.uint64)
        second = np.where(at + 1 < n, w[np.minimum(at + 1, n - 1)], 0).astype(np.uint64)
        return first, second

    def pages(self) -> int:
        """How many pages' content areas count (for the check's detail)."""
        return int(np.count_nonzero(self._pages))

    def inside_words(self, offsets: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`inside` and :meth:`words` of the same (8-aligned) windows: in one compiled
        pass when the scan's loops are compiled (:mod:`efface.compiled`: a million hits'
        gathers from a 1.7 GB file were a quarter of a second in numpy), else both."""
        if not compiled.ready() or _inside_words.compiled is None:
            return (self.inside(offsets, widths), *self.words(offsets))
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        widths = np.ascontiguousarray(widths, dtype=np.int64)
        out = np.zeros(offsets.size, dtype=np.bool_)
        first = np.zeros(offsets.size, dtype=np.uint64)
        second = np.zeros(offsets.size, dtype=np.uint64)
        data = self._data
        words = data[: data.size // 8 * 8].view("<u8")
        _inside_words.compiled(data, words, self._ps, self._usable, self._pages, offsets, widths, out, first, second)
        return out, first, second

    def inside(self, offsets: np.ndarray, widths: np.ndarray) -> np.ndarray:
        """For each window ``[offset, offset + width)`` of the file, whether it lies in the
        bytes of a live cell (see the class docstring)."""
        ps, data = self._ps, self._data
        page = offsets // ps + 1
        ok = (page < self._pages.size) & (offsets + widths <= data.size)
        ok[ok] = self._pages[page[ok]]
        if not ok.any():
            return ok
        at = np.flatnonzero(ok)
        base = (page[at] - 1) * ps
        head = base + np.where(page[at] == 1, 100, 0)
        kind = data[head]
        start = data[head + 5].astype(np.int64) * 256 + data[head + 6]
        start[start == 0] = 65536
        local = offsets[at] - base
        good = np.isin(kind, CELL_PAGES) & (local >= start) & (local + widths[at] <= self._usable)
        free = data[head + 1].astype(np.int64) * 256 + data[head + 2]
        for i in np.flatnonzero(good & (free != 0)).tolist():
            good[i] = not self._in_freeblock(int(base[i]), int(free[i]), int(local[i]), int(widths[at[i]]))
        ok[at] = good
        return ok

    def _in_freeblock(self, base: int, first: int, local: int, width: int) -> bool:
        data, at, seen = self._data, first, 0
        while at and seen < self._ps // 4:
            if at + 4 > self._ps:
                return True  # a damaged chain: fail closed
            size = int(data[base + at + 2]) * 256 + int(data[base + at + 3])
            if local < at + size and at < local + width:
                return True
            at = int(data[base + at]) * 256 + int(data[base + at + 1])
            seen += 1
        return False


def _warm_inside(f) -> None:
    data = np.frombuffer(np.zeros(1024, np.uint8).tobytes(), np.uint8)  # read-only, as a mapped file
    ints = np.zeros(2, np.int64)
    out = np.zeros(2, np.bool_)
    f(data, data.view("<u8"), 512, 512, np.zeros(3, np.bool_), ints, ints + 8, out, *np.zeros((2, 2), np.uint64))


@compiled.loop(_warm_inside)
def _inside_words(data, words, ps, usable, pages, offsets, widths, out, first, second):  # pragma: no cover
    """:meth:`LiveCells.inside` and :meth:`LiveCells.words` in one pass over the windows, the
    same decisions byte for byte (tests compare them): a window counts when it lies on a page
    of a live b-tree (``pages``) whose kind holds values, inside the cell content area and the
    usable bytes, and in no freeblock (a damaged freeblock chain counts as a freeblock)."""
    n = data.size
    nw = words.size
    for i in range(offsets.size):
        off = offsets[i]
        w = widths[i]
        at = off // 8
        if at < nw:
            first[i] = words[at]
        if at + 1 < nw:
            second[i] = words[at + 1]
        page = off // ps + 1
        if page >= pages.size or off + w > n or not pages[page]:
            continue
        base = (page - 1) * ps
        head = base + (100 if page == 1 else 0)
        kind = data[head]
        if kind != TABLE_LEAF and kind != INDEX_LEAF and kind != INDEX_INTERIOR:  # CELL_PAGES
            continue
        start = np.int64(data[head + 5]) * 256 + np.int64(data[head + 6])
        if start == 0:
            start = np.int64(65536)
        local = off - base
        if local < start or local + w > usable:
            continue
        free = np.int64(data[head + 1]) * 256 + np.int64(data[head + 2])
        inside = True
        seen = 0
        while free != 0 and seen < ps // 4:
            if free + 4 > ps:
                inside = False  # a damaged chain: fail closed
                break
            size = np.int64(data[base + free + 2]) * 256 + np.int64(data[base + free + 3])
            if local < free + size and free < local + w:
                inside = False
                break
            free = np.int64(data[base + free]) * 256 + np.int64(data[base + free + 1])
            seen += 1
        out[i] = inside


def _children(data: np.ndarray, ps: int, base: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The child page numbers of the interior b-tree pages at ``base`` (header at ``head``):
    each cell's leading 4-byte page number, and the right-most pointer of each page."""
    if base.size == 0:
        return np.empty(0, dtype=np.int64)
    counts = data[head + 3].astype(np.int64) * 256 + data[head + 4]
    counts = np.minimum(counts, (base + ps - head - 12) // 2)  # a damaged count cannot read past its page
    total = int(counts.sum())
    first = np.repeat(np.cumsum(counts) - counts, counts)
    slot = np.arange(total, dtype=np.int64) - first  # the cell's index within its page
    page_base = np.repeat(base, counts)
    ptr = np.repeat(head + 12, counts) + 2 * slot
    cells = page_base + data[ptr].astype(np.int64) * 256 + data[ptr + 1]
    cells = cells[cells + 4 <= page_base + ps]
    got = (data[cells].astype(np.int64) << 24) | (data[cells + 1].astype(np.int64) << 16)
    got |= (data[cells + 2].astype(np.int64) << 8) | data[cells + 3]
    right = (data[head + 8].astype(np.int64) << 24) | (data[head + 9].astype(np.int64) << 16)
    right |= (data[head + 10].astype(np.int64) << 8) | data[head + 11]
    return np.concatenate([got, right])


def _close_map(mm: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # an array still viewing it: left to the collector
        mm.close()


@guarded
class SQLitePhysical:
    def __init__(self, origin: SQLiteOrigin):
        self._o = origin
        self.scrubbed = Scrubbed()
        """What the last gap scrub did (pages examined, pages and bytes zeroed)."""
        w = origin.writer
        (page_size,) = w.execute("PRAGMA page_size").fetchone()
        self._page_size = int(page_size)
        (self._auto,) = w.execute("PRAGMA wal_autocheckpoint").fetchone()
        self._log: PageLog | None = PageLog(origin.path + "-wal", page_size)
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
        return [self._o.path + suffix for suffix in ("", "-wal", "-shm")]

    def growing(self) -> tuple[str, ...]:
        """The files a write makes larger: the database and its WAL (not the WAL's index)."""
        return tuple(f for f in self.files() if not f.endswith("-shm"))

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it to zero bytes, so no old page
        image (with secure_delete, the only place deleted bytes can linger) stays in the WAL.
        Records the epoch it covers; returns False if a reader kept it from completing."""
        o = self._o
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
        o = self._o
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
        return consolidate(self._o, stop, always=always)

    def rewrite(self) -> bool:
        """Rebuild the whole database file (VACUUM) and checkpoint it; True once the WAL is
        empty again. For erased bytes that no rebuild of an index reaches: when SQLite
        rebuilds a *table* page in a rebalance it also leaves old cells in the page's
        unallocated gap, and a cell that stays live then leaves a stale copy there that
        outlives the cell's own (zeroed) deletion; the byte scan finds those (see
        ``Store.wait``). VACUUM writes every page afresh. Its temporary copy of the
        database is kept in memory (``temp_store``), never in a temporary file."""
        o = self._o
        with o.write_lock:
            (before,) = o.writer.execute("PRAGMA temp_store").fetchone()
            o.writer.execute("PRAGMA temp_store=MEMORY")
            try:
                o.writer.execute("VACUUM")
            finally:
                o.writer.execute(f"PRAGMA temp_store={int(before)}")
                # a change of temp_store drops the connection's TEMP objects: the triggers
                # that keep the copy of liveness up (VACUUM changed no row meanwhile)
                o.liveness.install()
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
            self.scrubbed = scrub(self._o.path, pages)
        except ValueError:
            # A file this scrub cannot read safely: back to rebuilding the indexes, now, before
            # the checkpoint that follows says the erased bytes are gone.
            self._log = None
            self._o.meta_set(REINDEX, "1")
            self.rebuild_indexes()
            self._o.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return True
        except OSError:
            return False
        if self.scrubbed.zeroed_pages:  # else no cached page differs from the file
            self._o.writer.release_memory()
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
        return self._o.path, self._page_size, pages

    def checkpointed_epoch(self) -> int:
        return int(self._o.meta_get(CHECKPOINTED) or 0)

    def live_regions(self, root: str) -> LiveRegions:
        """Where, in the origin's file, a live record, claim or subject legitimately holds bytes."""
        r = self._o._r()
        kinds = {n: ALLOWED[CONTENT] for n in LIVE_BTREES}
        kinds.update({n: ALLOWED[NAME] for n in NAME_BTREES})
        kinds.update({n: ALLOWED[TERM] for n in TERM_BTREES})
        marks = ",".join("?" * len(kinds))
        pages = {
            row[0]: kinds[row[1]]
            for row in r.execute(f"SELECT pageno, name FROM dbstat WHERE name IN ({marks})", list(kinds))
        }
        page = r.execute("PRAGMA page_size").fetchone()[0]
        name = os.path.relpath(self._o.path, root)
        return LiveRegions(name, pages, page, name + "-wal")

    @contextlib.contextmanager
    def live_cells(self, root: str) -> Iterator[LiveCells | None]:
        """The bytes of live cells in the database file (see :class:`LiveCells`), in a read
        snapshot held until the block ends; None if the file cannot be read so. Finding the
        pages reads only the interior pages of the live b-trees (a few thousand at a million
        records), where ``dbstat`` reads every page."""
        o = self._o
        with o.snapshot(), contextlib.ExitStack() as stack:
            r = o._r()
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
            stack.callback(_close_map, mm)
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
            with open(self._o.path + "-wal", "rb") as f:
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
            level = _children(data, ps, base[inner], head[inner])
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
        with self._o.snapshot():
            r = self._o._r()
            for sql, name in queries:
                for row in r.execute(sql):
                    for value in row:
                        if isinstance(value, str):
                            yield value.encode("utf-8"), name
                        elif isinstance(value, bytes):
                            yield value, name

    def pending_fingerprints(self, handle: str) -> list[bytes]:
        """The fingerprints of every other erasure not yet proven erased (newest first)."""
        rows = self._o._r().execute(
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
        with self._o.snapshot():
            r = self._o._r()
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
        r = self._o._r()
        marks = ",".join("?" * len(names))
        return {row[0] for row in r.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", list(names))}
