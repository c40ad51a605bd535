"""How recall puts each leg's scores on one scale, and how fully the vector leg votes.

:func:`_scaled` maps a leg's scores to a scale that does not depend on its candidate list's
length; :func:`_standing` says how far the vector leg's best cosine stands out from its tenant
(:func:`_background`, a random sample of the tenant's live vectors, where the origin offers one),
so a vector leg that cannot tell its best from the rest (chat turns under MiniLM) stops voting.
Used by :mod:`.recall`.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist
from typing import cast

import numpy as np

from ..capable import capable
from ..origin.capabilities import VectorSample
from ..text import content_words, query_words, words
from .base import Query

RRF_K = 60
"""Reciprocal rank constant (Cormack et al. 2009), for a path that gives an order only."""

SPREAD = 3.0
"""Standard deviations either side of the mean that map a vector leg's cosines to [0, 1]
(DBSF's convention: nearly all of a leg's scores fall inside), the range a text leg's share
spans too, so the two legs weigh alike. Not tuned: weights of 0.5 and 2 for the text leg were
measured and neither was better on both corpora (docs/benchmarks-history.md)."""

BAND = 0.5
"""Standard deviations above :data:`SPREAD` over which the vector leg's vote rises from none
to full (:func:`_vote`). A best cosine that does not clear :data:`SPREAD` standard deviations
above its tenant's (the edge of nearly all of a leg's scores, the top of the scale above, and
about where the best of a thousand unrelated records lands by chance: the expected maximum of
1,000 normal draws is 3.2 sd) is no evidence that the leg found anything. The band was 2 to
3 until session 25: chat turns under MiniLM, whose best stands 2.4 sd out at the median, voted
at about 40 % and put the right turn below where the words alone put it. Replayed on the
three sets (bench/experiments/exp_fusion_gate.py; docs/benchmarks.md), 3 to 3.5 is the
highest band that leaves the man pages' recall@10 where it was."""

MIN_BACKGROUND = 10
"""Records the vector leg did not propose that its vote is judged against, at least
(:func:`_standing`); with fewer it votes fully."""

SAMPLE = 256
"""Records of the tenant, drawn at random, that the vector leg's best cosine is judged
against (:func:`_background`): a mean and a spread, to a few hundredths of a standard
deviation (bench/experiments/exp_fusion_standing.py: 128 and 256 judge alike)."""


COORDINATED = 2
"""Times ``k``: how many of the fused list's first records recall re-scores by
:func:`coordinated` (their texts are read for it, with the ``k`` returned)."""

COORDINATION_CHARS = 1 << 16
"""The longest text :func:`coordinated` reads (characters). Folding and splitting a text costs
in proportion to its length (a 1 MiB text of accented words: tens of milliseconds, and 2k of
them are read); a longer text is a document, not a turn, and its BM25 share already weighs its
length, so it keeps its share whole: it is never judged on a part of itself."""


def coordinated(question: str, texts: Sequence[str], share: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Fused scores ``total`` of records (their ``texts``) with each one's text share
        ``share`` (its BM25 over the ceiling) scaled by the square root of its coordination: the
        share of the question's content words (:func:`~efface.text.content_words`, as folded
        words, not stems) that its text holds. BM25 sums what each word a record holds adds and
        saturates each word's repetitions, so a record that repeats one of the rarer words, or is
        short, can outscore one that holds every word of the question once; on chat turns the turn
        that answers usually holds the asker's words. Lucene's classic similarity multiplied by the
        coordination itself; the square root halves what it takes from a record missing words (the
        man pages' queries use other words than their pages: coordination alone costs their
        full-text ranking 3.4 points of recall@10, its root 1.4, and the fused list 0.5). A text
    longer than :data:`COORDINATION_CHARS` keeps its share whole (it is not read). Issue #36;
        bench/experiments/exp_fusion_calibration.py; docs/benchmarks.md, "Recall on conversations"."""
    wanted = set(content_words(query_words(question)))
    if not wanted:
        return total
    held = np.array(
        [1.0 if len(t) > COORDINATION_CHARS else len(wanted.intersection(words(t))) / len(wanted) for t in texts],
        dtype=np.float64,
    )
    return total - share + share * np.sqrt(held)


def _scaled(vector_leg: bool, ids: np.ndarray, v: np.ndarray, ceiling: float | None) -> np.ndarray:
    """A leg's scores ``v`` (of ``ids``) on a scale that does not depend on its candidate
    list's length: standard scores of cosines over the union for a vector path, a share of
    the query's best possible score for a scoring path that knows it, and reciprocal rank
    (scaled so the first is 1; ties by id) for one that gives only an order or no ceiling."""
    if not len(v):
        return np.empty(0, dtype=np.float64)
    if vector_leg:
        mu, sd = float(v.mean()), float(v.std())
        if sd == 0.0:
            return np.full(len(v), 0.5)
        # no floor above: a cosine far above the rest is the strongest evidence there is; below,
        # 3 sd under the mean is no evidence at all (and a fused score stays >= 0)
        return np.maximum(0.0, (v - mu) / (2 * SPREAD * sd) + 0.5)
    if ceiling:
        return v / ceiling
    out = np.empty(len(v), dtype=np.float64)
    out[np.lexsort((ids, -v))] = (RRF_K + 1) / (RRF_K + np.arange(len(v), dtype=np.float64) + 1)
    return out


def _background(origin, q: Query) -> np.ndarray | None:
    """The query's cosines with a random sample of its tenant's live records
    (:data:`SAMPLE` of them, :class:`~efface.origin.base.VectorSample`), or None where the
    origin offers no sample (or too small a one: then the union's records only the words
    found stand for the tenant)."""
    if not capable(origin, VectorSample):
        return None
    m = cast(VectorSample, origin).vector_sample(q.tenant, q.purpose, q.now, SAMPLE)
    if len(m) < MIN_BACKGROUND or m.shape[1] != len(q.vector):
        return None
    return (m @ np.asarray(q.vector, dtype=np.float32)).astype(np.float64)


def _standing(
    ids: np.ndarray, cosines: np.ndarray, proposed: Sequence[int], background: np.ndarray | None = None
) -> float:
    """How fully the vector leg votes, in [0, 1]: how far its best cosine (of ``cosines``, of
    the union's ``ids``, ascending) stands above the ``background`` cosines (the query's with
    a random sample of its tenant: :func:`_background`) or, without one, the cosines of the
    union's records it did not propose (not in ``proposed``, its own candidates), in their
    standard deviations, from :data:`SPREAD` (not at all) to ``SPREAD + BAND`` (fully): :func:`_vote`. 1 when
    fewer than :data:`MIN_BACKGROUND` records are not its own, or they all score alike."""
    if background is not None:
        # the best's own cosine, where the sample holds it (a tenant of a few records), is not
        # what it is judged against: in a sample of n with it, it can stand at most sqrt(n - 1)
        # sd out, under SPREAD for a tenant of ten
        background = _without_best(background, float(cosines.max()))
        if len(background) < MIN_BACKGROUND:
            return 1.0
        sd = float(background.std())
        if sd < 1e-9:  # every one alike (to rounding): nothing to judge by
            return 1.0
        z = (float(cosines.max()) - float(background.mean())) / sd
        return _vote(z, _edge(len(background) + 1) if len(background) + 1 < SAMPLE else SPREAD)
    mine = np.fromiter(proposed, dtype=np.int64, count=len(proposed))
    at = np.minimum(np.searchsorted(ids, mine), len(ids) - 1)  # ``ids`` ascend (the union's order)
    own = np.zeros(len(ids), dtype=bool)
    own[at[ids[at] == mine]] = True
    others = _without_best(cosines[~own], float(cosines.max()))  # when the words found the best
    if len(others) < MIN_BACKGROUND:
        return 1.0
    sd = float(others.std())
    if sd < 1e-9:
        return 1.0
    return _vote((float(cosines.max()) - float(others.mean())) / sd)


def _without_best(cosines: np.ndarray, best: float) -> np.ndarray:
    """``cosines`` without one cosine of the ``best`` (the best record's own), where they hold it."""
    if not len(cosines):
        return cosines
    at = int(np.argmax(cosines))
    return np.delete(cosines, at) if cosines[at] >= best - 1e-6 else cosines


def _vote(z: float, edge: float = SPREAD) -> float:
    """The vector leg's vote for a best cosine ``z`` standard deviations above its background:
    none up to ``edge``, full from ``edge + BAND``, linear between."""
    return min(1.0, max(0.0, (z - edge) / BAND))


def _edge(n: int) -> float:
    """Where the best of a tenant of ``n`` records (fewer than :data:`SAMPLE`: the sample is
    all of it) stands by chance, about: the expected maximum of ``n`` normal draws,
    ``Φ⁻¹(1 - 1/n)`` (1.4 sd for twelve records), at most :data:`SPREAD`. A larger tenant's
    best is judged against :data:`SPREAD`, which that maximum passes at about 740 records."""
    return min(SPREAD, NormalDist().inv_cdf(1.0 - 1.0 / max(n, 2)))
