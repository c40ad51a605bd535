"""Recall's candidates in its read snapshot (:mod:`.recall`): each checked live once, with its
vector where a vector path judges it (:class:`_Checks`, the filter of ``q.where`` applied
there); a filtered recall's every eligible record joined to the vector leg when the indexes
found too few (:func:`_all_eligible`); the exact cosine of the query to the candidates'
stored vectors (:func:`_cosine`); and the hits' session windows, read in the same snapshot
(:func:`_windows`)."""

from __future__ import annotations

import json

import numpy as np

from ..model import Turn
from ..vectors import read_many as read_vectors
from . import turns
from .base import Query


class _Checks:
    """Candidates checked live in one snapshot, each once: which were asked, which are live,
    and (``vectors``: a vector path judges them) each live one's vector, read in the same
    look-up."""

    def __init__(self, snap, q: Query, vectors: bool, memo=None) -> None:
        self._snap, self._q, self._vectors, self._memo = snap, q, vectors, memo
        self.checked: set[int] = set()
        self.live: set[int] = set()
        self.blobs: dict[int, bytes] = {}
        self.cosines: dict[int, float] = {}
        """Live records' cosines to the query, where the origin computed them (LiveVectorSearch)."""
        self._eligible: frozenset[int] | None = None
        self._fields: turns.Fields | None = None

    def fields(self) -> turns.Fields:
        """The tenant's turn fields (:mod:`efface.paths.turns`), read in this snapshot once."""
        if self._fields is None:
            self._fields = list(self._snap.turn_fields(self._q.tenant))
        return self._fields

    @property
    def eligible(self) -> frozenset[int]:
        """The tenant's records that ``q.where`` lets through."""
        if self._eligible is None:
            where = self._q.where
            assert where is not None
            self._eligible = turns.eligible(self.fields(), where)
        return self._eligible

    def check(self, ids: list[int]) -> None:
        new = [i for i in dict.fromkeys(ids) if i not in self.checked]
        self.checked.update(new)
        q = self._q
        if q.where is not None:  # a record the filter leaves out is, for this recall, not live
            new = [i for i in new if i in self.eligible]
        if self._memo is not None:  # the copy in memory (the vectors are read after)
            self.live.update(self._memo.live(new, q.tenant, q.purpose, q.now))
        elif self._vectors:
            got = self._snap.live_embeddings(new, q.tenant, q.purpose, q.subject, q.now)
            self.blobs.update(got)
            self.live.update(got)
        else:
            self.live.update(self._snap.live_ids(new, q.tenant, q.purpose, q.subject, q.now))

    def live_of(self, ids: list[int]) -> set[int]:
        """Check ``ids`` (those not checked yet) and answer which are live."""
        self.check(ids)
        return self.live


def _all_eligible(
    ranked: dict[str, list[int]], vector_legs: set[str], seen: _Checks, k: int, n: int, check_new
) -> None:
    """A recall narrowed by ``q.where`` (:mod:`efface.paths.turns`) whose candidates hold fewer
    than ``k`` matching live records, or whose filter lets at most ``n`` records through at all:
    every matching record of the tenant joins the vector leg's candidates (judged by exact
    cosine there, live-checked like the rest), so a filter never returns fewer than ``k`` while
    more match, whatever the indexes proposed."""
    if not vector_legs:
        return
    found = {i for ids in ranked.values() for i in ids if i in seen.live}
    allowed = seen.eligible
    if len(found) >= k and len(allowed) > n:
        return
    leg = min(vector_legs)
    extra = sorted(allowed.difference(ranked[leg]))
    if extra:
        ranked[leg] = ranked[leg] + extra
        check_new()


def _windows(snap, q: Query, best: list[int], rows: dict, n: int, seen: _Checks, memo) -> dict[int, tuple[Turn, ...]]:
    """Each hit's session window (:func:`efface.paths.turns.windows`): neighbouring turns that
    pass the recall's own live check (claims, purpose, subject, filters), their rows read in
    this snapshot (re-checked live there when the check was the copy in memory)."""
    if n <= 0:
        return {}

    def live(ids: list[int]) -> set[int]:
        return seen.live_of(ids) & set(ids)

    groups = turns.windows(seen.fields(), {r: rows[r].metadata for r in best}, n, live)
    want = [r for r in turns.flat(groups.values()) if r not in rows]
    if memo is not None:
        got = snap.live_records_by_id(want, q.tenant, q.purpose, q.subject, q.now)
        if q.where is not None:
            got = {r: row for r, row in got.items() if q.where.matches(row.metadata)}
    else:
        got = snap.records_by_id(want)
    got.update(rows)  # every row read already was checked live (and by the filter) in this snapshot
    return {
        r: tuple(Turn(got[i].key, got[i].text, json.loads(got[i].metadata)) for i in ids if i in got)
        for r, ids in groups.items()
    }


def _cosine(
    snap, q: Query, ids: np.ndarray, known: dict[int, bytes], memo=None, cosines: dict[int, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine of the query to the origin's vectors of ``ids`` (unit length, stored in
    half precision: :mod:`efface.vectors`): those of ``ids`` that have a vector, in the order
    asked, and their cosines. ``known``: vectors read already in this snapshot; ``memo``: the
    origin's copy of the live records' vectors in memory, where it holds them."""
    query = np.asarray(q.vector, dtype=np.float32)
    sims: dict[int, float] = {}
    rest = ids.tolist()
    if memo is not None and len(ids):
        held, m = memo.vectors(ids)
        if len(held) == len(ids):  # every one (the usual case): in the order asked already
            return held, (m @ query).astype(np.float64)
        sims = dict(zip(held.tolist(), (m @ query).tolist(), strict=True))
        rest = [i for i in rest if i not in sims]
    if cosines:  # computed where the vectors are (the origin's own index: LiveVectorSearch)
        if not sims:
            given = [cosines.get(i) for i in rest]
            if None not in given:  # every one (the usual case): in the order asked already
                return ids, np.array(given, dtype=np.float64)
        sims.update((i, cosines[i]) for i in rest if i in cosines)
        rest = [i for i in rest if i not in sims]
    blobs = {i: known[i] for i in rest if i in known}
    missing = [i for i in rest if i not in known]
    if missing:
        blobs.update(snap.embeddings(missing))
    have = [i for i in rest if blobs.get(i)]
    if have:
        m = read_vectors([blobs[i] for i in have])
        sims.update(zip(have, (m @ query).tolist(), strict=True))
    got = [i for i in ids.tolist() if i in sims]  # in the order asked, as the scaling sums them
    return np.asarray(got, dtype=np.int64), np.fromiter((sims[i] for i in got), dtype=np.float64, count=len(got))
