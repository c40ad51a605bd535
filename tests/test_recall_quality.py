"""Retrieval-quality properties of recall's candidate generation (bench/bench_quality.py
measures the same on real text; these pin the principles on small, exact cases)."""

from __future__ import annotations

import time

from efface.paths.base import Query
from efface.paths.fts import POSTING_BUDGET

from conftest import record_id_of

PURPOSE = "support"


def _fill(store, groups: dict[str, int], target: str, others: int) -> None:
    """``groups``: word -> how many short records hold it alone; ``target`` holds every
    word of ``groups`` in a long text; ``others`` records hold neither."""
    records = []
    n = 0
    for word, count in groups.items():
        for _ in range(count):
            records.append({"key": f"k{n}", "text": f"{word} note {n}"})
            n += 1
    filler = " ".join(f"pad{i}" for i in range(8))
    records.append({"key": "target", "text": f"{' '.join(groups)} {filler} {target}"})
    for i in range(others):
        records.append({"key": f"o{i}", "text": f"unrelated memo number {i}"})
    store.write_many(records, tenant="t", purpose=PURPOSE, subject="s")


def _fts_first(store, text: str) -> int | None:
    q = Query(store._tenant("t"), text, store.embedder.embed([text])[0], PURPOSE, None, time.time())
    found = store._fts.candidates(q, 10)
    return found[0] if found else None


def test_every_moderately_common_word_of_a_query_counts(store):
    """Three query words, each in ~10% of the records: the one record holding all three is
    the full-text leg's best match. The old rule (drop words in more than 1% of records)
    kept only the rarest of the three, so the long record holding all three ranked below the
    short records holding that one word."""
    _fill(store, {"amberlight": 70, "basaltic": 71, "cobaltine": 72}, "end", others=500)
    assert _fts_first(store, "amberlight basaltic cobaltine") == record_id_of(store, "t", "target")


def test_a_rare_word_still_finds_its_record_among_common_words(store):
    """A query of many common words and one rare one still finds the one record with the
    rare word: words are taken rarest first, so the budget never leaves the rare one out."""
    common = {f"common{i}": 40 for i in range(6)}
    _fill(store, common, "zyxquorin", others=100)
    hits = store.recall(" ".join([*common, "zyxquorin"]), tenant="t", purpose=PURPOSE, k=5)
    assert [h.key for h in hits][:1] == ["target"]


def test_words_past_the_posting_budget_are_left_out(store):
    """The rarest word is always kept; a word whose postings would overflow the budget is
    not read (this is what bounds a query's cost as the store grows)."""
    from efface.paths import fts

    _fill(store, {"amberlight": 3, "basaltic": 20}, "end", others=10)
    old = fts.POSTING_BUDGET
    try:
        fts.POSTING_BUDGET = 10
        assert store._fts._selective(["basaltic", "amberlight"]) == ["amberlight"]
        fts.POSTING_BUDGET = 1
        assert store._fts._selective(["basaltic", "amberlight"]) == ["amberlight"]  # the rarest always
    finally:
        fts.POSTING_BUDGET = old
    assert store._fts._selective(["basaltic", "amberlight"]) == ["amberlight", "basaltic"]
    assert POSTING_BUDGET >= 1000
