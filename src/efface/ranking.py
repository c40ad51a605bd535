"""A ranked list of records read best first, and the first ``n`` live ones of it.

The word index's ranking scores every record a query's words find (thousands at 100k
records), but recall reads only as far as it finds ``n`` live ones, usually the first ``n``.
A :class:`Ranking` orders only the prefix that is read: the best ``m`` are picked by a
partition around the ``m``-th best score, and only they are sorted (a full stable sort of
6,000 scores took longer than all the rest of the word leg's arithmetic).
"""

from __future__ import annotations

from collections.abc import Callable, Container

import numpy as np

WHOLE = 8
"""A prefix of more than ``1 / WHOLE`` of the list is ordered by sorting all of it."""


class Ranking:
    """Records and their scores, best first, ties by id; ordered as far as read."""

    def __init__(self, ids: np.ndarray, scores: np.ndarray) -> None:
        """``ids`` in ascending order, ``scores`` (higher is better) in the same order."""
        self._ids, self._scores = ids, scores
        self._top_ids, self._top_scores = ids[:0], scores[:0]

    @classmethod
    def empty(cls) -> Ranking:
        return cls(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))

    def __len__(self) -> int:
        return len(self._ids)

    def head(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``m`` ids and scores (all of them if there are fewer), best first."""
        size = len(self._ids)
        m = min(m, size)
        if m > len(self._top_ids):
            scores = self._scores
            if m * WHOLE >= size:
                order = np.argsort(-scores, kind="stable")
            else:
                # every score at least the m-th best, in id order (the ids ascend), then the
                # stable sort keeps ties by id: exactly the first of the whole order
                cut = np.partition(scores, size - m)[size - m]
                at = np.flatnonzero(scores >= cut)
                order = at[np.argsort(-scores[at], kind="stable")]
            self._top_ids, self._top_scores = self._ids[order], scores[order]
        return self._top_ids[:m], self._top_scores[:m]


def live_first(ranking: Ranking, n: int, live_of: Callable[[list[int]], Container[int]]) -> list[tuple[int, float]]:
    """The first ``n`` live ids of a ranking with their scores, checked in chunks (``n``,
    then four times more each time; ``live_of(chunk)`` says which are live) so that a list
    whose best matches are not live (another purpose, a pending erasure) still yields ``n``
    when it has them, and a list that has them checks few (and orders few)."""
    found: list[tuple[int, float]] = []
    at, step = 0, max(n, 1)
    while len(found) < n and at < len(ranking):
        ids, scores = ranking.head(at + step)
        chunk = ids[at:].tolist()
        live = live_of(chunk)
        found += [(i, s) for i, s in zip(chunk, scores[at:].tolist(), strict=True) if i in live]
        at, step = at + step, step * 4
    return found[:n]
