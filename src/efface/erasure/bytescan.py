"""The byte scanner: every file of the store read as 64-bit words, each window hashed and looked up.

The scanner hashes only the windows that start at offsets divisible by 8 (a few vector
operations per word; :mod:`.fingerprint` says how fingerprints still meet a copy at any
alignment), in chunks on :data:`WORKERS` threads, each chunk's windows first passed through a
prefilter bitmap indexed by their keyed sum before the mix (:mod:`.mix`), so only the few that
pass are mixed and looked up (compiled, :mod:`.prefilter`, where available). :class:`ByteScanner`
is the scanning part of :class:`~.fingerprint.Fingerprinter`, under the same keys.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from .. import compiled as jit
from .. import foreground
from . import prefilter
from .hits import Hit, Hits
from .mix import mix, unmix

CHUNK = 1 << 20
"""Bytes hashed per step by the numpy passes: the hash's temporaries of a 1 MB chunk stay in
the cache, where 16 MB chunks made every pass a trip to memory (scan about 1.5-2x faster)."""
COMPILED_CHUNK = 1 << 22
"""Bytes per step for the compiled prefilter (:mod:`.prefilter`), which keeps no temporaries:
a chunk's fixed cost (the look-ups of the few windows that pass, a pause for recalls) was a
fifth of a 1 MB step's time and is a twentieth of a 4 MB one's."""
SHRINKING = ("-wal", "-shm", "-journal")
"""Files another thread may truncate while they are scanned (SQLite's WAL after a checkpoint)."""
_ZERO = np.uint64(0)
BITMAP_BITS, BITMAP_BITS_MAX, BITMAP_FILL = 20, 22, 0.02
"""A window hash's top bits index the scan's prefilter bitmap: 2**20 bits (1 MB: it stays in
cache, where a 16 MB one made every word a cache miss), more when the fingerprints would fill
more than ``BITMAP_FILL`` of it, and every window that passes costs a mix and a binary search
(the 72,000 fingerprints of a 1,000-record erasure: 509 MB/s with 2**20 bits, 761 with 2**22;
7,200 of a 100-record one: 1,007 MB/s with 2**20, 922 with 2**22; measured on one file)."""
WORKERS = max(1, min(4, os.cpu_count() or 1))
"""Threads a scan uses: numpy releases the GIL in its loops, so chunks hash in parallel."""
_local = threading.local()


def _buffers() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This thread's scratch arrays for one chunk's words (the scan's hot loop reuses them)."""
    got = getattr(_local, "buffers", None)
    if got is None:
        n = max(CHUNK, COMPILED_CHUNK) // 8 + 1
        got = _local.buffers = (
            np.empty(n, np.uint64),
            np.empty(n, np.uint64),
            np.empty(n, np.uint64),
            np.empty(n, bool),
        )
    return got


def chunk_size(compiled: bool) -> int:
    """Bytes a scan hashes per step: larger with the compiled prefilter."""
    return COMPILED_CHUNK if compiled else CHUNK


class WindowHashes(Protocol):
    """What a scan looks for: window hashes per item kind, by window (the fingerprints of
    :class:`~.fingerprint.Fingerprints`)."""

    @property
    def w16(self) -> dict[str, np.ndarray]: ...

    @property
    def w8(self) -> dict[str, np.ndarray]: ...

    @property
    def u8(self) -> dict[str, np.ndarray]: ...


class ByteScanner:
    """Scans files for fingerprints, under the keys of the :class:`~.fingerprint.Fingerprinter`
    it is part of."""

    _k0: np.uint64
    _k1: np.uint64
    _k2: np.uint64
    _k3: np.uint64
    _k4: np.uint64

    def scan_buffer(self, data: bytes, tables: dict, name: str = "", base: int = 0) -> list[Hit]:
        """Every place in ``data`` where a fingerprint of the ``tables`` (made by :meth:`tables`)
        occurs, with offsets plus ``base``."""
        if not tables or len(data) < 8:
            return []
        return [
            Hit(h.file, h.offset + base, h.width, h.kind, h.hash) for h in self._scan_all(data, len(data), tables, name)
        ]

    def scan(
        self, paths: list[str], fp: WindowHashes, root: str = "", copies: dict[str, bytes] | None = None
    ) -> tuple[list[Hit], int]:
        """Every place in ``paths`` where a fingerprint of ``fp`` occurs, and the bytes read.
        The files that shrink under the scan (the WAL) are read as a copy, kept in ``copies``
        (by name) when given, so that the caller looks at the bytes that were scanned.
        Chunks of every file are hashed on :data:`WORKERS` threads."""
        hits, scanned = self.scan_arrays(paths, fp, root, copies)
        return hits.objects(), scanned

    def scan_arrays(
        self,
        paths: list[str],
        fp: WindowHashes,
        root: str = "",
        copies: dict[str, bytes] | None = None,
        only: dict[str, list[tuple[int, int]]] | None = None,
        read_copies: bool = False,
    ) -> tuple[Hits, int]:
        """:meth:`scan`, its hits as arrays. ``only`` limits the scan of a file (by path) to
        windows starting in its ``[start, end)`` byte ranges (8-aligned starts).
        ``read_copies``: read every file as a copy, never mapped (files another process may
        truncate under the scan: a database server's relations, which VACUUM shortens)."""
        only = only or {}
        tables = self.tables(fp)
        scanned = 0
        buffers: list[tuple[str, Any, int]] = []
        limits: list[list[tuple[int, int]] | None] = []
        maps: list[mmap.mmap] = []
        try:
            for path in paths:
                try:
                    size = os.path.getsize(path)
                except OSError:
                    continue  # gone between listing and reading (a temp file renamed): nothing to scan
                ranges = only.get(path)
                scanned += size if ranges is None else sum(min(e, size) - min(s, size) for s, e in ranges)
                if size < 8 or not tables:
                    continue
                name = os.path.relpath(path, root) if root else path
                with open(path, "rb") as f:
                    if read_copies or path.endswith(SHRINKING):
                        # The scan runs beside the compactor, which truncates these files: a mapped
                        # page cut off under the scan would kill the process (SIGBUS), so read a copy.
                        data: Any = f.read()
                        if copies is not None:
                            copies[name] = data
                        buffers.append((name, data, len(data)))
                        limits.append(None)
                        continue
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    maps.append(mm)
                    buffers.append((name, mm, size))
                    limits.append(ranges)
            names = [name for name, _buf, _size in buffers]
            compiled = jit.for_scan(scanned)
            step = chunk_size(compiled)
            tasks = []
            for i, ((_n, buf, size), limit) in enumerate(zip(buffers, limits, strict=True)):
                for lo, hi in limit if limit is not None else [(0, size)]:
                    hi = min(hi, size)
                    for start in range(lo - lo % 8, hi, step):
                        tasks.append((i, buf, start, min(hi, start + step), size))
            return self._gather(names, tables, self._map_chunks(tasks, tables, compiled)), scanned
        finally:
            for mm in maps:
                mm.close()

    @staticmethod
    def _gather(names: list[str], tables: dict, found: list[tuple[np.ndarray, ...]]) -> Hits:
        kinds: list[str] = []
        for _values, _kinds, tnames, _bitmap, _width in tables.values():
            kinds.extend(k for k in tnames if k not in kinds)
        parts = [f for f in found if f[0].size]
        if not parts:
            empty = np.empty(0, np.int64)
            return Hits(names, kinds, empty, empty, empty, empty, np.empty(0, np.uint64))
        return Hits(names, kinds, *(np.concatenate([p[i] for p in parts]) for i in range(5)))

    def _map_chunks(
        self, tasks: list[tuple[int, Any, int, int, int]], tables: dict, compiled: bool
    ) -> list[tuple[np.ndarray, ...]]:
        def one(task: tuple[int, Any, int, int, int]) -> tuple[np.ndarray, ...]:
            file, buf, start, end, size = task
            foreground.give_way()  # verify and wait scan beside reads: recalls first
            # chunks overlap by one word so a 16-byte window across the seam is seen
            return self._scan_chunk(buf, start, min(size, end + 8), tables, file, (end - start + 7) // 8, compiled)

        if WORKERS == 1 or len(tasks) < 2:
            return [one(t) for t in tasks]
        with ThreadPoolExecutor(WORKERS, thread_name_prefix="efface-scan") as pool:
            return list(pool.map(one, tasks))

    def tables(self, fp: WindowHashes) -> dict:
        """The lookup tables a scan of ``fp`` uses (one prefilter bitmap per window width)."""
        tables = {}
        for group, width in (("w16", 16), ("w8", 8), ("u8", 8)):
            arrays = getattr(fp, group)
            if not any(a.size for a in arrays.values()):
                continue
            values = np.concatenate([a for a in arrays.values()])
            kinds = np.concatenate([np.full(a.size, i, dtype=np.int32) for i, a in enumerate(arrays.values())])
            order = np.argsort(values, kind="stable")
            # The bitmap is indexed by the window's words summed under the keys, before the
            # mix: the scan then mixes only the windows that pass (under 1 in 100 when the
            # fingerprints fill under BITMAP_FILL of its bits).
            bits = min(BITMAP_BITS_MAX, max(BITMAP_BITS, math.ceil(math.log2(max(1.0, values.size / BITMAP_FILL)))))
            bitmap = np.zeros(1 << bits, dtype=bool)
            bitmap[(unmix(values, self._k3, self._k4) >> np.uint64(64 - bits)).astype(np.int64)] = True
            tables[group] = (values[order], kinds[order], list(arrays), bitmap, width)
        return tables

    def _scan_all(self, buf: Any, size: int, tables: dict, name: str) -> list[Hit]:
        compiled = jit.for_scan(size)
        step = chunk_size(compiled)
        found = self._map_chunks(
            [(0, buf, start, min(size, start + step), size) for start in range(0, size, step)], tables, compiled
        )
        return self._gather([name], tables, found).objects()

    def _scan_chunk(
        self, mm, start: int, end: int, tables, file: int, starts: int, compiled: bool = False
    ) -> tuple[np.ndarray, ...]:
        """The hits in ``[start, end)``: arrays of file, offset, width, kind (index into the
        kinds of every table, in order) and hash."""
        offs: list[np.ndarray] = []
        widths: list[np.ndarray] = []
        kinds_out: list[np.ndarray] = []
        hashes: list[np.ndarray] = []
        kind_base: dict[str, int] = {}
        for _values, _kinds, tnames, _bitmap, _width in tables.values():
            for k in tnames:
                kind_base.setdefault(k, len(kind_base))
        nwords = (end - start) // 8
        words = np.frombuffer(mm, dtype="<u8", count=nwords, offset=start)
        limit = min(starts, nwords)  # windows starting past the chunk belong to the next one
        for group, (values, kinds, names, bitmap, width) in tables.items():
            shifts: Sequence[int] = range(8) if group == "u8" else (0,)
            for r in shifts:
                if r:
                    n = (end - start - r) // 8
                    if n <= 0:
                        continue
                    w = np.frombuffer(mm, dtype="<u8", count=n, offset=start + r)
                else:
                    w = words
                u, tmp, idx, hit = _buffers()
                shift = np.uint64(65 - bitmap.size.bit_length())
                m = max(0, min(limit, w.size - 1)) if width == 16 else min(limit, w.size)
                if compiled:
                    # One compiled pass: the windows that pass the bitmap, with their sums.
                    ka, kb = (self._k1, self._k2) if width == 16 else (self._k0, _ZERO)
                    cand, sums = prefilter.run(width, w, m, ka, kb, shift, bitmap, idx.view(np.int64), tmp)
                    if cand.size == 0:
                        continue
                    hc = mix(sums, self._k3, self._k4)
                else:
                    # Into this thread's buffers, and the bitmap indexed by an int64 view: a fresh
                    # array per step and numpy's cast of uint64 indices made this loop ~6x slower.
                    if width == 16:
                        u, tmp, idx, hit = u[:m], tmp[:m], idx[:m], hit[:m]
                        np.multiply(w[:m], self._k1, out=u)
                        np.multiply(w[1 : m + 1], self._k2, out=tmp)
                        np.add(u, tmp, out=u)
                    else:
                        u, idx, hit = u[:m], idx[:m], hit[:m]
                        np.multiply(w[:m], self._k0, out=u)
                    np.right_shift(u, shift, out=idx)
                    np.take(bitmap, idx.view(np.int64), out=hit)
                    cand = np.flatnonzero(hit)
                    if cand.size == 0:
                        continue
                    hc = mix(u[cand], self._k3, self._k4)
                pos = np.searchsorted(values, hc)
                pos[pos >= values.size] = values.size - 1
                found = values[pos] == hc
                if not found.any():
                    continue
                at = cand[found].astype(np.int64)
                p = pos[found]
                remap = np.asarray([kind_base[k] for k in names], dtype=np.int64)
                offs.append(start + r + 8 * at)
                widths.append(np.full(at.size, width, dtype=np.int64))
                kinds_out.append(remap[kinds[p]])
                hashes.append(values[p])
        if not offs:
            empty = np.empty(0, np.int64)
            return empty, empty, empty, empty, np.empty(0, np.uint64)
        off = np.concatenate(offs)
        return (
            np.full(off.size, file, dtype=np.int64),
            off,
            np.concatenate(widths),
            np.concatenate(kinds_out),
            np.concatenate(hashes).astype(np.uint64),
        )
