"""Stale cell bytes in the unallocated gap of b-tree pages, and the pages that may hold them.

``secure_delete`` zeroes a deleted cell and a freed page, but when SQLite rebuilds a page in a
rebalance (``rebuildPage``) it writes the page's cells afresh from its end and leaves the old
cell bytes between the new content start and the cell pointer array: the page's unallocated
gap. A cell that moved to a sibling page keeps a stale copy there, and when that record is
erased later its zeroed cell does not reach the copy (found by verify's byte scan: fragments
of erased keys and subject names in live index pages, stale texts in live ``records`` pages).
SQLite never reads a gap (it is free space by the page's own header), and it has no statement
that rewrites one page, so the whole indexes were rebuilt after every erasure (REINDEX:
O(index) per erasure, seconds at 100k records).

Here the gaps are zeroed instead, only on pages that changed. In WAL mode every page SQLite
writes reaches the database file through a committed WAL frame, so :class:`PageLog`, called
after each commit of the writer (SQLite's WAL hook), reads the page numbers of the new frames;
SQLite's own automatic checkpoint is that hook's default, so the log runs it the same way.
Right after a TRUNCATE checkpoint, with the origin's write lock held (the database file is
then the whole current state and nothing else writes it), :func:`scrub` zeroes the gap of
each logged page that has a non-zero byte there, fsyncs, and the writer's page cache is
released so no cached image with the old bytes is ever written back. A page the log cannot
vouch for (a process that crashed, or another connection that wrote the file) is covered by
the first scrub after the origin opens, which looks at every page.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass

import numpy as np

WAL_HEADER, FRAME_HEADER = 32, 24
INDEX_INTERIOR, TABLE_INTERIOR, INDEX_LEAF, TABLE_LEAF = 0x02, 0x05, 0x0A, 0x0D
MAX_PAGES = 1 << 24
"""An overflow or freelist trunk page starts with a 4-byte page number, whose first byte is 0
while the file has fewer pages than this: such a page can never pass for a b-tree page (a
freelist leaf is zeroed by secure_delete). Beyond it, :func:`scrub` refuses to run."""
BLOCK = 1024
"""Pages examined per numpy step (4 MiB of 4 KiB pages)."""


class PageLog:
    """Which pages the writer committed, and when, read from the WAL's frame headers after
    each commit: the pages owed a gap scrub, and the pages that may differ from what an
    earlier scan of the file read. Until the first scrub after opening, every page is owed."""

    def __init__(self, wal: str, page_size: int):
        self._wal, self._ps = wal, page_size
        self._mu = threading.Lock()
        self._salts = b""
        self._frames = 0
        self._seq = 0
        """Commits logged so far."""
        self._last = np.zeros(1024, dtype=np.int64)
        """Per page, the commit that last wrote it."""
        self._all = True
        self._scrubbed = 0
        """Every page committed at or before this commit is in the file and scrubbed."""
        self._generation = 0
        """Bumped when a write was not seen: earlier scan tokens are void."""

    def lost(self) -> None:
        """Some write was not seen: the next scrub looks at every page, and no earlier scan
        of the file is trusted any more."""
        with self._mu:
            self._all = True
            self._generation += 1

    def commit(self, frames: int) -> None:
        """The WAL holds ``frames`` committed frames now: log the pages of the new ones."""
        try:
            with open(self._wal, "rb") as f:
                fd = f.fileno()
                header = os.pread(fd, WAL_HEADER, 0)
                if len(header) < WAL_HEADER or int.from_bytes(header[8:12], "big") != self._ps:
                    self.lost()
                    return
                salts = header[16:24]
                # A checkpoint that copied every frame lets the next commit restart the WAL from
                # its first frame (new salts): then every frame is new.
                start = self._frames if salts == self._salts and frames >= self._frames else 0
                step = FRAME_HEADER + self._ps
                pages: list[np.ndarray] = []
                for first in range(start, frames, 4096):
                    n = min(frames, first + 4096) - first
                    raw = os.pread(fd, n * step, WAL_HEADER + first * step)
                    arr = np.frombuffer(raw, dtype=np.uint8)
                    if len(raw) // step < n:
                        self.lost()
                        return
                    at = step * np.arange(n)
                    nums = (arr[at].astype(np.int64) << 24) | (arr[at + 1].astype(np.int64) << 16)
                    nums |= (arr[at + 2].astype(np.int64) << 8) | arr[at + 3]
                    pages.append(nums)
        except OSError:
            self.lost()
            return
        with self._mu:
            self._salts, self._frames = salts, frames
            self._seq += 1
            for nums in pages:
                if nums.size:
                    top = int(nums.max())
                    if top >= self._last.size:
                        grown = np.zeros(max(top + 1, 2 * self._last.size), dtype=np.int64)
                        grown[: self._last.size] = self._last
                        self._last = grown
                    self._last[nums] = self._seq

    def owed(self) -> tuple[np.ndarray | None, int]:
        """The pages owed a scrub (None: every page) and the commit they run up to; hand the
        latter to :meth:`scrubbed` once the scrub is done. With the writer idle (the
        origin's write lock held) and the WAL just checkpointed whole."""
        with self._mu:
            pages = None if self._all else np.flatnonzero(self._last > self._scrubbed)
            return pages, self._seq

    def scrubbed(self, upto: int) -> None:
        with self._mu:
            self._all = False
            self._scrubbed = max(self._scrubbed, upto)

    def token(self) -> tuple[int, int] | None:
        """Where the file stands for a scan starting now: every page committed at or before
        the token's commit was in the file, scrubbed, before the scan began. None while the
        log cannot vouch for the file (before the first scrub after opening)."""
        with self._mu:
            return None if self._all else (self._generation, self._scrubbed)

    def changed_since(self, token: tuple[int, int]) -> np.ndarray | None:
        """The pages that may hold other bytes than a scan that began at ``token`` read (the
        pages committed after it: their frames were in the WAL or came later); None if the
        log lost track of a write since."""
        generation, upto = token
        with self._mu:
            if generation != self._generation or self._all:
                return None
            return np.flatnonzero(self._last > upto)


@dataclass
class Scrubbed:
    examined: int = 0
    zeroed_pages: int = 0
    zeroed_bytes: int = 0


def gaps(rows: np.ndarray, pages: np.ndarray, usable: int) -> tuple[np.ndarray, np.ndarray]:
    """The unallocated gap ``[lo, hi)`` (page-relative) of each page in ``rows`` (one page a
    row, ``pages`` their numbers); ``lo == hi`` for a page that is no b-tree page or whose
    header does not add up."""
    r = np.arange(rows.shape[0])
    h = np.where(pages == 1, 100, 0)
    kind = rows[r, h]
    inner = (kind == INDEX_INTERIOR) | (kind == TABLE_INTERIOR)
    btree = inner | (kind == INDEX_LEAF) | (kind == TABLE_LEAF)
    ncell = rows[r, h + 3].astype(np.int64) * 256 + rows[r, h + 4]
    lo = h + np.where(inner, 12, 8) + 2 * ncell
    hi = rows[r, h + 5].astype(np.int64) * 256 + rows[r, h + 6]
    hi[hi == 0] = 65536
    ok = btree & (lo <= hi) & (hi <= usable)
    return np.where(ok, lo, 0), np.where(ok, hi, 0)


def scrub(path: str, pages: np.ndarray | None) -> Scrubbed:
    """Zero the unallocated gap of every b-tree page of the database file at ``path`` among
    ``pages`` (None: every page) that holds a non-zero byte there, and fsync. Only with the
    file quiescent: no frame in the WAL, no other writer (see the module docstring)."""
    out = Scrubbed()
    with open(path, "r+b") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        header = os.pread(fd, 100, 0)
        if len(header) < 100:
            return out
        ps = int.from_bytes(header[16:18], "big")
        ps = 65536 if ps == 1 else ps
        usable = ps - header[20]
        npages = size // ps
        if npages == 0:
            return out
        if npages >= MAX_PAGES or int.from_bytes(header[52:56], "big"):  # auto-vacuum: pointer-map pages
            raise ValueError("the gap scrub cannot tell every page kind apart in this file")
        todo = np.arange(1, npages + 1, dtype=np.int64) if pages is None else pages[(pages >= 1) & (pages <= npages)]
        out.examined = int(todo.size)
        if not todo.size:
            return out
        mm = mmap.mmap(fd, npages * ps, access=mmap.ACCESS_READ)
        try:
            data = np.frombuffer(mm, dtype=np.uint8).reshape(npages, ps)
            col = np.arange(ps)
            writes: list[tuple[int, int]] = []
            for i in range(0, todo.size, BLOCK):
                nums = todo[i : i + BLOCK]
                rows = data[nums - 1]  # a copy: the file is written below, not through the map
                lo, hi = gaps(rows, nums, usable)
                has = lo < hi
                if not has.any():
                    continue
                nz = ((rows[has] != 0) & (col >= lo[has, None]) & (col < hi[has, None])).any(axis=1)
                for p, a, b in zip(nums[has][nz].tolist(), lo[has][nz].tolist(), hi[has][nz].tolist(), strict=True):
                    writes.append(((p - 1) * ps + a, b - a))
            del data, rows
        finally:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - an array still views it: the collector closes it
                pass
        for at, n in writes:
            os.pwrite(fd, bytes(n), at)
            out.zeroed_bytes += n
        out.zeroed_pages = len(writes)
        if writes:
            os.fsync(fd)
    return out
