"""The sorted-id array helpers both in-memory word indexes share (src/efface/sorted_ids.py),
against the same operations on Python dicts and sets."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from efface.sorted_ids import by_id, found, gather, inserted, union

_ids = st.lists(st.integers(0, 200), max_size=60, unique=True)


def _sorted(ids: list[int]) -> np.ndarray:
    return np.asarray(sorted(ids), dtype=np.int64)


@settings(max_examples=200, deadline=None)
@given(ids=_ids, seed=st.integers(0, 2**16))
def test_by_id_orders_ids_with_their_counts(ids, seed):
    rng = np.random.default_rng(seed)
    a = np.asarray(ids, dtype=np.int64)
    c = rng.integers(1, 9, size=len(ids)).astype(np.float32)
    pairs = dict(zip(ids, c.tolist(), strict=True))
    got_ids, got_counts = by_id(a, c)
    assert got_ids.tolist() == sorted(ids)
    assert got_counts.tolist() == [pairs[i] for i in sorted(ids)]
    assert got_counts.dtype == np.float32


def test_by_id_gives_ascending_arrays_back_as_they_are():
    a, c = np.array([1, 4, 9], np.int64), np.array([2.0, 1.0, 3.0])
    got_ids, got_counts = by_id(a, c)
    assert got_ids is a and got_counts is c


@settings(max_examples=200, deadline=None)
@given(lists=st.lists(_ids, max_size=5))
def test_union_is_every_id_once_in_order(lists):
    got = union([_sorted(ids) for ids in lists])
    assert got.tolist() == sorted({i for ids in lists for i in ids})
    assert got.dtype == np.int64


def test_union_of_one_array_is_that_array():
    a = np.array([2, 5], np.int64)
    assert union([a]) is a


@settings(max_examples=200, deadline=None)
@given(arr=_ids, ids=_ids)
def test_found_is_where_each_held_id_lies(arr, ids):
    a = _sorted(arr)
    wanted = np.asarray(ids, dtype=np.int64)
    at = found(a, wanted)
    assert a[at].tolist() == [i for i in ids if i in set(arr)]


@settings(max_examples=300, deadline=None)
@given(cands=_ids, ids=_ids, seed=st.integers(0, 2**16))
def test_gather_adds_each_candidates_count_in_either_walk(cands, ids, seed):
    """Both walks are taken: fewer ids than candidates, and as many or more."""
    rng = np.random.default_rng(seed)
    c, a = _sorted(cands), _sorted(ids)
    counts = rng.integers(1, 9, size=len(a)).astype(np.float32)
    start = rng.integers(0, 3, size=len(c)).astype(np.float64)
    into = start.copy()
    gather(c, a, counts, into)
    of = dict(zip(a.tolist(), counts.tolist(), strict=True))
    assert into.tolist() == [s + of.get(i, 0.0) for s, i in zip(start.tolist(), c.tolist(), strict=True)]


@settings(max_examples=200, deadline=None)
@given(ids=_ids, more=_ids)
def test_inserted_puts_the_new_ids_in_their_places(ids, more):
    more = [m for m in more if m not in set(ids)]
    a, m = _sorted(ids), _sorted(more)
    ca, cm = a.astype(np.float64) + 0.5, m.astype(np.float64) + 0.25
    got_ids, got_counts = inserted(a, ca, m, cm)
    assert got_ids.tolist() == sorted(ids + more)
    own = {i: i + 0.5 for i in ids} | {i: i + 0.25 for i in more}
    assert got_counts.tolist() == [own[i] for i in sorted(ids + more)]
    assert a.tolist() == sorted(ids)  # the input untouched


_sorted_ids = st.lists(st.integers(0, 3000), max_size=300, unique=True).map(lambda v: np.asarray(sorted(v), np.int64))


@settings(max_examples=200, deadline=None)
@given(cands=_sorted_ids, ids=_sorted_ids, seed=st.integers(0, 2**32 - 1), wide=st.booleans())
def test_the_shared_bm25_walk_keeps_each_origins_reference_to_the_last_bit(cands, ids, seed, wide):
    """One compiled walk serves both word indexes (it was written twice, differing only in
    the order of the formula's operations): in TF_FIRST order it gives FTS5's formula's bits
    (the SQLite origin's reference), in LEFT_TO_RIGHT order the memory origin's bm25_term's
    (the PostgreSQL origin's), whichever list is the longer; counts as float32 or float64."""
    from efface import compiled
    from efface.origin.memory.state import BM25_B, BM25_K1, bm25_term
    from efface.sorted_ids import LEFT_TO_RIGHT, TF_FIRST, bm25_walk

    assert compiled.on(), "numba should load and compile"
    rng = np.random.default_rng(seed)
    tf = rng.integers(1, 9, len(ids)).astype(np.float64 if wide else np.float32)
    length, avg = rng.integers(1, 60, len(cands)).astype(np.float64), float(rng.random() * 30 + 1)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / avg)
    idf, k1p = float(rng.random() * 5), BM25_K1 + 1
    start = rng.random(len(cands))
    count = dict(zip(ids.tolist(), tf.astype(np.float64).tolist(), strict=True))
    held = [(j, count[c]) for j, c in enumerate(cands.tolist()) if c in count]
    fts5, memory = start.copy(), start.copy()
    for j, t in held:
        fts5[j] += (idf * (t * k1p)) / (t + norm[j])
        memory[j] += bm25_term(idf, t, length[j], avg)
    by_fts5, by_memory = start.copy(), start.copy()
    bm25_walk.compiled(cands, ids, tf, norm, idf, k1p, by_fts5, TF_FIRST)
    bm25_walk.compiled(cands, ids, tf, norm, idf, k1p, by_memory, LEFT_TO_RIGHT)
    assert by_fts5.tobytes() == fts5.tobytes() and by_memory.tobytes() == memory.tobytes()
