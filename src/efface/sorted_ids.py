"""Sorted arrays of record ids, each with a count beside it: what both in-memory word indexes
(:mod:`efface.origin.sqlite.postings`, :mod:`efface.origin.postgres.postings`) keep a term's
postings as, and the few array operations they share over them.

Every ``ids`` array here is sorted and distinct (int64); a ``counts`` array lies beside it,
one count per id. No function here changes an array it is given, except :func:`gather`'s
``into`` and :data:`bm25_walk`'s ``total``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import compiled


def by_id(ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` (distinct) and their ``counts``, ordered by id (stable): as given when already
    ascending, without a copy."""
    if len(ids) > 1 and not bool((ids[1:] > ids[:-1]).all()):
        order = np.argsort(ids, kind="stable")
        return ids[order], counts[order]
    return ids, counts


def union(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The ids in any of ``arrays`` (each sorted), sorted and each once; one array is given
    back as it is. (``np.unique`` hashes in numpy 2.4: 20x slower than a sort here.)"""
    if not arrays:
        return np.empty(0, dtype=np.int64)
    if len(arrays) == 1:
        return arrays[0]
    ids = np.sort(np.concatenate(arrays))
    if not len(ids):
        return ids
    return ids[np.concatenate(([True], ids[1:] != ids[:-1]))]


def found(arr: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Where in ``arr`` (sorted) each of ``ids`` that it holds lies, in the order of ``ids``."""
    if not len(arr) or not len(ids):
        return np.empty(0, dtype=np.intp)
    at = np.minimum(np.searchsorted(arr, ids), len(arr) - 1)
    return at[arr[at] == ids]


def gather(cands: np.ndarray, ids: np.ndarray, counts: np.ndarray, into: np.ndarray) -> None:
    """Add to ``into[i]`` the count of ``cands[i]`` in ``ids`` / ``counts`` (nothing where
    ``ids`` lacks it): the shorter of the two lists searched for in the longer, so a common
    term's long list costs a binary search per candidate, not a pass over it."""
    if not len(ids) or not len(cands):
        return
    if len(ids) < len(cands):
        at = np.searchsorted(cands, ids)
        hit = at < len(cands)
        hit[hit] = cands[at[hit]] == ids[hit]
        into[at[hit]] += counts[hit]
    else:
        at = np.minimum(np.searchsorted(ids, cands), len(ids) - 1)
        hit = ids[at] == cands
        into[hit] += counts[at[hit]]


def inserted(
    ids: np.ndarray, counts: np.ndarray, more: np.ndarray, more_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` with ``more`` (sorted, none of them in ``ids``) put in their places, and the
    counts with them: new arrays."""
    at = np.searchsorted(ids, more)
    return np.insert(ids, at, more), np.insert(counts, at, more_counts)


TF_FIRST, LEFT_TO_RIGHT = 0, 1
"""The two orders :data:`bm25_walk` computes a term's BM25 in, each an origin's reference's to
the last bit: ``idf * (tf * k1p) / (tf + norm)`` (FTS5's, the SQLite origin's) and
``idf * tf * k1p / (tf + norm)`` read left to right (the memory origin's ``bm25_term``, which
the PostgreSQL origin's scores match)."""


def _warm_walk(f) -> None:
    """The layouts the word indexes pass (ids int64; counts float32 on SQLite, float64 on
    PostgreSQL; the rest float64), each of the two walks and each order."""
    few, many = np.array([3], np.int64), np.array([1, 3, 5], np.int64)
    for dtype in (np.float32, np.float64):
        for order in (TF_FIRST, LEFT_TO_RIGHT):
            f(many, few, np.ones(1, dtype), np.ones(3), 1.5, 2.2, np.zeros(3), order)
            f(few, many, np.ones(3, dtype), np.ones(1), 1.5, 2.2, np.zeros(1), order)


@compiled.loop(_warm_walk)
def bm25_walk(cands, ids, tf, norm, idf, k1p, total, order):  # pragma: no cover - run compiled, not traced
    """One term's BM25 added to the ``total`` of each of ``cands`` (sorted) that holds it
    (``ids``, sorted, with its counts ``tf``; ``norm`` each candidate's length norm): the
    shorter list walked in order, each one's place in the longer found by galloping on from
    the last place (doubling steps, then halving), so a common term's long list is touched
    near the candidates only. ``order`` (:data:`TF_FIRST` or :data:`LEFT_TO_RIGHT`) says in
    which order the formula's operations go, so each origin keeps its reference's bits.
    Compiled (:mod:`efface.compiled`): each origin keeps its numpy version for when it is not."""
    by_ids = len(ids) < len(cands)
    walk, search = (ids, cands) if by_ids else (cands, ids)
    n = len(search)
    lo = 0
    for x in range(len(walk)):
        v = walk[x]
        if lo >= n:
            break
        if search[lo] < v:
            prev, step, hi = lo, 1, lo + 1
            while hi < n and search[hi] < v:
                prev = hi
                step <<= 1
                hi = prev + step
            hi = min(hi, n)
            lo = prev + 1
            while lo < hi:
                mid = (lo + hi) >> 1
                if search[mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
        if lo < n and search[lo] == v:
            i, j = (x, lo) if by_ids else (lo, x)
            t = np.float64(tf[i])
            if order == TF_FIRST:
                total[j] += (idf * (t * k1p)) / (t + norm[j])
            else:
                total[j] += ((idf * t) * k1p) / (t + norm[j])


def _warm_union(f) -> None:
    """The layout the PostgreSQL word index passes (ids int64, counts float64, tenants int32)."""
    ids, tf = np.array([1, 3, 2, 3], np.int64), np.ones(4)
    starts, idf = np.array([0, 2, 4], np.int64), np.ones(2)
    length, tenant, epoch = np.ones(4), np.zeros(4, np.int32), np.zeros(4, np.int64)
    for order in (TF_FIRST, LEFT_TO_RIGHT):
        f(ids, tf, starts, idf, 2.2, length, 1.0, 1.2, 0.25, 0.75, tenant, 0, epoch, 0, np.empty(4, np.int64),
          np.empty(4), np.empty(4), order)  # fmt: skip


@compiled.loop(_warm_union)
def union_bm25(ids, tf, starts, idf, k1p, length, avg, k1, one_minus_b, b, tenant, code, epoch, pinned,
               out_ids, out_total, out_norm, order):  # fmt: skip  # pragma: no cover - run compiled, not traced
    """The records any of several terms hold (term ``t``'s ids and counts at
    ``ids[starts[t]:starts[t + 1]]``, each sorted), each once, in order, with its BM25 over
    those terms, in one walk of the lists together: what :func:`union` and one
    :data:`bm25_walk` per term give, to the last bit (each record's length norm
    ``k1 * (one_minus_b + b * length / avg)`` and its terms' shares in the terms' order, as
    ``bm25_walk`` adds them). Only records of tenant ``code`` (all, if negative) put at or before
    epoch ``pinned`` (any, if negative) are kept: into ``out_ids``, ``out_total`` and their norms
    ``out_norm``; how many is returned."""
    terms = len(starts) - 1
    pos = starts[:-1].copy()
    n = 0
    while True:
        v = -1
        for t in range(terms):
            if pos[t] < starts[t + 1] and (v < 0 or ids[pos[t]] < v):
                v = ids[pos[t]]
        if v < 0:
            return n
        norm = k1 * (one_minus_b + b * length[v] / avg)
        s = 0.0
        for t in range(terms):
            if pos[t] < starts[t + 1] and ids[pos[t]] == v:
                x = np.float64(tf[pos[t]])
                if order == TF_FIRST:
                    s += (idf[t] * (x * k1p)) / (x + norm)
                else:
                    s += ((idf[t] * x) * k1p) / (x + norm)
                pos[t] += 1
        if (code < 0 or tenant[v] == code) and (pinned < 0 or epoch[v] <= pinned):
            out_ids[n], out_total[n], out_norm[n] = v, s, norm
            n += 1
