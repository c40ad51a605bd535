"""Keyed fingerprints of erased content, and the byte scanner that looks for them.

``verify`` must show that no byte of an erased record is left in any file of the store,
without keeping the record to look for it (docs/concepts.md §3). At forget time we keep only keyed
64-bit hashes of short windows of the erased bytes (text, key, embedding); a scan hashes
the windows of every file the same way and looks for a match. The fingerprints are
deleted once ``erased`` is proven.

Windows and alignment. The scanner reads a file as little-endian 64-bit words and hashes
only the windows that start at offsets divisible by 8: that is what makes it fast (a few
vector operations per word). The fingerprints of an item therefore cover every starting
offset inside sampled regions, so a copy of the item at any alignment is still met:

- items of at least 23 bytes: 16-byte windows starting at offsets ``o`` with
  ``o % REGION < 8``; a whole copy, or any fragment of ``REGION + 23`` bytes, is found;
- items of 15 to 22 bytes: the 8-byte windows starting at offsets 0 to 7;
- items of 8 to 14 bytes: the 8-byte window at offset 0, found by an unaligned pass
  (eight shifted scans, run only when such items exist);
- shorter items cannot be fingerprinted; :class:`Fingerprints` counts them, and verify
  reports "cannot verify" for them rather than a silent pass.

Windows with fewer than five distinct byte values, or more than a quarter zero bytes, are
skipped: runs of zeros or spaces, and the mostly-zero windows of sparse vectors (a single
common float among zeros), occur everywhere and would match everywhere. A sparse vector can
therefore end up with no fingerprint at all; its text still has them. A text, key or
identifier whose every window is too uniform ("ha ha ha ha") keeps them anyway, unless
they are mostly zero bytes: the whole-item check below tells its copies from chance.

Sites and whole items. An 8-byte window of a short text ("customer support call") also
occurs in a purpose, a tenant name, a schema word or a full-text term, so a window alone
does not show that the text is there. Beside the window hashes, each window keeps its site
(which item, at which offset), and each item a keyed hash of its whole bytes and its
length: at a hit, the verifier reads the bytes where the whole item would lie and compares.

Coverage. A skipped window leaves the alignments it stood for unseen: ``"+1 415 555 0142"``
has three windows of four distinct bytes, and a copy of it at five of eight alignments was
found by no window, so verify said ``erased`` with the phone number on disk (the state
machine met it). So an item of a text-like kind (``REGION`` sampling) counts as
fingerprinted only when every alignment is covered: all eight windows (15 to 22 bytes), the
one unaligned window (8 to 14), or one whole run of eight offsets (23 and more). Where the
strict windows leave a gap, the item's windows with at least three distinct bytes fill it
(a copy of the item is what they meet; a false match only fails closed); an item still not
covered, if it is a text, key, identifier or name, takes its uniform windows too (a chance
match of one fails closed); an item still not covered (mostly zero bytes) counts in
``too_short``, so verify says it cannot check it rather than pass.
Embeddings (``VECTOR_REGION``) keep the looser rule: a sparse vector's text has fingerprints.

Hash. For the words ``a, b`` of a window, ``h = a*K1 + b*K2 mod 2**64`` (``a*K0`` for an
8-byte window) with secret odd multipliers, then a keyed non-linear finalisation. Without
the store's secret a fingerprint says nothing about the bytes; with it, short windows
could be guessed, which is why fingerprints live only in the origin beside the secret and
are discarded as soon as the erasure is proven.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import compiled as jit
from .. import foreground
from . import prefilter
from .hits import Hit, Hits

REGION = 64
"""Text and key windows are sampled in runs of 8 offsets every ``REGION`` bytes."""
VECTOR_REGION = 256
"""Embeddings are longer and uniform: sparser sampling still finds a whole copy."""
MIN_BYTES = 8
CHUNK = 1 << 20
"""Bytes hashed per step by the numpy passes: the hash's temporaries of a 1 MB chunk stay in
the cache, where 16 MB chunks made every pass a trip to memory (scan about 1.5-2x faster)."""
COMPILED_CHUNK = 1 << 22
"""Bytes per step for the compiled prefilter (:mod:`.prefilter`), which keeps no temporaries:
a chunk's fixed cost (the look-ups of the few windows that pass, a pause for recalls) was a
fifth of a 1 MB step's time and is a twentieth of a 4 MB one's."""
SHRINKING = ("-wal", "-shm", "-journal")
"""Files another thread may truncate while they are scanned (SQLite's WAL after a checkpoint)."""
_MIN_DISTINCT = 5
_MIN_DISTINCT_GAP = 3
"""Distinct bytes a window needs to fill an alignment gap left by the strict rule."""
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
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


def _keys(secret: bytes) -> np.ndarray:
    raw = hashlib.blake2b(b"efface-fingerprint-keys", key=secret[:64], digest_size=48).digest()
    k = np.frombuffer(raw, dtype="<u8").copy()
    k[:3] |= np.uint64(1)  # odd multipliers are invertible mod 2**64: no window is lost
    return k


def _mix(x: np.ndarray, k3: np.uint64, k4: np.uint64) -> np.ndarray:
    """Keyed finalisation (two splitmix64 rounds around secret offsets), in place."""
    x ^= k3
    for _ in range(1):
        x ^= x >> _S30
        x *= _M1
        x ^= x >> _S27
        x *= _M2
        x ^= x >> _S31
        x += k4
    return x


_INV1 = np.uint64(pow(int(_M1), -1, 1 << 64))
_INV2 = np.uint64(pow(int(_M2), -1, 1 << 64))


def _unshift(y: np.ndarray, r: int) -> np.ndarray:
    """The inverse of ``x ^ (x >> r)`` on 64-bit words."""
    x = y.copy()
    for _ in range(64 // r):
        x = y ^ (x >> np.uint64(r))
    return x


def _unmix(h: np.ndarray, k3: np.uint64, k4: np.uint64) -> np.ndarray:
    """The inverse of :func:`_mix` (every step is a bijection of 64-bit words): the scanner's
    prefilter looks at the linear sum of a window's words before it is mixed, so the mix is
    computed only for the few windows that pass."""
    x = h - k4
    x = _unshift(x, 31)
    x *= _INV2
    x = _unshift(x, 27)
    x *= _INV1
    x = _unshift(x, 30)
    x ^= k3
    return x


@dataclass
class Fingerprints:
    """Fingerprints of one erasure, by the kind of item they came from."""

    w16: dict[str, np.ndarray] = field(default_factory=dict)
    """Aligned 16-byte window hashes per item kind (``text``, ``key``, ``embedding`` ...)."""
    w8: dict[str, np.ndarray] = field(default_factory=dict)
    """Aligned 8-byte window hashes per item kind."""
    u8: dict[str, np.ndarray] = field(default_factory=dict)
    """8-byte window hashes found by the unaligned pass."""
    items: dict[str, int] = field(default_factory=dict)
    """How many items of each kind were fingerprinted."""
    too_short: dict[str, int] = field(default_factory=dict)
    """Items too short (or too uniform) to fingerprint, per kind."""
    site_h: dict[str, np.ndarray] = field(default_factory=dict)
    """Per kind, the hash of every kept window (sorted; repeated when windows repeat) ..."""
    site_i: dict[str, np.ndarray] = field(default_factory=dict)
    """... the number of the item it came from ..."""
    site_o: dict[str, np.ndarray] = field(default_factory=dict)
    """... and its offset inside that item."""
    item_h: dict[str, np.ndarray] = field(default_factory=dict)
    """Per kind, a keyed hash of each item's whole bytes, by item number."""
    item_n: dict[str, np.ndarray] = field(default_factory=dict)
    """Per kind, each item's length in bytes, by item number."""

    def count(self) -> int:
        return sum(a.size for d in (self.w16, self.w8, self.u8) for a in d.values())

    def has_sites(self, kind: str) -> bool:
        """Whether the windows of ``kind`` know their items (fingerprints made by an older
        efface do not: their hits can only be judged window by window)."""
        return kind in self.site_h

    def sites(self, kind: str, h: int) -> list[tuple[int, int, int]]:
        """Every (item number, offset in the item, item length) whose window hashes to ``h``."""
        hs = self.site_h.get(kind)
        if hs is None:
            return []
        key = np.uint64(h)
        lo, hi = int(np.searchsorted(hs, key, "left")), int(np.searchsorted(hs, key, "right"))
        items, offs = self.site_i[kind][lo:hi], self.site_o[kind][lo:hi]
        return [(int(i), int(o), int(self.item_n[kind][int(i)])) for i, o in zip(items, offs, strict=True)]

    def sites_all(self, h: int) -> list[tuple[str, int, int, int]]:
        """Every (kind, item, offset, length) whose window hashes to ``h``, whatever the kind
        the scanner named (one window may come from a text and a key alike)."""
        return [(kind, i, o, n) for kind in self.site_h for i, o, n in self.sites(kind, h)]

    def whole(self, kind: str, item: int) -> int:
        return int(self.item_h[kind][item])

    def to_blob(self) -> bytes:
        """A compact serialisation: a JSON header and the arrays (no content, only hashes)."""
        import json

        parts: list[bytes] = []
        arrays: list[list[Any]] = []
        header = {"items": self.items, "too_short": self.too_short, "arrays": arrays}
        for group in ("w16", "w8", "u8", "site_h", "site_i", "site_o", "item_h", "item_n"):
            for kind, arr in getattr(self, group).items():
                arrays.append([group, kind, int(arr.size)])
                parts.append(np.ascontiguousarray(arr, dtype="<u8").tobytes())
        head = json.dumps(header).encode()
        return len(head).to_bytes(4, "little") + head + b"".join(parts)

    @classmethod
    def from_blob(cls, blob: bytes) -> Fingerprints:
        import json

        n = int.from_bytes(blob[:4], "little")
        header = json.loads(blob[4 : 4 + n])
        fp = cls(items=header["items"], too_short=header["too_short"])
        pos = 4 + n
        for group, kind, size in header["arrays"]:
            arr = np.frombuffer(blob, dtype="<u8", count=size, offset=pos).copy()
            pos += size * 8
            getattr(fp, group)[kind] = arr
        return fp


def _covered(owners: np.ndarray, local: np.ndarray, usable: np.ndarray, group: str, region: int) -> np.ndarray:
    """The owners whose chosen windows see a copy at every alignment: all eight (``w8``),
    the one unaligned window (``u8``), or one whole run of eight offsets (``w16``)."""
    need = 1 if group == "u8" else 8
    runs = owners if group != "w16" else owners.astype(np.int64) * (1 << 32) + local // region
    ids, counts = np.unique(runs[usable], return_counts=True)
    full = ids[counts >= need]
    return np.unique(full if group != "w16" else full >> 32)


class Fingerprinter:
    """Makes fingerprints and scans files for them, under one store's secret."""

    def __init__(self, secret: bytes):
        k = _keys(secret)
        self._k0, self._k1, self._k2, self._k3, self._k4 = (np.uint64(x) for x in k[:5])
        self._whole_key = hashlib.blake2b(b"efface-fingerprint-whole", key=secret[:64], digest_size=32).digest()

    def whole(self, data: bytes) -> int:
        """A keyed 64-bit hash of an item's whole bytes (to confirm that a hit is the item)."""
        return int.from_bytes(hashlib.blake2b(data, key=self._whole_key, digest_size=8).digest(), "little")

    # -- fingerprints ------------------------------------------------------------------
    def add(self, fp: Fingerprints, kind: str, data: bytes, region: int = REGION) -> None:
        """Fingerprint one item of ``kind`` into ``fp``."""
        self.add_many(fp, kind, [data], region)

    def add_many(
        self, fp: Fingerprints, kind: str, items: list[bytes], region: int = REGION, uniform: bool = False
    ) -> None:
        """Fingerprint many items of one kind at once (one vectorised pass per window width).
        An item too short, or whose every sampled window is too uniform (unless ``uniform``:
        then only mostly-zero windows are refused), gets no fingerprint and is counted in
        ``fp.too_short``. Every kept window records its site (item, offset), and every item
        its whole hash and length, so a verifier can check that a hit is the whole item."""
        groups: dict[str, tuple[list[bytes], list[np.ndarray], list[np.ndarray], list[np.ndarray]]] = {
            "w16": ([], [], [], []),
            "w8": ([], [], [], []),
            "u8": ([], [], [], []),
        }
        offset = {"w16": 0, "w8": 0, "u8": 0}
        base = fp.items.get(kind, 0)
        fp.items[kind] = base + len(items)
        short = 0
        for number, data in enumerate(items):
            n = len(data)
            if n >= 23:
                group, local = "w16", np.arange(0, n - 15)
                local = local[(local % region) < 8]
            elif n >= 15:
                group, local = "w8", np.arange(0, 8)
            elif n >= MIN_BYTES:
                group, local = "u8", np.arange(0, 1)
            else:
                short += 1
                continue
            bufs, starts, owners, locals_ = groups[group]
            bufs.append(data)
            starts.append(local + offset[group])
            owners.append(np.full(local.size, base + number))
            locals_.append(local)
            offset[group] += n
        sites: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for group, (bufs, starts, owners, locals_) in groups.items():
            if not bufs:
                continue
            hashes, who, where, kept = self._windows(
                b"".join(bufs),
                np.concatenate(starts),
                16 if group == "w16" else 8,
                np.concatenate(owners),
                np.concatenate(locals_),
                uniform,
                (group, region) if region == REGION else None,
            )
            short += len(bufs) - kept
            if hashes.size == 0:
                continue
            sites.append((hashes, who, where))
            target = getattr(fp, group)
            prev = target.get(kind)
            unique = np.unique(hashes)
            target[kind] = unique if prev is None else np.union1d(prev, unique)
        item_h = np.fromiter((self.whole(d) for d in items), dtype=np.uint64, count=len(items))
        item_n = np.asarray([len(d) for d in items], dtype=np.uint64)
        fp.item_h[kind] = np.concatenate([fp.item_h.get(kind, np.empty(0, np.uint64)), item_h])
        fp.item_n[kind] = np.concatenate([fp.item_n.get(kind, np.empty(0, np.uint64)), item_n])
        if kind in fp.site_h:
            sites.append((fp.site_h[kind], fp.site_i[kind], fp.site_o[kind]))
        if sites:
            h = np.concatenate([a for a, _, _ in sites])
            order = np.argsort(h, kind="stable")
            fp.site_h[kind] = h[order]
            fp.site_i[kind] = np.concatenate([b for _, b, _ in sites]).astype(np.uint64)[order]
            fp.site_o[kind] = np.concatenate([c for _, _, c in sites]).astype(np.uint64)[order]
        elif kind not in fp.site_h:
            empty = np.empty(0, np.uint64)
            fp.site_h[kind], fp.site_i[kind], fp.site_o[kind] = empty, empty, empty
        if short:
            fp.too_short[kind] = fp.too_short.get(kind, 0) + short

    def _windows(
        self,
        data: bytes,
        starts: np.ndarray,
        width: int,
        owners: np.ndarray,
        local: np.ndarray,
        uniform: bool = False,
        coverage: tuple[str, int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The hashes of the usable windows with their owners and offsets in their owners,
        and how many distinct owners are fingerprinted: with ``coverage`` (group, region),
        those whose every alignment is covered (see the module docstring); without it, those
        that kept at least one window."""
        arr = np.frombuffer(data, dtype=np.uint8)
        win = np.lib.stride_tricks.sliding_window_view(arr, width)[starts]
        ordered = np.sort(win, axis=1)
        distinct = 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1)
        zeros = width - np.count_nonzero(win, axis=1)
        sparse = zeros <= width // 4
        usable = (distinct >= _MIN_DISTINCT) & sparse
        if uniform and width == 8:
            # A short item counts only where it is whole (the verifier checks at each hit), so
            # a uniform window costs a few extra checks, never a false residue: keep them all,
            # and a copy at any alignment is met.
            usable = sparse
        elif uniform:
            # a long item with no varied window keeps its uniform ones
            bare = np.setdiff1d(owners, owners[usable])
            usable |= sparse & np.isin(owners, bare)
        if coverage is not None:
            group, region = coverage
            covered = _covered(owners, local, usable, group, region)
            loose = (distinct >= _MIN_DISTINCT_GAP) & sparse
            usable |= loose & ~np.isin(owners, covered)
            if uniform:
                # Still a gap ("lol hahahahahahahahaha ok": every 16-byte window at four of
                # eight alignments is two letters): the item's uniform windows fill it. They
                # meet more bytes by chance; a hit is judged like any other, so a chance
                # match can only fail closed, and a copy of the item is never unseen.
                covered = _covered(owners, local, usable, group, region)
                usable |= sparse & ~np.isin(owners, covered)
            kept = int(_covered(owners, local, usable, group, region).size)
        else:
            kept = int(np.unique(owners[usable]).size)
        win = np.ascontiguousarray(win[usable])
        if win.shape[0] == 0:
            empty = np.empty(0, dtype=np.uint64)
            return empty, empty, empty, kept
        words = win.view("<u8").reshape(win.shape[0], width // 8)
        hashes = self._hash(words[:, 0], words[:, 1] if width == 16 else None)
        return hashes, owners[usable], local[usable], kept

    def _hash(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        if b is None:
            h = a * self._k0
        else:
            h = a * self._k1
            h += b * self._k2
        return _mix(h, self._k3, self._k4)

    # -- scanning ----------------------------------------------------------------------
    def window_hashes(self, windows: Sequence[bytes]) -> list[int | None]:
        """:meth:`window_hash` of many windows at once (None for one not 8 or 16 bytes long)."""
        out: list[int | None] = [None] * len(windows)
        for width in (8, 16):
            at = [i for i, w in enumerate(windows) if len(w) == width]
            if not at:
                continue
            words = np.frombuffer(b"".join(windows[i] for i in at), dtype="<u8").reshape(len(at), width // 8)
            got = self._hash(words[:, 0].copy(), words[:, 1].copy() if width == 16 else None)
            for i, h in zip(at, got.tolist(), strict=True):
                out[i] = h
        return out

    def hash_words(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        """The hashes the scanner gives windows made of the words ``a`` (and ``b``: 16 bytes)."""
        return self._hash(a.astype(np.uint64, copy=True), None if b is None else b.astype(np.uint64, copy=True))

    def window_hash(self, window: bytes) -> int:
        """The hash the scanner gives an 8- or 16-byte window."""
        words = np.frombuffer(window, dtype="<u8")
        return int(self._hash(words[:1], words[1:2] if len(window) == 16 else None)[0])

    def scan_buffer(self, data: bytes, tables: dict, name: str = "", base: int = 0) -> list[Hit]:
        """Every place in ``data`` where a fingerprint of the ``tables`` (made by :meth:`tables`)
        occurs, with offsets plus ``base``."""
        if not tables or len(data) < 8:
            return []
        return [
            Hit(h.file, h.offset + base, h.width, h.kind, h.hash) for h in self._scan_all(data, len(data), tables, name)
        ]

    def scan(
        self, paths: list[str], fp: Fingerprints, root: str = "", copies: dict[str, bytes] | None = None
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
        fp: Fingerprints,
        root: str = "",
        copies: dict[str, bytes] | None = None,
        only: dict[str, list[tuple[int, int]]] | None = None,
    ) -> tuple[Hits, int]:
        """:meth:`scan`, its hits as arrays. ``only`` limits the scan of a file (by path) to
        windows starting in its ``[start, end)`` byte ranges (8-aligned starts)."""
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
                    if path.endswith(SHRINKING):
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

    def tables(self, fp: Fingerprints) -> dict:
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
            bitmap[(_unmix(values, self._k3, self._k4) >> np.uint64(64 - bits)).astype(np.int64)] = True
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
                    hc = _mix(sums, self._k3, self._k4)
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
                    hc = _mix(u[cand], self._k3, self._k4)
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
