"""Judging a byte scan's hits in a database server's files (:meth:`Verifier._scan_fn`): which
hits of erased vectors and of name hashes count as residue of the erasure."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from .fingerprint import Fingerprinter, Fingerprints
from .hits import Hits

VECTOR_WINDOWS = 2
"""How many windows of one erased vector (``pgvector``) must lie in a file at their own offsets
from one start for the vector to count as there: a sparse vector (the hashing embedder's: a
fifth of its floats non-zero) shares a 16-byte window with some live vector by chance at
100k records, never two at the offsets of one vector; a vector really left in a page or in
the WAL has tens of windows there (a WAL page header cutting it leaves two runs of them)."""


def anchored_vectors(fp: Fingerprints, found: Hits) -> np.ndarray:
    """Which hits count, for erased vectors: those of a vector with at least
    :data:`VECTOR_WINDOWS` windows (or all it has, when it has fewer) in the same file at one
    start; every other kind's hits are kept."""
    keep = np.ones(len(found), dtype=bool)
    if "pgvector" not in found.kinds or not fp.has_sites("pgvector"):
        return keep
    k = found.kinds.index("pgvector")
    idx = np.flatnonzero(found.kind == k).tolist()
    if not idx:
        return keep
    per_item = np.bincount(fp.site_i["pgvector"].astype(np.int64))
    starts: dict[tuple[int, int, int], set[int]] = {}
    anchors: dict[int, list[tuple[int, int, int]]] = {}
    for i in idx:
        f, off = int(found.file[i]), int(found.offset[i])
        mine = []
        for item, o, _n in fp.sites("pgvector", int(found.hash[i])):
            at = (f, item, off - o)
            starts.setdefault(at, set()).add(o)
            mine.append(at)
        anchors[i] = mine
    for i, mine in anchors.items():
        keep[i] = any(len(starts[at]) >= min(VECTOR_WINDOWS, int(per_item[at[1]])) for at in mine)
    return keep


def live_names(fpr: Fingerprinter, fp: Fingerprints, found: Hits, live: Collection[bytes]) -> np.ndarray:
    """Which hits are of a name hash (``name_h``) that a live row holds now: every item the
    hit's window could come from is one of ``live`` (a subject erased from a tenant and
    written to it again since: its name's hash is the new subject's, not residue)."""
    out = np.zeros(len(found), dtype=bool)
    if "name_h" not in found.kinds or not fp.has_sites("name_h"):
        return out
    wholes = {fpr.whole(x) for x in live}
    k = found.kinds.index("name_h")
    for i in np.flatnonzero(found.kind == k).tolist():
        sites = fp.sites("name_h", int(found.hash[i]))
        out[i] = bool(sites) and all(fp.whole("name_h", item) in wholes for item, _, _ in sites)
    return out
