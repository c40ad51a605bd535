"""Hybrid recall: candidates from every read path, resolved in the origin, fused by rank.

Every candidate id, from any path, is checked against the origin's live claims for the
tenant and purpose (and subject), and text is read from the origin, in one read snapshot,
for the final ``k`` only, each of them checked live in that snapshot as it is read
(invariant 1: nothing erased is served, whatever an index still proposes). Where the origin
keeps a copy of which records are live in memory (the SQLite origin: its ``liveness``), the
candidates are checked against the copy and their vectors read from it, and only the final
``k`` in the snapshot; a record the copy still counted live (a forget committed during the
recall) is dropped there and the next one takes its place (:func:`_confirmed`). The ANN list
is widened while filters thin it below ``k``; records too rare for that are still found by
their words.

Fusion is by score, each leg's score put on a scale that does not depend on how many
candidates the leg had, and the scores summed:

- the vector leg: exact cosine over every candidate (the union of all paths'), as standard
  scores (distribution-based score fusion, as Qdrant's DBSF: mean - 3 sd of the union's
  cosines maps to 0, mean + 3 sd to 1). Cosines are continuous and every candidate has one,
  so the spread is the spread of real differences;
- the text leg: BM25 as a share of the most the query could score (FTS5's own idf of every
  query word, its English stop words left out while others remain: ``content_words`` in
  :mod:`efface.text`; a word no record holds weighing as much as FTS5 would weigh it, times
  its k1 + 1 saturation: ``bm25_ceiling``); a record the words did not find scores 0. A z-score here
  is what failed before: over the union most records score exactly 0, so "matched any word at
  all" became a fixed gap, and in a six-memory store "What does Alice like to drink?" (the
  text leg: two memories matched "alice" and "to", one "alice") put "Alice moved to a new
  apartment" above "Alice prefers green tea" (cosine 0.38 against 0.67). As a share, those
  matches are worth 2% of what the query could score, and the cosine decides;
- the vector leg votes in proportion to how far its best cosine stands above the cosines
  the query has with a random sample of the tenant's live records (:data:`SAMPLE`, where the
  origin offers one: :class:`~efface.origin.base.VectorSample`; else with the records only
  the words found, a sample the cosine did not choose), in their standard deviations: not at
  all up to :data:`SPREAD` (the edge of the scale above, and about where the best of a
  thousand unrelated records lands by chance), fully from ``SPREAD + BAND``, linearly between
  (:func:`_standing`; a tenant smaller than the sample is judged against the chance maximum
  of its size). On chat turns every record is about as close to a question as the next
  (MiniLM: the best cosine stands 2.4 sd above the tenant's median cosine, against 5.0 on the
  man pages and 6.5 on Debian), and there the cosine's standard scores out-voted BM25 and put
  the right turn lower than the words alone would (issue #36; bench/experiments/fusion_sim.py,
  exp_fusion_gate.py). Where fewer than :data:`MIN_BACKGROUND`
  records are only the words' (a store smaller than a leg's depth), nothing says what a
  typical cosine is, and the vector leg votes fully;
- then each voting leg's own best record (:data:`KEEP_BEST`) is kept in the top ``k``: a
  record one leg ranks at its very top is not pushed out by records both legs find middling
  (the vector leg's, when it votes fully). It takes the place of the lowest fused record that
  no leg ranks first, and every record keeps its fused score and place;
- where a vector leg that is not lexical votes beside the words, the fused list's first
  ``COORDINATED * k`` are read and re-scored, each one's text share scaled by the square
  root of the share of the question's content words its text holds (:func:`coordinated`).

Reciprocal rank fusion (which main used before) threw the legs' confidence away: in a store
of twelve everyday memories it answered three of twelve questions with the wrong memory
(``tests/test_recall_fusion.py``). Figures on both corpora are in docs/benchmarks-history.md
("Retrieval quality").

An embedder built from the words alone (the hashing embedder: hashed words, word pairs and
character trigrams, no meaning) says so (``lexical``); its cosine is a weaker copy of the
evidence BM25 already weighs, so with it the cosine does not vote: the records the words found
keep the text leg's order, ties by id as that leg alone orders them, and the cosine orders the
records the words did not find at all (misspellings), after them. It breaks a tie of the text
scores in one case only: a record whose cosine says it holds the query's own text
(:data:`SAME_TEXT`: the same words in the same order) comes first among its equals, so a recall
by a record's own text finds that record first when another holds the same words. (Over the
benchmark sets' other ties the cosine put the answer first about as often as the order by id
did, a coin flip that left recall one query under its text leg on two cuts, issue #36.)

The vector scores are exact: the union of every path's candidates scored by cosine to the
query over the origin's vectors, half precision as stored (not the index's i8 copies), so a record the words
found is also judged by its meaning, and the index's quantisation costs a record its place
only when it kept it out of the list altogether. The text scores are the full-text path's
own BM25: over every query word, where the word index holds its postings in memory (the
SQLite origin, once loaded: origin/sqlite/postings.py), the common words past the posting
budget included, which score the records the rarer ones found without finding any; over the
words within the budget where FTS5 ranks (a store still loading them).

The full-text leg runs on a worker thread while the caller's thread encodes the query and
searches the ANN index: SQLite (apsw), onnxruntime and the leg's compiled walk of the
postings (efface.compiled) release the GIL, so on two cores a recall costs about the longest
of the three instead of their sum (usearch holds the GIL while it searches: the leg's Python
waits for it, its compiled and numpy steps do not). Its candidates, read in the
worker's own snapshot, are resolved in the recall's snapshot like any other path's. With a
lexical embedder the encode takes microseconds, and the leg runs in the caller's thread: the
hand-off to a worker and back costs two waits for the GIL on a busy server.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from .. import foreground
from ..capable import capable
from ..model import Hit
from ..origin.capabilities import ClosingRead, DeferredSnapshot, SnapshotEnded
from ..ranking import Ranking, live_first
from .base import LiveVectorSearch, Query, ReadPath, Scoring, VectorSearch
from .candidates import _all_eligible, _Checks, _cosine, _windows
from .scores import COORDINATED, RRF_K, _background, _scaled, _standing, coordinated

KEEP_BEST = 1
"""Each voting leg's own best records kept in the top ``k`` whatever their fused score. It was ``k // 2`` (chosen on
10,000 Debian documents when the text leg scored only a query's rarer words, where it lifted recall@10 from 0.932 to
0.948); with every query word scoring, keeping five of each leg's cost recall@10 on both corpora (all of Debian,
MiniLM: 0.843 with five, 0.860 with one; man pages 0.933 against 0.943, MRR@10 equal), docs/benchmarks-history.md."""

SAME_TEXT = 0.999
"""The cosine of a lexical embedder at or above which a record is the query's own text (the same
words in the same order, up to case, accents and punctuation: the same features, cosine 1 but for
the half precision the vectors are stored at, a few parts in 10^7). Only there does that cosine
break the text scores' ties (issue #36): elsewhere it put the answer first about as often as the
order by id, and the text leg's own order stands."""

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


def _beside(fn: Callable[[], _Leg]) -> Future:
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
    window: int = 0,
) -> list[Hit]:
    """The ``k`` best live records for ``q``: each path's candidates resolved, then fused.
    ``lexical``: the query's vector comes from an embedder built from the words alone (the
    hashing embedder), whose cosine then does not vote: it orders what the words did not find,
    and among equal text scores puts a record holding the query's own text first.
    ``vector``: computes the query's vector (``q.vector`` is then a placeholder), called
    while the full-text leg already runs. ``q.where`` narrows the records that count as live
    and ``window`` adds each hit's neighbouring turns (:mod:`efface.paths.turns`)."""
    with foreground.reading():  # background loops give way meanwhile (efface.foreground)
        try:
            return _hybrid(origin, paths, q, k, lexical=lexical, vector=vector, window=window)
        except SnapshotEnded:  # it read ahead and ended its snapshot, and needed more: again, in a new one
            return _hybrid(origin, paths, q, k, lexical=lexical, vector=vector, window=window, ahead=False)


def _hybrid(
    origin,
    paths: Sequence[ReadPath],
    q: Query,
    k: int,
    *,
    lexical: bool,
    vector: Callable[[], np.ndarray] | None,
    window: int = 0,
    ahead: bool = True,
) -> list[Hit]:
    n = max(DEPTH * k, MIN_DEPTH)
    early: dict[str, Future] = {}
    # Which candidates are live: from the origin's copy in memory when it has one (checked
    # again in the snapshot, for the records returned only: _confirmed), else in the snapshot.
    liveness = origin.liveness
    memo = liveness if liveness is not None and liveness.usable(q.subject) else None
    # With a vector path every live candidate's vector is judged (exact cosine over the
    # union): read with its live check, one look-up per row.
    # (each path's kind remembered: a protocol's isinstance costs tens of microseconds: efface.capable)
    vector_legs = {p.name for p in paths if capable(p, VectorSearch)}
    scoring = {p.name for p in paths if capable(p, Scoring)}
    live_search = {p.name for p in paths if capable(p, LiveVectorSearch)}
    vectors = bool(vector_legs)
    # A vector path that checks the words' candidates in its own search's look-up (an origin's
    # own vector index: LiveVectorSearch) gets them first, so the words' leg only ranks.
    together = bool(live_search)
    # Beside the encode only when there is one to overlap: a lexical embedder's vector takes
    # microseconds, less than handing the leg to a worker and back (two waits for the GIL).
    for p in paths if not lexical else ():
        if p.name in scoring and p.name not in vector_legs:
            early[p.name] = _beside(
                functools.partial(
                    _text_leg_beside, origin, cast(Scoring, p), q, n, vectors, memo is None and not together
                )
            )
    try:
        if vector is not None:
            q = replace(q, vector=vector())
    except BaseException:
        for f in early.values():
            f.cancel()
        raise
    deferred = together and capable(origin, DeferredSnapshot)  # BEGIN sent with the vector statement
    with cast(DeferredSnapshot, origin).snapshot_deferred() if deferred else origin.snapshot() as snap:
        scored: dict[str, dict[int, float]] = {}
        ranked: dict[str, list[int]] = {}
        ceilings: dict[str, float] = {}
        legs: dict[str, _Leg] = {}
        # the last read of the snapshot when no window follows: it ends with it (one round trip)
        closing = memo is None and window <= 0 and capable(snap, ClosingRead)

        def leg_of(p: Scoring) -> _Leg:
            if p.name not in legs:
                legs[p.name] = early[p.name].result() if p.name in early else _text_leg(p, q, n)
            return legs[p.name]

        # Everything that does not need the full-text leg first (the ANN search, the live check
        # of its candidates, their vectors), while that leg runs on its worker; it is waited
        # for only then, and only its new candidates are checked and read after. A vector
        # path that checks other legs' candidates in its own look-up (``together``) takes the
        # words' first ones with it: the leg is waited for then, and found checked after.
        def take(p) -> None:
            if p.name in scoring:
                leg = leg_of(p)
                if leg.epoch is not None and leg.epoch == snap.current_epoch():
                    # checked on its worker in a snapshot of this same state: not again
                    checked.update(leg.checked)
                    live.update(leg.live)
                    blobs.update(leg.blobs)
                    got = leg.found
                elif leg.ranking is not None:
                    got = live_first(leg.ranking, n, seen.live_of)
                else:
                    got = leg.found  # checked by the index in its own statement: again below
                scored[p.name] = dict(got)
                ranked[p.name] = [rid for rid, _ in got]
                if leg.ceiling is not None:
                    ceilings[p.name] = leg.ceiling
            elif p.name in live_search:  # checked live by its own search, in this snapshot
                also = [
                    i
                    for i in dict.fromkeys(
                        i
                        for o in paths
                        if o.name in scoring and o.name not in vector_legs
                        for i in _first(leg_of(cast(Scoring, o)), n)
                    )
                    if i not in checked
                ]
                # With a lexical embedder the words' first k live ones are the k returned: named
                # to be read in the same look-up, for the closing read (the snapshot may end there:
                # a read it needs after it then raises SnapshotEnded, and the recall runs again).
                # Not with a turn filter: its eligibility is read after that statement.
                expected = also[:k] if closing and lexical and ahead and q.where is None and len(also) >= k else ()
                near, others = cast(LiveVectorSearch, p).live_scored(q, n, also, expected)
                if deferred and cast(DeferredSnapshot, snap).words_stale():
                    legs.clear()  # ranked before the snapshot began at a newer epoch: again, in it
                checked.update(also)
                checked.update(near)
                ranked[p.name] = list(near)
                found = {**others, **near}
                if q.where is not None:  # a turn filter: those it leaves out are not live here
                    found = {i: x for i, x in found.items() if i in seen.eligible}
                live.update(found)
                for i, x in found.items():
                    if x is None:
                        blobs[i] = b""  # no vector to judge it by
                    else:
                        seen.cosines[i] = x
            else:
                ranked[p.name] = p.candidates(q, n)

        seen = _Checks(snap, q, vectors, memo)
        checked, live, blobs, check = seen.checked, seen.live, seen.blobs, seen.check

        def check_new() -> None:
            check([i for ids in ranked.values() for i in ids])

        for p in sorted(paths, key=lambda p: p.name not in live_search) if together else paths:
            if p.name not in early or together:
                take(p)
        check_new()
        for p in paths:
            if p.name not in vector_legs:
                continue  # a path that filters in its own query (full text) is not widened here
            m = n
            # Purpose, subject and pending erasures thin the ANN list; widen until k survive.
            while (
                sum(1 for i in ranked[p.name] if i in live) < k
                and len(ranked[p.name]) == m
                and m < min(cast(VectorSearch, p).size(q.tenant), MAX_ANN_CANDIDATES)
            ):
                m = min(m * 4, MAX_ANN_CANDIDATES)
                ranked[p.name] = p.candidates(q, m)
                check_new()
        for p in paths:
            if p.name in early and not together:
                take(p)
        check_new()
        if q.where is not None:
            _all_eligible(ranked, vector_legs, seen, k, n, check_new)
        via: dict[int, list[str]] = {}
        for p in sorted(paths, key=lambda p: p.name):  # 'ann' before 'fts', as the hits' via says
            for rid in ranked[p.name]:
                if rid in live:
                    via.setdefault(rid, []).append(p.name)
        union = np.asarray(sorted(via), dtype=np.int64)
        # every judged id is in the union (a live candidate of its own leg); a leg that did not
        # judge a record adds 0 to its score
        total = np.zeros(len(union), dtype=np.float64)
        tie = np.zeros(len(union), dtype=np.float64)
        same = np.zeros(len(union), dtype=bool)  # a lexical embedder's: the query's own text (SAME_TEXT)
        share = np.zeros(len(union), dtype=np.float64)  # the text legs' (:func:`coordinated`)
        best_of: set[int] = set()  # each voting leg's own best KEEP_BEST
        # the vector leg's vote is weighed only against another leg's (with none, its order is all)
        judged = len(vector_legs) < len(paths)
        for p, ids, raw in _judgements(
            snap, paths, vector_legs, q, union, ranked, scored, live, blobs, memo, seen.cosines
        ):
            if not len(ids):
                continue
            vector_leg = p.name in vector_legs
            vote = not (lexical and vector_leg)
            where, scaled = np.searchsorted(union, ids), _scaled(vector_leg, ids, raw, ceilings.get(p.name))
            if vote:
                weight = _standing(ids, raw, ranked[p.name], _background(origin, q)) if vector_leg and judged else 1.0
                total[where] += weight * scaled
                if not vector_leg and ceilings.get(p.name):
                    share[where] += scaled
                if weight >= 1.0:
                    best_of.update(ids[np.lexsort((ids, -raw))[:KEEP_BEST]].tolist())
            else:
                tie[where] = scaled
                same[where] = raw >= SAME_TEXT
        if lexical:
            # a lexical embedder's cosine orders the records the words did not find, and among
            # those they did, puts a record holding the query's own text before its equals
            tie[(total > 0.0) & ~same] = 0.0
        # best first; then the tie-break; then by id (the text leg's own order of its ties)
        fused = union[np.lexsort((union, -tie, -total))].tolist()
        # a meaning leg beside the words: the first COORDINATED * k re-scored by their texts
        wide = COORDINATED * k if vectors and judged and not lexical and share.any() else k
        # Text leaves the store only here: from the origin, for ids checked live in this snapshot.
        if memo is not None:
            best, rows = _confirmed(snap, q, fused, best_of, wide)
        else:
            best = _keeping(fused, best_of, wide)
            rows = snap.records_by_id_closing(best) if closing else snap.records_by_id(best)
        if wide > k and best:
            at = np.searchsorted(union, np.asarray(best, dtype=np.int64))
            total[at] = coordinated(q.text, [rows[r].text for r in best], share[at], total[at])
            order = [best[i] for i in np.lexsort((union[at], -tie[at], -total[at]))]
            best = _keeping(order, best_of & set(best), k)
        around = _windows(snap, q, best, rows, window, seen, memo)
    scores = total[np.searchsorted(union, np.asarray(best, dtype=np.int64))].tolist()
    return [
        Hit(
            key=rows[r].key,
            text=rows[r].text,
            score=round(x, 6),
            via=tuple(via[r]),
            metadata=json.loads(rows[r].metadata),
            window=around.get(r, ()),
        )
        for r, x in zip(best, scores, strict=True)
    ]


def _confirmed(snap, q: Query, fused: list[int], best_of: set[int], k: int) -> tuple[list[int], dict]:
    """The top ``k`` (:func:`_keeping`) of the records that the in-memory copy of liveness
    chose, each checked live again in the recall's snapshot as its row is read: a record the
    copy still counts live (a forget committed while this recall ran) leaves, and the next
    one takes its place. The ids, and their rows."""
    fused, best_of = list(fused), set(best_of)
    rows: dict = {}
    while True:
        best = _keeping(fused, best_of, k)
        ask = [r for r in best if r not in rows]
        if not ask:
            return best, rows
        got = snap.live_records_by_id(ask, q.tenant, q.purpose, q.subject, q.now)
        if q.where is not None:  # the filter, again on the rows returned (read in this snapshot)
            got = {r: row for r, row in got.items() if q.where.matches(row.metadata)}
        rows.update(got)
        gone = {r for r in ask if r not in got}
        if gone:
            fused = [r for r in fused if r not in gone]
            best_of -= gone


def _judgements(
    snap,
    paths,
    vector_legs: set[str],
    q: Query,
    union: np.ndarray,
    ranked,
    scored,
    live,
    blobs: dict[int, bytes],
    memo=None,
    cosines: dict[int, float] | None = None,
) -> list[tuple[ReadPath, np.ndarray, np.ndarray]]:
    """One set of scores per path, as ids and their scores: exact cosine over the whole union
    (in its order) for a vector path (``vector_legs``: :class:`VectorSearch`), the path's own scores of its live
    candidates for one that gives them, and reciprocal rank for a path that gives only an order."""
    out: list[tuple[ReadPath, np.ndarray, np.ndarray]] = []
    for p in sorted(paths, key=lambda p: p.name):
        if p.name in vector_legs:
            out.append((p, *_cosine(snap, q, union, blobs, memo, cosines)))
            continue
        if p.name in scored:
            mine = [(rid, x) for rid, x in scored[p.name].items() if rid in live]
        else:
            mine = [(rid, 1.0 / (RRF_K + r + 1)) for r, rid in enumerate(i for i in ranked[p.name] if i in live)]
        rids, xs = zip(*mine, strict=True) if mine else ((), ())
        out.append((p, np.array(rids, dtype=np.int64), np.array(xs, dtype=np.float64)))
    return out


@dataclass(frozen=True)
class _Leg:
    """What a scoring path's leg found: its live candidates with their scores (``found``),
    or, from a path that can rank without checking, every match best first (``ranking``)
    for recall to check in its own snapshot; and the most a record could score
    for the query (None for a path that cannot say). A leg run on a worker checks its
    matches there, in a snapshot of its own: ``epoch`` is that snapshot's, and ``checked``,
    ``live`` and ``blobs`` (live ids' vectors) what it found; recall takes them as they are
    when its own snapshot is of the same epoch (nothing written in between), and checks
    ``ranking`` again itself otherwise."""

    found: list[tuple[int, float]]
    ceiling: float | None
    ranking: Ranking | None = None
    epoch: int | None = None
    checked: frozenset[int] = frozenset()
    live: frozenset[int] = frozenset()
    blobs: dict[int, bytes] = field(default_factory=dict)


def _first(leg: _Leg, n: int) -> list[int]:
    """The first ``n`` of a leg's ranking not checked yet (none where its index checked them)."""
    return [] if leg.ranking is None else leg.ranking.head(n)[0].tolist()


def _text_leg(p: Scoring, q: Query, n: int) -> _Leg:
    unchecked = p.ranked_within(q)
    if unchecked is not None:
        ranking, ceiling = unchecked
        return _Leg([], ceiling, ranking)
    got, ceiling = p.scored_within(q, n)
    return _Leg(got, ceiling)


def _text_leg_beside(origin, p: Scoring, q: Query, n: int, vectors: bool, check: bool = True) -> _Leg:
    """:func:`_text_leg` on a worker, its matches checked live there (with their vectors),
    in a snapshot whose epoch it notes: while the query is encoded, or beside the ANN leg."""
    leg = _text_leg(p, q, n)
    if leg.ranking is None:
        return leg
    if not check:  # a copy of liveness in memory: recall checks them, faster than a snapshot here
        leg.ranking.head(n)  # ordered here, beside the ANN search (numpy lets the GIL go meanwhile)
        return leg
    with origin.snapshot() as snap:
        epoch = snap.current_epoch()
        seen = _Checks(snap, q, vectors)
        found = live_first(leg.ranking, n, seen.live_of)
    return replace(
        leg, found=found, epoch=epoch, checked=frozenset(seen.checked), live=frozenset(seen.live), blobs=seen.blobs
    )


def _keeping(fused: list[int], kept: set[int], k: int) -> list[int]:
    """The first ``k`` of ``fused``, except that every id of ``kept`` is among them: each
    displaces the lowest fused id not in ``kept``. The order stays the fused order."""
    top = fused[:k]
    missing = [r for r in fused[k:] if r in kept]
    if not missing:
        return top
    free = [i for i in range(len(top) - 1, -1, -1) if top[i] not in kept]
    chosen = set(top)
    for r, i in zip(missing, free, strict=False):
        chosen.discard(top[i])
        chosen.add(r)
    return [r for r in fused if r in chosen]
