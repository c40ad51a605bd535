"""The full-text index stems English words (FTS5's porter tokenizer) and verify's word probe
looks for the stems the index really holds; a store made before stemming keeps its index."""

from __future__ import annotations

import time

import apsw
import numpy as np
import pytest

from efface.paths.base import Query, VectorSearch
from efface.paths.scores import _scaled

from conftest import raw_db, record_id_of

PURPOSE = "support"
pytestmark = pytest.mark.local_only("reads the store's word index and files")


def _fts(store, text: str) -> list[int]:
    q = Query(store._tenant("t"), text, store.embedder.embed([text])[0], PURPOSE, None, time.time())
    return store._fts.candidates(q, 10)


@pytest.mark.sqlite_only("the SQLite index stems; the memory origin's word index does not")
def test_a_word_is_found_by_another_form_of_it(store):
    store.write("a", "the kettle was running hot all night", tenant="t", subject="s", purpose=PURPOSE)
    store.write("b", "a note about tea", tenant="t", subject="s", purpose=PURPOSE)
    assert _fts(store, "runs") == [record_id_of(store, "t", "a")]
    assert [h.key for h in store.recall("kettles runs", tenant="t", purpose=PURPOSE, k=1)] == ["a"]


@pytest.mark.sqlite_only("the SQLite index stems")
def test_forms_of_one_word_count_its_postings_once(store):
    store.write("a", "running", tenant="t", subject="s", purpose=PURPOSE)
    assert store._fts._selective(["runs", "running", "run"]) == ["runs"]


@pytest.mark.sqlite_only("the SQLite index stems")
def test_a_stem_that_stems_further_is_matched_as_it_is(store):
    """Porter's stem of 'cause' is 'caus', whose own stem is 'cau': a probe that sent the
    term through the tokenizer again would ask for 'cau' and never find the record."""
    store.write("a", "because of the cause", tenant="t", subject="s", purpose=PURPOSE)
    rid = record_id_of(store, "t", "a")
    text = store._origin.text
    assert text.index_terms(["cause", "because"]) == ["caus", "becaus"]
    assert text.matching_ids(["caus"], [rid]) == [rid]
    assert text.matching_ids(["becaus", "caus"], [rid, rid + 1]) == [rid]
    assert text.matching_ids(["cau"], [rid]) == []


@pytest.mark.sqlite_only("writes into the store's file behind it")
def test_verify_finds_erased_stems_left_in_the_index(store):
    """An index that still holds an erased record's terms fails verify's word probe, also when
    the terms are stems that are not their own stem ('caus', 'becaus')."""
    store.write("a", "because of the cause", tenant="t", subject="alice", purpose=PURPOSE)
    store.write("b", "another cause, because", tenant="t", subject="bob", purpose=PURPOSE)
    rid = record_id_of(store, "t", "a")
    r = store.forget(tenant="t", subject="alice")
    assert next(c for c in store.verify(r.handle).checks if c.name == "fts.by_text").outcome == "pass"
    # put the erased row's tokens back into the index, as a broken delete would leave them
    db = apsw.Connection(str(store._origin.path))
    db.setbusytimeout(5000)
    with db:
        db.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (rid, "because cause"))
    db.close()
    probe = next(c for c in store.verify(r.handle).checks if c.name == "fts.by_text")
    assert probe.outcome == "fail"
    assert "1 erased records still matched" in probe.detail


@pytest.mark.sqlite_only("rebuilds the store's index with the tokenizer of older stores")
def test_a_store_made_before_stemming_keeps_its_index_and_works(store, reopen):
    store.write("a", "the kettle was running hot", tenant="t", subject="alice", purpose=PURPOSE)
    store.write("b", "tea notes", tenant="t", subject="bob", purpose=PURPOSE)
    path = str(store._origin.path)
    store.close()
    db = apsw.Connection(path)
    with db:  # the index as an older efface made it (unicode61, no stems), to be re-fed on open
        db.execute("DROP TABLE fts")
        db.execute(
            "CREATE VIRTUAL TABLE fts USING fts5(text, content='records', content_rowid='id',"
            " tokenize='unicode61 remove_diacritics 2')"
        )
        db.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 0)")
        db.execute("DELETE FROM meta WHERE k='fts.folded'")
    db.close()
    store = reopen(store)
    assert store._origin.text.stems is False
    assert "porter" not in raw_db(store).execute("SELECT sql FROM sqlite_schema WHERE name='fts'").fetchone()[0]
    assert _fts(store, "running") == [record_id_of(store, "t", "a")]
    assert _fts(store, "runs") == []  # no stems in this index: its words as they were
    r = store.forget(tenant="t", subject="alice")
    assert next(c for c in store.verify(r.handle).checks if c.name == "fts.by_text").outcome == "pass"
    assert "a" not in [h.key for h in store.recall("kettle", tenant="t", purpose=PURPOSE)]


class _TextLeg:
    name = "fts"


class _VectorLeg:
    name = "ann"

    def size(self, tenant):
        return 0


def test_fusion_scales_ignore_how_many_candidates_a_leg_had():
    """A text score counts as its share of the query's ceiling: a near tie on a three-record
    list weighs what it weighs on a hundred-record list (a spread normalisation over the text
    scores made it a fixed, large gap)."""
    assert len(_scaled(False, *_judged({}), 10.0)) == 0
    short = _as_dict({7: 2.01, 8: 2.0, 9: 1.6}, _TextLeg(), 10.0)
    assert short[7] - short[8] == pytest.approx(0.001)
    long = _as_dict({7: 2.01, 8: 2.0, **{i: 0.01 * i for i in range(10, 110)}}, _TextLeg(), 10.0)
    assert long[7] == short[7] and long[8] == short[8]
    # a leg that cannot say its ceiling counts by rank, its first as 1
    ranked = _as_dict({3: 1.0, 1: 1.0, 2: 0.5}, _TextLeg(), None)
    assert ranked[1] == 1.0 and ranked[3] < 1.0 and ranked[2] < ranked[3]  # ties by id: a stable order
    # cosines: standard scores over the union, a spread of zero puts all at the middle
    assert _as_dict({1: 0.3, 2: 0.3}, _VectorLeg(), None) == {1: 0.5, 2: 0.5}
    cos = _as_dict({1: 0.9, 2: 0.1, 3: 0.5}, _VectorLeg(), None)
    assert cos[1] > cos[3] > cos[2] >= 0.0


def _judged(scores: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(list(scores), dtype=np.int64), np.asarray(list(scores.values()), dtype=np.float64)


def _as_dict(scores: dict[int, float], leg, ceiling) -> dict[int, float]:
    ids, values = _judged(scores)
    return dict(zip(ids.tolist(), _scaled(isinstance(leg, VectorSearch), ids, values, ceiling).tolist(), strict=True))


def test_with_a_lexical_embedder_recall_keeps_the_text_order(store):
    """The hashing embedder is built from the words alone: recall's order is then the full-text
    leg's wherever it has k candidates (its cosine only breaks ties and fills)."""
    words = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor"]
    records = []
    for i in range(120):
        picked = [words[(i * 7 + j * 3) % len(words)] for j in range(1 + i % 4)]
        records.append({"key": f"k{i}", "text": " ".join(picked) + f" entry {i} " + "filler " * (i % 9)})
    store.write_many(records, tenant="t", purpose=PURPOSE, subject="s")
    assert store.embedder.lexical
    for query in ("amber cobalt", "fjord garnet harbor", "dune ember", "basalt"):
        q = Query(store._tenant("t"), query, store.embedder.embed([query])[0], PURPOSE, None, time.time())
        bm25 = dict(store._fts.scored(q, 100))
        hits = store.recall(query, tenant="t", purpose=PURPOSE, k=5)
        got = [round(bm25.get(record_id_of(store, "t", h.key), -1.0), 9) for h in hits]
        # the hits' text scores are the five best, best first (equal scores in any order)
        assert got == [round(x, 9) for x in sorted(bm25.values(), reverse=True)[:5]]
