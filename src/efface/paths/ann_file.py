"""A saved usearch index file, read far enough to overwrite the vectors of given keys in place.

An erasure must take the erased vectors out of the ANN file. Saving the whole index does it,
but costs what the index weighs (about a second for 508 MiB at a million records, most of it
with the GIL held, so every recall in the process waits). The file's vectors sit in one
matrix, a row per slot, so the rows of the erased keys can be overwritten where they lie.

usearch 2 writes a dense index as: the vectors (``u32`` rows, ``u32`` bytes per row, then the
rows in slot order); a 64-byte head that begins with the magic ``usearch``; then the graph: a
40-byte header (size, connectivity, base connectivity, max level and entry slot, each
``u64``), every node's level (``i16``), and every node's tape: its key (``u64``), its level
(``i16``), and per level a neighbour count (``u32``) and its neighbour slots (``u32``; the base
connectivity of them at level 0, the connectivity above). A file that does not read so (a
different usearch layout, a torn file) gives None, and the caller saves the whole index.

The graph's tapes stay: a removed record's key (an integer id, never content) and its links
until the next whole save, as the in-memory graph keeps them until a rebuild.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAGIC = b"usearch"
MATRIX_HEADER = 8
DENSE_HEAD = 64
GRAPH_HEADER = 40


@dataclass(frozen=True)
class Layout:
    size: int
    """The file's length in bytes when read."""
    rows: int
    width: int
    """Bytes per vector row."""
    keys: np.ndarray
    """The key of each slot (``uint64``)."""

    def slots(self, ids: Sequence[int]) -> np.ndarray:
        """The slots whose key is one of ``ids``."""
        if not len(ids):
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(np.isin(self.keys, np.asarray(list(ids), dtype=np.uint64)))


def read_layout(path: str, width: int) -> Layout | None:
    """The layout of the index file at ``path`` whose rows are ``width`` bytes, or None."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < MATRIX_HEADER + DENSE_HEAD + GRAPH_HEADER:
                return None
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                return _parse(mm, size, width)
            finally:
                mm.close()
    except (OSError, ValueError):
        return None


def _parse(mm: mmap.mmap, size: int, width: int) -> Layout | None:
    rows, cols = (int(x) for x in np.frombuffer(mm, "<u4", 2, 0))
    head = MATRIX_HEADER + rows * cols
    graph = head + DENSE_HEAD
    if cols != width or graph + GRAPH_HEADER > size or bytes(mm[head : head + len(MAGIC)]) != MAGIC:
        return None
    n, conn, base, _max_level, _entry = (int(x) for x in np.frombuffer(mm, "<u8", 5, graph))
    levels_at = graph + GRAPH_HEADER
    if n != rows or levels_at + 2 * n > size:
        return None
    if n == 0:
        return Layout(size, rows, cols, np.empty(0, dtype=np.uint64)) if levels_at == size else None
    levels = np.frombuffer(mm, "<i2", n, levels_at).astype(np.int64)
    if levels.min() < 0 or levels.max() > 64:
        return None
    tape = 8 + 2 + (4 + 4 * base) + levels * (4 + 4 * conn)
    first = levels_at + 2 * n
    if first + int(tape.sum()) != size:
        return None
    starts = first + np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(tape)[:-1]])
    data = np.frombuffer(mm, dtype=np.uint8, count=size)
    keys = data[starts[:, None] + np.arange(8)].view("<u8").reshape(-1).astype(np.uint64)
    del data
    return Layout(size, rows, cols, keys)


def overwrite(path: str, layout: Layout, slots: np.ndarray, rng: np.random.Generator) -> None:
    """Overwrite the vector rows of ``slots`` with random bytes, then fsync the file."""
    if slots.size == 0:
        return
    noise = rng.integers(-127, 128, size=(slots.size, layout.width), dtype=np.int8)
    with open(path, "r+b") as f:
        for row, slot in zip(noise, slots.tolist(), strict=True):
            f.seek(MATRIX_HEADER + slot * layout.width)
            f.write(row.tobytes())
        f.flush()
        os.fsync(f.fileno())
