"""Scan raw bytes for the targets' texts and vectors.

Texts are looked for whole and as word shingles (six words) that no other record shares,
so a text split across SQLite overflow pages, or kept in part, is still found. Vectors are
looked for as windows of 16 consecutive components, compared within float32 rounding
(stores re-normalise vectors for cosine distance, which changes the last bits), in four
encodings: float32 little-endian, float64 little-endian, float64 big-endian as pickle
writes Python floats (opcode ``G`` before each), and float16 little-endian (half precision,
as efface keeps a record's vector and any store may to save space; compared within its own
rounding, a thousandth). A format that compresses what it stores
hides it from any byte scan: the audit therefore scans once before the delete and reports
how many targets were detectable at all, and a driver may add a decoded view of a file.

The fingerprints live in memory for one run only; nothing derived from them is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import ahocorasick
import numpy as np

from .model import ByteScan, FileResidue, Targets

SHINGLE_WORDS = 6
WINDOW = 16
_WORD = re.compile(r"\S+")

Decoder = Callable[[Path], "bytes | None"]
"""Returns a decoded view of a file (or None when it does not apply)."""

# (name, dtype, stride, rtol, atol): each compared within its own rounding
_ENCODINGS = (
    ("f4le", "<f4", 4, 1e-5, 1e-7),
    ("f8le", "<f8", 8, 1e-5, 1e-7),
    ("pickle-f8be", ">f8", 9, 1e-5, 1e-7),
    ("f2le", "<f2", 2, 1e-3, 1e-4),
)


def _shingles(text: str) -> list[str]:
    spans = [m.span() for m in _WORD.finditer(text)]
    out = []
    for i in range(len(spans) - SHINGLE_WORDS + 1):
        s = text[spans[i][0] : spans[i + SHINGLE_WORDS - 1][1]]
        if len(s.encode("utf-8")) >= 24:
            out.append(s)
    return out


class Fingerprints:
    """What the scan looks for: built from the targets and the other records' texts."""

    def __init__(self, targets: Targets, other_texts: Iterable[str] = (), other_vectors: np.ndarray | None = None):
        self.n = len(targets.ids)
        self._automaton = ahocorasick.Automaton()
        patterns: dict[str, set] = {}
        for i, text in enumerate(targets.texts):
            if text:
                patterns.setdefault(text.encode("utf-8").decode("latin-1"), set()).add(("w", i))
        owners: dict[str, set[int]] = {}
        for i, text in enumerate(targets.texts):
            for s in _shingles(text):
                owners.setdefault(s, set()).add(i)
        # A fragment counts only if it names one target and occurs in no other text, not even
        # inside a longer word ("5 says" is inside "15 says"): checked as substrings.
        shared = _occurring(owners, [t for i, t in enumerate(targets.texts)], other_texts)
        for s, who in owners.items():
            if s not in shared:
                patterns.setdefault(s.encode("utf-8").decode("latin-1"), set()).add(("s", next(iter(who))))
        for p, tags in patterns.items():
            self._automaton.add_word(p, tuple(tags))
        self._has_patterns = bool(patterns)
        if self._has_patterns:
            self._automaton.make_automaton()
        self._windows = _windows(targets.vectors, other_vectors)

    def find_texts(self, data: bytes) -> tuple[set[int], set[int]]:
        """(targets found whole, targets found whole or by a fragment)."""
        whole: set[int] = set()
        anyf: set[int] = set()
        if not self._has_patterns or not data:
            return whole, anyf
        for _end, tags in self._automaton.iter(data.decode("latin-1")):
            for kind, i in tags:
                anyf.add(i)
                if kind == "w":
                    whole.add(i)
        return whole, anyf

    def find_vectors(self, data: bytes) -> set[int]:
        """Targets with at least one vector window present in ``data``."""
        if self._windows is None or len(data) < WINDOW * 2:
            return set()
        wins, owner, anchor_pos = self._windows
        anchors = wins[np.arange(len(wins)), anchor_pos]
        order = np.argsort(anchors)
        sorted_anchors = anchors[order]
        found: set[int] = set()
        buf = np.frombuffer(data, dtype=np.uint8)
        for _name, dtype, stride, rtol, atol in _ENCODINGS:
            size = np.dtype(dtype).itemsize
            for align in range(stride):
                n = (len(buf) - align - size) // stride + 1
                if n < WINDOW:
                    continue
                arr = np.ndarray(shape=(n,), dtype=dtype, buffer=buf, offset=align, strides=(stride,))
                with np.errstate(all="ignore"):
                    arr = arr.astype(np.float64)
                with np.errstate(all="ignore"):
                    ok = np.isfinite(arr) & (np.abs(arr) > 1e-6)
                cand = np.nonzero(ok)[0]
                if not len(cand):
                    continue
                vals = arr[cand]
                tol = np.abs(vals) * rtol + atol
                lo = np.searchsorted(sorted_anchors, vals - tol, side="left")
                hi = np.searchsorted(sorted_anchors, vals + tol, side="right")
                counts = hi - lo
                hit = np.nonzero(counts > 0)[0]
                if not len(hit):
                    continue
                found |= _verify(arr, cand[hit], lo[hit], counts[hit], order, wins, owner, anchor_pos, rtol, atol)
        return found


def _verify(arr, pos, lo, counts, order, wins, owner, anchor_pos, rtol, atol, chunk: int = 200_000) -> set[int]:
    """Check every (position, window) candidate pair at once: the whole window must match."""
    total = int(counts.sum())
    offsets = np.repeat(np.cumsum(counts) - counts, counts)
    k = order[np.repeat(lo, counts) + (np.arange(total) - offsets)]
    start = np.repeat(pos, counts) - anchor_pos[k]
    ok = (start >= 0) & (start + WINDOW <= len(arr))
    k, start = k[ok], start[ok]
    found: set[int] = set()
    steps = np.arange(WINDOW)
    for i in range(0, len(k), chunk):
        kk, ss = k[i : i + chunk], start[i : i + chunk]
        seg = arr[ss[:, None] + steps]
        match = np.isclose(seg, wins[kk], rtol=rtol, atol=atol).all(axis=1)
        found.update(int(o) for o in np.unique(owner[kk[match]]))
    return found


def _occurring(owners: dict[str, set[int]], targets: list[str], others: Iterable[str]) -> set[str]:
    """Shingles that occur as a substring of another record's text or of another target's."""
    if not owners:
        return set()
    auto = ahocorasick.Automaton()
    for s in owners:
        auto.add_word(s, s)
    auto.make_automaton()
    out: set[str] = set()
    for t in others:
        out.update(s for _e, s in auto.iter(t))
    for i, t in enumerate(targets):
        out.update(s for _e, s in auto.iter(t) if owners[s] != {i})
    return out


def _windows(vectors: np.ndarray, others: np.ndarray | None):
    """Up to three windows per vector, each with at least four non-zero components and
    matching no other record's vector at the same place (similar texts can share them)."""
    if vectors is None or not len(vectors):
        return None
    vectors = np.asarray(vectors, dtype=np.float32)
    others = None if others is None or not len(others) else np.asarray(others, dtype=np.float32)
    wins, owner, anchor = [], [], []
    for i, v in enumerate(vectors):
        starts = list(range(0, max(1, len(v) - WINDOW + 1), WINDOW))
        scored = sorted(starts, key=lambda s: -int(np.count_nonzero(np.abs(v[s : s + WINDOW]) > 1e-6)))
        kept = 0
        rivals = [x for x in (others, np.delete(vectors, i, axis=0)) if x is not None and len(x)]
        for s in scored:
            if kept == 3:
                break
            w = v[s : s + WINDOW].astype(np.float64)
            if np.count_nonzero(np.abs(w) > 1e-6) < 4 or len(w) < WINDOW:
                continue
            if any(np.isclose(r[:, s : s + WINDOW], w, rtol=1e-5, atol=1e-7).all(axis=1).any() for r in rivals):
                continue
            kept += 1
            wins.append(w)
            owner.append(i)
            anchor.append(int(np.argmax(np.abs(w))))
    if not wins:
        return None
    return np.array(wins), np.array(owner), np.array(anchor)


@dataclass(frozen=True)
class _FileHits:
    whole: frozenset
    texts: frozenset
    vectors: frozenset


def scan_tree(root: str | os.PathLike, fp: Fingerprints, decoders: Iterable[Decoder] = ()) -> ByteScan:
    """Scan every regular file under ``root`` (and the decoded views drivers add)."""
    root = Path(root)
    residues: list[FileResidue] = []
    all_texts: set[int] = set()
    all_vectors: set[int] = set()
    n_files = n_bytes = 0
    decoders = list(decoders)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        n_files += 1
        n_bytes += len(data)
        whole, texts = fp.find_texts(data)
        vectors = fp.find_vectors(data)
        decoded_by = ""
        for decode in decoders:
            view = decode(path)
            if view is None:
                continue
            decoded_by = getattr(decode, "label", "decoder")
            w2, t2 = fp.find_texts(view)
            whole |= w2
            texts |= t2
            vectors |= fp.find_vectors(view)
        if texts or vectors:
            residues.append(
                FileResidue(str(path.relative_to(root)), len(data), len(texts), len(whole), len(vectors), decoded_by)
            )
        all_texts |= texts
        all_vectors |= vectors
    return ByteScan(tuple(residues), n_files, n_bytes, len(all_texts), len(all_vectors))
