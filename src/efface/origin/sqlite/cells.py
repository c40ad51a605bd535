"""Where live content legitimately sits in the SQLite origin's files, page by page: what the
verifier asks before it calls a fingerprint hit residue (:meth:`.physical.SQLitePhysical.live_regions`
and :meth:`~.physical.SQLitePhysical.live_cells` build these from the file).

:class:`LiveRegions` says which pages, of the database file and of its WAL, belong to which kind
of b-tree, and so which kinds of live value may lie there (:data:`ALLOWED`). :class:`LiveCells`
says, per hit, whether a window lies in the content area of a page of a live b-tree and in no
freeblock: bytes of a live row. Every other hit is judged by :mod:`efface.erasure.residue`.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable

import numpy as np

from ... import compiled
from .gaps import INDEX_INTERIOR, INDEX_LEAF, TABLE_LEAF

CONTENT, NAME, TERM = "content", "name", "term"
ALLOWED = {CONTENT: frozenset({CONTENT, NAME}), NAME: frozenset({NAME}), TERM: frozenset({TERM})}
"""Which kinds of live value may lie in the pages of each kind of b-tree."""

WAL_HEADER, FRAME_HEADER = 32, 24


class LiveRegions:
    """The file regions where a live copy of content may sit (for one verification): the
    pages of the live b-trees in the database file, and the page images of those pages in
    the current WAL (written after the last checkpoint: a live record written since is
    there before it is in the database file). Pages of :data:`.physical.NAME_BTREES` may hold
    only names, pages of :data:`.physical.TERM_BTREES` only the terms of live records."""

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


def children(data: np.ndarray, ps: int, base: np.ndarray, head: np.ndarray) -> np.ndarray:
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


def close_map(mm: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # an array still viewing it: left to the collector
        mm.close()
