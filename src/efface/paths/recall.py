"""Hybrid recall: candidates from every read path, resolved in the origin, fused by rank.

Every candidate id, from any path, is checked against the origin's live claims for the
tenant and purpose (and subject) inside one read snapshot, and text is read from the origin,
in that same snapshot, for the final ``k`` only (invariant 1: nothing erased is served,
whatever an index still proposes). The ANN list is widened while filters thin it below
``k``; records too rare for that are still found by their words.

Fusion is by reciprocal rank (Cormack et al. 2009) over each leg's own order: exact cosine
for the vectors, BM25 for the words. Fusing by score spread (mean +- 3 sd of each leg's
scores mapped to [0, 1], Qdrant's DBSF) was measured too: better on the large benchmark sets,
but on a short candidate list it blows any difference up to the same fixed gap, so in a
six-memory store "What does Alice like to drink?" put "Alice moved to a new apartment" (two
words shared, one of them "to") above "Alice prefers green tea" (docs/benchmarks.md,
"Retrieval quality"). Ranks do not depend on how many candidates a leg had.

An embedder built from the words alone (the hashing embedder: hashed words, word pairs and
character trigrams, no meaning) says so (``lexical``); its cosine is a weaker copy of the
evidence BM25 already weighs, so with it the cosine does not vote: it orders records the text
scores tie on, and the records the words did not find at all (misspellings), after them.

The vector scores are exact: the union of every path's candidates scored by cosine to the
query over the origin's float32 vectors (not the index's i8 copies), so a record the words
found is also judged by its meaning, and the index's quantisation costs a record its place
only when it kept it out of the list altogether. The text scores are the full-text path's
own BM25 (scoring a candidate the words did not find would mean reading long doclists, the
cost its posting budget avoids).

The full-text leg runs on a worker thread while the caller's thread encodes the query and
searches the ANN index: SQLite (apsw) and onnxruntime release the GIL, so on two cores a
recall costs about the longest of the three instead of their sum. Its candidates, read in the
worker's own snapshot, are resolved in the recall's snapshot like any other path's.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from .. import foreground
from ..model import Hit
from .base import Query, ReadPath

RRF_K = 60
"""Reciprocal rank constant (Cormack et al. 2009), for a path that gives an order only."""

MAX_ANN_CANDIDATES = 4096
"""How far recall widens the ANN candidate list when filters thin it."""

DEPTH = 10
"""Candidates asked of each path per result wanted (at least :data:`MIN_DEPTH`): the union is
re-ranked exactly, so a deeper list costs a few more exact scores, not quality."""
MIN_DEPTH = 100


WORKERS = 4
"""Threads that run full-text legs beside their recalls; a recall finding them all busy runs
its leg itself (so concurrent recalls never queue behind each other's legs)."""
_pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="efface-recall")
_free = threading.BoundedSemaphore(WORKERS)


def _beside(fn: Callable[[], list[tuple[int, float]]]) -> Future:
    """Run ``fn`` on a free worker, or here and now when none is free."""
    if not _free.acquire(blocking=False):
        done: Future = Future()
        done.set_result(fn())
        return done
    try:
        fut = _pool.submit(fn)
    except BaseException:
        _free.release()
        raise
    fut.add_done_callback(lambda _f: _free.release())
    return fut


def hybrid(
    origin,
    paths: Sequence[ReadPath],
    q: Query,
    k: int,
    *,
    lexical: bool = False,
    vector: Callable[[], np.ndarray] | None = None,
) -> list[Hit]:
    """The ``k`` best live records for ``q``: each path's candidates resolved, then fused.
    ``lexical``: the query's vector comes from an embedder built from the words alone (the
    hashing embedder), whose cosine is then a tie-break after the text scores, not a vote.
    ``vector``: computes the query's vector (``q.vector`` is then a placeholder), called
    while the full-text leg already runs."""
    with foreground.reading():  # background loops give way meanwhile (efface.foreground)
        return _hybrid(origin, paths, q, k, lexical=lexical, vector=vector)


def _hybrid(
    origin,
    paths: Sequence[ReadPath],
    q: Query,
    k: int,
    *,
    lexical: bool,
    vector: Callable[[], np.ndarray] | None,
) -> list[Hit]:
    n = max(DEPTH * k, MIN_DEPTH)
    early: dict[str, Future] = {}
    for p in paths:
        if hasattr(p, "scored") and getattr(p, "size", None) is None:
            early[p.name] = _beside(functools.partial(p.scored, q, n))
    try:
        if vector is not None:
            q = replace(q, vector=vector())
    except BaseException:
        for f in early.values():
            f.cancel()
        raise
    with origin.snapshot() as snap:
        scored: dict[str, dict[int, float]] = {}
        ranked: dict[str, list[int]] = {}
        for p in paths:
            if hasattr(p, "scored"):
                got = early[p.name].result() if p.name in early else p.scored(q, n)
                scored[p.name] = dict(got)
                ranked[p.name] = [rid for rid, _ in got]
            else:
                ranked[p.name] = p.candidates(q, n)
        live = snap.live_ids(list({i for ids in ranked.values() for i in ids}), q.tenant, q.purpose, q.subject, q.now)
        for p in paths:
            size = getattr(p, "size", None)
            if size is None:
                continue  # a path that filters in its own query (full text) is not widened here
            total = size(q.tenant)
            m = n
            # Purpose, subject and pending erasures thin the ANN list; widen until k survive.
            while (
                sum(1 for i in ranked[p.name] if i in live) < k
                and len(ranked[p.name]) == m
                and m < min(total, MAX_ANN_CANDIDATES)
            ):
                m = min(m * 4, MAX_ANN_CANDIDATES)
                ranked[p.name] = p.candidates(q, m)
                live |= snap.live_ids(
                    [i for i in ranked[p.name] if i not in live], q.tenant, q.purpose, q.subject, q.now
                )
        via: dict[int, list[str]] = {}
        for p in sorted(paths, key=lambda p: p.name):  # 'ann' before 'fts', as the hits' via says
            for rid in ranked[p.name]:
                if rid in live:
                    via.setdefault(rid, []).append(p.name)
        union = sorted(via)
        scores: dict[int, float] = {}
        tie: dict[int, float] = {}
        for p, judged in _judgements(snap, paths, q, union, ranked, scored, live):
            vote = not (lexical and getattr(p, "size", None) is not None)
            for rid, x in _rank_fused(judged).items():
                if vote:
                    scores[rid] = scores.get(rid, 0.0) + x
                else:
                    tie[rid] = x
                    scores.setdefault(rid, 0.0)
        best = sorted(scores, key=lambda r: (-scores[r], -tie.get(r, 0.0), r))[:k]
        # Text leaves the store only here: from the origin, for ids checked live in this snapshot.
        rows = snap.records_by_id(best)
    return [
        Hit(
            key=rows[r].key,
            text=rows[r].text,
            score=round(scores[r], 6),
            via=tuple(via[r]),
            metadata=json.loads(rows[r].metadata),
        )
        for r in best
    ]


def _judgements(
    snap, paths, q: Query, union: list[int], ranked, scored, live
) -> list[tuple[ReadPath, dict[int, float]]]:
    """One set of scores per path: exact cosine over the whole union for a vector path (one
    with ``size``), the path's own scores of its live candidates for one that gives them, and
    reciprocal rank for a path that gives only an order."""
    out: list[tuple[ReadPath, dict[int, float]]] = []
    for p in sorted(paths, key=lambda p: p.name):
        if getattr(p, "size", None) is not None:
            out.append((p, _cosine(snap, q, union) if union else {}))
        elif p.name in scored:
            out.append((p, {rid: x for rid, x in scored[p.name].items() if rid in live}))
        else:
            mine = [i for i in ranked[p.name] if i in live]
            out.append((p, {rid: 1.0 / (RRF_K + r + 1) for r, rid in enumerate(mine)}))
    return out


def _rank_fused(judged: dict[int, float]) -> dict[int, float]:
    """A leg's reciprocal-rank scores, by its own scores (ties broken by id, for a stable order)."""
    order = sorted(judged, key=lambda r: (-judged[r], r))
    return {rid: 1.0 / (RRF_K + i + 1) for i, rid in enumerate(order)}


def _cosine(snap, q: Query, ids: list[int]) -> dict[int, float]:
    """Exact cosine of the query to the origin's float32 vectors of ``ids`` (unit length)."""
    blobs = snap.embeddings(ids)
    have = [i for i in ids if blobs.get(i)]
    if not have:
        return {}
    m = np.frombuffer(b"".join(blobs[i] for i in have), dtype=np.float32).reshape(len(have), -1)
    sims = m @ np.asarray(q.vector, dtype=np.float32)
    return dict(zip(have, sims.tolist(), strict=True))
