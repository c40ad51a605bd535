"""A ranking ordered only as far as it is read gives the same order as sorting all of it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from efface.ranking import Ranking, live_first


def _whole(ids: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
    """Best first, ties by id: the order every prefix must agree with."""
    return sorted(zip(ids.tolist(), scores.tolist(), strict=True), key=lambda p: (-p[1], p[0]))


# few distinct scores, so ties fall across the cut between the prefix and the rest
_lists = st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.25, 7.0]) | st.floats(0, 10), max_size=300)


@settings(max_examples=200, deadline=None)
@given(scores=_lists, reads=st.lists(st.integers(0, 320), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_every_prefix_read_is_the_head_of_the_whole_order(scores, reads, seed):
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(10_000, size=len(scores), replace=False)).astype(np.int64)
    values = np.asarray(scores, dtype=np.float64)
    expected = _whole(ids, values)
    ranking = Ranking(ids, values)
    assert len(ranking) == len(scores)
    for m in reads:  # in any order: a shorter read after a longer one, a longer after a shorter
        got_ids, got_scores = ranking.head(m)
        assert list(zip(got_ids.tolist(), got_scores.tolist(), strict=True)) == expected[:m]


def test_a_short_read_of_a_long_list_does_not_sort_all_of_it(monkeypatch):
    """The point of it: the first hundred of 50,000 are picked without a whole sort."""
    rng = np.random.default_rng(3)
    ids = np.arange(50_000, dtype=np.int64)
    scores = rng.integers(0, 40, 50_000).astype(np.float64)  # many ties
    ranking = Ranking(ids, scores)
    sorted_sizes: list[int] = []
    real = np.argsort

    def counting(a, *args, **kwargs):
        sorted_sizes.append(len(a))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", counting)
    got, _ = ranking.head(100)
    assert max(sorted_sizes) < 50_000
    assert got.tolist() == [i for i, _ in _whole(ids, scores)[:100]]


@settings(max_examples=100, deadline=None)
@given(
    scores=st.lists(st.integers(0, 5), max_size=400),
    dead=st.sets(st.integers(0, 399)),
    n=st.integers(0, 60),
)
def test_live_first_gives_the_first_n_live_in_order(scores, dead, n):
    ids = np.arange(len(scores), dtype=np.int64)
    values = np.asarray(scores, dtype=np.float64)
    asked: list[int] = []

    def live_of(chunk: list[int]) -> set[int]:
        asked.extend(chunk)
        return {i for i in chunk if i not in dead}

    got = live_first(Ranking(ids, values), n, live_of)
    expected = [p for p in _whole(ids, values) if p[0] not in dead][:n]
    assert got == expected
    assert len(asked) == len(set(asked))  # each id checked once
