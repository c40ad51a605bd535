"""Hybrid recall: candidates from every read path, resolved in the origin, fused by rank.

Every candidate id, from any path, is checked against the origin's live claims for the
tenant and purpose (and subject) inside one read snapshot, and text is read from the origin,
in that same snapshot, for the final ``k`` only (invariant 1: nothing erased is served,
whatever an index still proposes). The ANN list is widened while filters thin it below
``k``; records too rare for that are still found by their words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..model import Hit
from .base import Query, ReadPath

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack et al. 2009)."""

MAX_ANN_CANDIDATES = 4096
"""How far recall widens the ANN candidate list when filters thin it."""


def hybrid(origin, paths: Sequence[ReadPath], q: Query, k: int) -> list[Hit]:
    """The ``k`` best live records for ``q``: each path's candidates resolved, then fused."""
    n = max(4 * k, 40)
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
        scores: dict[int, float] = {}
        via: dict[int, list[str]] = {}
        for p in sorted(paths, key=lambda p: p.name):  # 'ann' before 'fts', as the hits' via says
            for rank, rid in enumerate(i for i in ranked[p.name] if i in live):
                scores[rid] = scores.get(rid, 0.0) + 1.0 / (RRF_K + rank + 1)
                via.setdefault(rid, []).append(p.name)
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
