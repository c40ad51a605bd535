"""Hybrid recall: candidates from every read path, resolved in the origin, fused by rank.

Every candidate id, from any path, is checked against the origin's live claims for the
tenant and purpose (and subject) inside one read snapshot, and text is read from the origin,
in that same snapshot, for the final ``k`` only (invariant 1: nothing erased is served,
whatever an index still proposes). The ANN list is widened while filters thin it below
``k``; records too rare for that are still found by their words.

Fusion is reciprocal rank over two orders of the candidates. The vector order is exact:
the union of every path's candidates ranked by cosine to the query over the origin's float32
vectors (not the index's i8 copies), so a record the words found is also judged by its
meaning, and the index's quantisation costs a record its place only when it kept it out of
the list altogether. The text order is the full-text path's own BM25 ranking (scoring a
candidate the words did not find would mean reading long doclists, the cost its posting
budget avoids).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from ..model import Hit
from .base import Query, ReadPath

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack et al. 2009)."""

MAX_ANN_CANDIDATES = 4096
"""How far recall widens the ANN candidate list when filters thin it."""

DEPTH = 10
"""Candidates asked of each path per result wanted (at least :data:`MIN_DEPTH`): the union is
re-ranked exactly, so a deeper list costs a few more exact scores, not quality."""
MIN_DEPTH = 100


def hybrid(origin, paths: Sequence[ReadPath], q: Query, k: int) -> list[Hit]:
    """The ``k`` best live records for ``q``: each path's candidates resolved, then fused."""
    n = max(DEPTH * k, MIN_DEPTH)
    with origin.snapshot() as snap:
        ranked: dict[str, list[int]] = {p.name: p.candidates(q, n) for p in paths}
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
        for judged in _judgements(snap, paths, q, union, ranked, live):
            order = sorted(judged, key=lambda r: (-judged[r], r))
            for rank, rid in enumerate(order):
                scores[rid] = scores.get(rid, 0.0) + 1.0 / (RRF_K + rank + 1)
        best = sorted(scores, key=lambda r: (-scores[r], r))[:k]
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


def _judgements(snap, paths, q: Query, union: list[int], ranked, live) -> list[dict[int, float]]:
    """One order per path, as scores: exact cosine over the whole union for a vector path
    (one with ``size``), the path's own order of its live candidates otherwise."""
    out: list[dict[int, float]] = []
    for p in sorted(paths, key=lambda p: p.name):
        if getattr(p, "size", None) is not None and union:
            out.append(_cosine(snap, q, union))
        else:
            mine = [i for i in ranked[p.name] if i in live]
            out.append({rid: -float(r) for r, rid in enumerate(mine)})
    return out


def _cosine(snap, q: Query, ids: list[int]) -> dict[int, float]:
    """Exact cosine of the query to the origin's float32 vectors of ``ids`` (unit length)."""
    blobs = snap.embeddings(ids)
    have = [i for i in ids if blobs.get(i)]
    if not have:
        return {}
    m = np.frombuffer(b"".join(blobs[i] for i in have), dtype=np.float32).reshape(len(have), -1)
    sims = m @ np.asarray(q.vector, dtype=np.float32)
    return dict(zip(have, sims.tolist(), strict=True))
