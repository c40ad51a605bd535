"""Which fingerprint hits of a byte scan are residue of the erasure, and which are not.

A hit says that a window of an erased item (8 or 16 bytes) occurs at some place of some
file. Three kinds of hit are not residue of the erasure, and every other hit is:

- **a stray window of a short item.** An item under 23 bytes is looked for whole: its
  8-byte windows also occur in a purpose, a tenant name, a schema word or a full-text term
  ("customer" in "customer support call"). At each hit the bytes where the whole item would
  lie are hashed (the fingerprints keep each window's site and each item's keyed whole
  hash); only a whole copy counts.
- **a live copy, by whole value.** The bytes at the hit belong to a value a live row holds
  (a record's text, key, metadata, sources or embedding, a subject's name or identifiers,
  a tenant or purpose name in use, a schema statement, a term of the full-text index):
  that whole value lies contiguously at that place, and the place is one where the origin
  keeps values of that kind (a page of a live b-tree, in the database file or as a page
  image in the WAL: records' pages hold content and names, the change log's and the
  ledger's only names, the full-text index's only terms). A window shared with a live value is not
  enough: the residue of "Alice prefers tea" in a page's unallocated gap shares " prefers
  tea" with the live "Bob prefers tea", but "Bob prefers tea" is not what lies there. When
  the whole erased item lies at the hit, the live value must contain the whole item.
- **a window of another erasure's item**, while that erasure's bytes wait for the
  compactor: the whole of an item of that newer erasure lies around the hit (and the
  erased item itself does not). The older erasure's own bytes are gone; the other one's
  verification looks for its own.

Copies of the index's vectors are judged by the read paths themselves (``live_copies``).
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np

from .. import foreground
from .fingerprint import Fingerprinter, Fingerprints
from .hits import Hit, Hits

JOIN_BYTES = 8 << 20
"""Live values are matched in batches of about this many bytes (bounded memory)."""
SHORT = 23
"""Items shorter than this are looked for whole (see :mod:`.fingerprint`)."""


class Reader:
    """Random access to the scanned files: the copies the scan read (files that shrink under
    it, such as the WAL) or the files themselves, mapped."""

    def __init__(self, root: str, copies: dict[str, bytes]):
        self._root = root
        self._copies = copies
        self._maps: dict[str, Any] = {}

    def read(self, file: str, start: int, n: int) -> bytes:
        if start < 0 or n <= 0:
            return b""
        data: Any = self._copies.get(file)
        if data is None:
            data = self._maps.get(file)
            if data is None:
                try:
                    with open(os.path.join(self._root, file), "rb") as f:
                        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):
                    data = b""
                self._maps[file] = data
        return bytes(data[start : start + n])

    def array(self, file: str) -> np.ndarray:
        """The whole file as bytes in an array (a view of its copy or mapping), for reads of
        many windows at once."""
        self.read(file, 0, 1)  # maps it, as a read would
        data: Any = self._copies.get(file)
        if data is None:
            data = self._maps.get(file, b"")
        return np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(0, dtype=np.uint8)

    def close(self) -> None:
        for m in self._maps.values():
            if isinstance(m, mmap.mmap):
                m.close()
        self._maps.clear()


class LiveValues:
    """The live values that contain given needles, indexed so that a hit can ask cheaply
    whether one of them lies whole around it: needle -> offset of the needle in the value
    -> the value's length -> value -> its kinds."""

    def __init__(self, needles: set[bytes], values: Iterable[tuple[bytes, str]]):
        import ahocorasick

        self._index: dict[bytes, dict[int, dict[int, dict[bytes, set[str]]]]] = {}
        if not needles:
            return
        automaton = ahocorasick.Automaton()
        for w in needles:
            automaton.add_word(w.decode("latin-1"), w)
        automaton.make_automaton()
        # The automaton runs (in C) over many values joined, rather than once per value: a
        # Python loop per live value made this grow with the store (7.7 s of a 45 s verify at
        # 30k records). A match across two values is dropped by its bounds.
        batch: list[tuple[bytes, str]] = []
        size = 0
        for n, (value, kind) in enumerate(values):
            if n % 256 == 0:
                foreground.give_way()  # a Python loop over every live value: recalls first
            batch.append((value, kind))
            size += len(value) + 1
            if size >= JOIN_BYTES:
                self._add(automaton, batch)
                batch, size = [], 0
        self._add(automaton, batch)

    def _add(self, automaton: Any, batch: list[tuple[bytes, str]]) -> None:
        if not batch:
            return
        starts = list(accumulate((len(v) + 1 for v, _k in batch), initial=0))
        joined = "\n".join(v.decode("latin-1") for v, _k in batch)
        for end, w in automaton.iter(joined):
            s = end - len(w) + 1
            i = bisect_right(starts, s) - 1
            value, kind = batch[i]
            j = s - starts[i]
            if j + len(w) > len(value):
                continue
            by_len = self._index.setdefault(w, {}).setdefault(j, {}).setdefault(len(value), {})
            by_len.setdefault(value, set()).add(kind)

    def around(
        self, needle: bytes, start: int, read: Callable[[int, int], bytes], lo: int, hi: int, kinds: frozenset[str]
    ) -> bool:
        """Whether a live value containing ``needle`` (of one of these ``kinds``) lies whole
        at ``start`` (where the needle begins), inside the page ``[lo, hi)``. A value that
        runs over the page's edge is compared up to the edge (an overflow page starts with a
        4-byte pointer)."""
        for j, by_len in self._index.get(needle, {}).items():
            vstart = start - j
            for n, values in by_len.items():
                if vstart >= lo and vstart + n <= hi:
                    got = values.get(read(vstart, n))
                    if got is not None and not got.isdisjoint(kinds):
                        return True
                    continue
                # over the page's edge: compare the part inside the page
                first = vstart if vstart >= lo else lo + 4
                last = min(vstart + n, hi)
                if first >= last or not (first <= start and start + len(needle) <= last):
                    continue
                inside = read(first, last - first)
                for value, got in values.items():
                    if not got.isdisjoint(kinds) and inside == value[first - vstart : last - vstart]:
                        return True
            if PREFIXED in kinds:
                for n, values in by_len.items():
                    end = start - j + n  # where the value ends, whatever part of it is left out
                    for value, got in values.items():
                        if PREFIXED in got and end <= hi and _tail_at(read, end, value, j, lo):
                            return True
        return False


PREFIXED = "term"
"""Values of this kind may lie with their first part left out: a sorted term list (the leaf
pages of a full-text index) writes each term as the bytes it shares with the term before it
(a count), then its length past them as a varint, then those bytes. A long term's window then
lies in its tail alone; the tail and the varint before it say which live term lies there."""
TAIL_SLACK = 16
"""How many bytes a tail may begin past the first point where the file stops matching the
term backwards (the varint's own bytes may equal the term's bytes before its tail)."""


def _tail_at(read: Callable[[int, int], bytes], end: int, value: bytes, j: int, lo: int) -> bool:
    """Whether ``value[p:]`` for some ``p <= j`` (its tail, holding the needle found at ``j``)
    ends at ``end``, preceded by its length as a varint, inside a page that begins at ``lo``."""
    n = len(value)
    span = min(n, end - lo)
    if span <= 0:
        return False
    got = read(end - span, span)
    if len(got) != span:
        return False
    # the longest tail of the value that the file holds before end: binary search, slices compared in C
    a, b = 0, span
    while a < b:
        m = (a + b + 1) // 2
        if got[span - m :] == value[n - m :]:
            a = m
        else:
            b = m - 1
    for p in range(n - a, min(j, n - a + TAIL_SLACK) + 1):
        k = n - p
        mark = _varint(k)
        if end - k - len(mark) >= lo and read(end - k - len(mark), len(mark)) == mark:
            return True
    return False


def _varint(v: int) -> bytes:
    """The varint of ``v`` as the term lists write it (seven bits a byte, most significant first, the high bit
    set on all but the last; ``v < 2**56``)."""
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.append(0x80 | (v & 0x7F))
        v >>= 7
    return bytes(reversed(out))


@dataclass
class Judgement:
    residue: list[Hit] = field(default_factory=list)
    live: int = 0
    """Hits that lie in a live value."""
    stray: int = 0
    """Hits of a short item's window where the item is not whole."""
    others: int = 0
    """Hits inside a whole item of another erasure still waiting for the compactor."""


def in_live_cells(fpr: Fingerprinter, hits: Hits, cells: Any) -> np.ndarray:
    """Which hits lie in the bytes of a live cell of the origin's database file (``cells``:
    the origin's ``live_cells``), decided with array operations: a window shared with every
    live record (a metadata prefix, a template phrase) is met once per live record, and a
    Python step per hit made the judgement grow with the store. A hit counts only if its
    window still holds what the scan hashed (the file may have changed since)."""
    out = np.zeros(len(hits), dtype=bool)
    if cells is None or not len(hits) or cells.name not in hits.files:
        return out
    # aligned windows only: the unaligned pass's hits are short items, judged whole below
    cand = np.flatnonzero((hits.file == hits.files.index(cells.name)) & (hits.offset % 8 == 0))
    if cand.size == 0:
        return out
    offsets, widths = hits.offset[cand], hits.width[cand]
    inside, a, b = cells.inside_words(offsets, widths)
    # the windows' hashes again, only where they lie in live cells, by width
    again = np.zeros(cand.size, dtype=np.uint64)
    for width in (8, 16):
        at = np.flatnonzero(inside & (widths == width))
        if at.size:
            again[at] = fpr.hash_words(a[at], b[at] if width == 16 else None)
    out[cand] = inside & (again == hits.hash[cand])
    return out


STRAYS_AT_ONCE = 64
"""A window met at least this often is checked for strays with array operations
(:func:`strays`); fewer hits go to the judge one by one."""


def strays(fpr: Fingerprinter, fp: Fingerprints, hits: Hits, reader: Reader) -> np.ndarray:
    """Which hits are strays, decided with array operations: windows of short items only
    (every site of the window's hash shorter than :data:`SHORT`), still holding what the scan
    hashed, with none of those items whole around them. :meth:`Judge.judge` decides the same
    one hit at a time; this is for a window met very often. A subject's name shares its
    first eight bytes with every other subject's ("user-000123", "user-000456"): at 100k
    records that was 460,000 hits and a 7 s ``wait``, growing with the store. Equal byte
    strings are hashed once; a row is only taken as equal to another after comparing its
    bytes, so a collision of the grouping key cannot pass anything."""
    out = np.zeros(len(hits), dtype=bool)
    if not len(hits):
        return out
    values, counts = np.unique(hits.hash, return_counts=True)
    for h in values[counts >= STRAYS_AT_ONCE].tolist():
        sites: dict[tuple[int, int], set[int]] = {}
        for kind, item, o, n in fp.sites_all(h):
            sites.setdefault((o, n), set()).add(fp.whole(kind, item))
        if not sites or any(n >= SHORT for _o, n in sites):
            continue
        at = np.flatnonzero(hits.hash == np.uint64(h))
        for f in np.unique(hits.file[at]).tolist():
            sel = at[hits.file[at] == f]
            data = reader.array(hits.files[f])
            offsets = hits.offset[sel].astype(np.int64)
            same = _unchanged(fpr, data, offsets, hits.width[sel], h)
            whole = np.zeros(len(sel), dtype=bool)
            for (o, n), items in sites.items():
                whole |= _whole_at(fpr, data, offsets - o, n, items)
            out[sel] = same & ~whole
    return out


def _rows(data: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` bytes at each start that lies inside ``data`` (rows), and which did."""
    ok = (starts >= 0) & (starts + n <= data.size)
    return data[starts[ok, None] + np.arange(n)], ok


def _unchanged(fpr: Fingerprinter, data: np.ndarray, offsets: np.ndarray, widths: np.ndarray, h: int) -> np.ndarray:
    """Which windows still hash to ``h`` (the file may have changed since the scan)."""
    out = np.zeros(len(offsets), dtype=bool)
    for w in np.unique(widths).tolist():
        m = np.flatnonzero(widths == w)
        rows, ok = _rows(data, offsets[m], w)
        words = np.ascontiguousarray(rows).view("<u8")
        again = fpr.hash_words(words[:, 0], words[:, 1] if w == 16 else None)
        out[m[ok]] = again == np.uint64(h)
    return out


def _whole_at(fpr: Fingerprinter, data: np.ndarray, starts: np.ndarray, n: int, items: set[int]) -> np.ndarray:
    """Which starts begin one of ``items`` (keyed whole hashes) of ``n`` bytes: each distinct
    byte string hashed once."""
    out = np.zeros(len(starts), dtype=bool)
    rows, ok = _rows(data, starts, n)
    if not len(rows):
        return out
    padded = np.zeros((len(rows), 24), dtype=np.uint8)  # n < SHORT = 23: three words
    padded[:, :n] = rows
    words = padded.view("<u8")
    key = words[:, 0] * np.uint64(0x9E3779B97F4A7C15) ^ words[:, 1] * np.uint64(0xC2B2AE3D27D4EB4F) ^ words[:, 2]
    _keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    equal = (words == words[first[inverse]]).all(axis=1)  # grouped only when truly equal
    found = np.fromiter((fpr.whole(rows[i].tobytes()) in items for i in first.tolist()), dtype=bool, count=len(first))
    got = found[inverse]
    # a row whose key it shares with a different string is hashed on its own
    for i in np.flatnonzero(~equal).tolist():
        got[i] = fpr.whole(rows[i].tobytes()) in items
    out[np.flatnonzero(ok)] = got
    return out


class Judge:
    """Judges the hits of one scan (see the module's docstring)."""

    def __init__(
        self,
        fpr: Fingerprinter,
        fp: Fingerprints,
        reader: Reader,
        regions: Any,
        values: Callable[[bool], Iterable[tuple[bytes, str]]] | None,
        others: Callable[[], Sequence[bytes]],
    ):
        self._fpr, self._fp, self._reader = fpr, fp, reader
        self._regions = regions
        self._values = values
        self._others = others
        self._other_fps: list[tuple[Fingerprints, dict]] | None = None
        self._by_hash: dict[int, dict[tuple[int, int], tuple[set[int], set[str]]]] = {}

    def _sites(self, h: int) -> dict[tuple[int, int], tuple[set[int], set[str]]]:
        """The sites of a window hash grouped by (offset, item length): the whole hashes of
        the items there and their kinds (a common window has many sites, few groups)."""
        got = self._by_hash.get(h)
        if got is None:
            got = {}
            for kind, item, o, n in self._fp.sites_all(h):
                items, kinds = got.setdefault((o, n), (set(), set()))
                items.add(self._fp.whole(kind, item))
                kinds.add(kind)
            self._by_hash[h] = got
        return got

    def judge(self, hits: Sequence[Hit]) -> Judgement:
        out = Judgement()
        read = self._reader.read
        # 1. What lies at each hit: whole items (the needle is the item), or only the window.
        pending: list[tuple[Hit, list[tuple[bytes, int]], bool]] = []
        needles: set[bytes] = set()
        embeddings = False
        windows = [read(h.file, h.offset, h.width) for h in hits]
        hashes = self._fpr.window_hashes(windows)  # one vectorised pass, not a call per hit
        for h, window, again in zip(hits, windows, hashes, strict=True):
            if len(window) != h.width or again != h.hash:
                out.residue.append(h)  # the file changed under the scan: fail closed
                continue
            sites = self._sites(h.hash)
            wholes: list[tuple[bytes, int]] = []
            for (o, n), (items, kinds) in sites.items():
                start = h.offset - o
                data = read(h.file, start, n)
                if len(data) == n and self._fpr.whole(data) in items:
                    wholes.append((data, start))
                    embeddings |= "embedding" in kinds
            long_item = any(n >= SHORT for _o, n in sites) or not sites
            if not wholes and not long_item:
                out.stray += 1
                continue
            embeddings |= h.kind == "embedding"
            needles.update(d for d, _ in wholes)
            if not wholes:
                needles.add(window)
            pending.append((h, wholes, long_item))
        if not pending:
            return out
        # 2. One pass over the live values for every needle.
        live = LiveValues(needles, self._values(embeddings) if self._values is not None else ())
        for h, wholes, _long in pending:
            bounds = self._regions.bounds(h.file, h.offset, read) if self._regions is not None else None

            def around(needle: bytes, start: int, h=h, bounds=bounds) -> bool:
                if bounds is None:
                    return False
                lo, hi, kinds = bounds
                return live.around(needle, start, lambda s, n: read(h.file, s, n), lo, hi, kinds)

            if wholes:
                # the erased item itself lies here: only a live value holding all of it excuses it
                if all(around(data, start) for data, start in wholes):
                    out.live += 1
                else:
                    out.residue.append(h)
            elif around(read(h.file, h.offset, h.width), h.offset):
                out.live += 1
            elif self._in_other(h):
                out.others += 1
            else:
                out.residue.append(h)
        return out

    def _in_other(self, h: Hit) -> bool:
        """Whether the window at ``h`` lies inside a whole item of another erasure that still
        keeps its fingerprints (its bytes wait for the compactor; its own verify finds them)."""
        if self._other_fps is None:
            self._other_fps = []
            for blob in self._others():
                other = Fingerprints.from_blob(blob)
                if other.site_h:
                    self._other_fps.append((other, self._fpr.tables(other)))
        for other, tables in self._other_fps:
            if not other.item_n:
                continue
            reach = max(int(a.max()) for a in other.item_n.values() if a.size)
            base = max(0, h.offset - reach)
            buf = self._reader.read(h.file, base, h.offset + h.width + reach - base)
            for oh in self._fpr.scan_buffer(buf, tables, h.file, base):
                for kind, item, o, n in other.sites_all(oh.hash):
                    start = oh.offset - o
                    if start <= h.offset and h.offset + h.width <= start + n:
                        data = self._reader.read(h.file, start, n)
                        if len(data) == n and self._fpr.whole(data) == other.whole(kind, item):
                            return True
        return False
