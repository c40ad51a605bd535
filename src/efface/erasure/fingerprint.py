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

The hash of a window (its finalisation, and the inverse the scanner's prefilter uses) is
:mod:`.mix`; the scanner that hashes every file's windows the same way is :mod:`.bytescan`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bytescan import ByteScanner
from .mix import mix, window_keys

REGION = 64
"""Text and key windows are sampled in runs of 8 offsets every ``REGION`` bytes."""
VECTOR_REGION = 256
"""Embeddings are longer and uniform: sparser sampling still finds a whole copy."""
MIN_BYTES = 8
_MIN_DISTINCT = 5
_MIN_DISTINCT_GAP = 3
"""Distinct bytes a window needs to fill an alignment gap left by the strict rule."""


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

    def only(self, kinds: Sequence[str]) -> Fingerprints:
        """These fingerprints limited to items of ``kinds`` (what a scan of a copy that can
        hold only those forms looks for: a database's files hold ciphertext, not text)."""
        keep = set(kinds)
        out = Fingerprints(
            items={k: n for k, n in self.items.items() if k in keep},
            too_short={k: n for k, n in self.too_short.items() if k in keep},
        )
        for group in ("w16", "w8", "u8", "site_h", "site_i", "site_o", "item_h", "item_n"):
            getattr(out, group).update({k: a for k, a in getattr(self, group).items() if k in keep})
        return out

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


class Fingerprinter(ByteScanner):
    """Makes fingerprints and scans files for them, under one store's secret."""

    def __init__(self, secret: bytes):
        k = window_keys(secret)
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
        return mix(h, self._k3, self._k4)

    # -- window hashes, as the scanner computes them -------------------------------------
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
