"""Recall's fusion on tiny stores: a handful of everyday memories, each natural question
answered by the right memory first (bench/bench_quality.py measures the same fusion on
large sets of real text; a rule that wins there must not lose here)."""

from __future__ import annotations

import time

import pytest

import test_embed
from efface.paths.base import Query
from efface.paths.recall import _keeping

minilm = test_embed.minilm  # the MiniLM fixture (loaded offline, skipped or failed as there)

SIX = test_embed.MEMORIES  # the six memories test_embed asks by meaning

EVERYDAY = {
    **SIX,
    "dentist": "Dentist appointment on Tuesday at 3 pm",
    "peanuts": "Bob is allergic to peanuts",
    "car": "The car is due for an oil change in March",
    "birthday": "Grandma's birthday is on the 12th of June",
    "plants": "Water the plants on the balcony every other day",
    "wifi": "The office wifi drops every afternoon",
}

QUESTIONS = {
    "What does Alice like to drink?": "tea",
    "When does Alice's plane leave?": "flight",
    "Where does Alice live now?": "flat",
    "How does Bob take his coffee?": "coffee-bob",
    "What food must Bob avoid?": "peanuts",
    "What does Carol do on weekends?": "hike",
    "When is grandma's birthday?": "birthday",
    "When do I see the dentist?": "dentist",
    "Which hardware in the server room needs replacing?": "fans",
    "When does the car need servicing?": "car",
    "How often should the plants get water?": "plants",
    "Why is the internet unreliable at work?": "wifi",
}

TENANT, PURPOSE = "acme", "support"


def _fill(store, memories: dict[str, str]) -> None:
    store.write_many([{"key": k, "text": t} for k, t in memories.items()], tenant=TENANT, purpose=PURPOSE, subject="s")


@pytest.mark.parametrize("memories", [SIX, EVERYDAY], ids=["six", "twelve"])
def test_each_everyday_question_gets_its_memory_first(minilm, open_store, memories):
    """With reciprocal-rank fusion the twelve-memory store answered three of these with the
    wrong memory ("Where does Alice live now?" -> the tea); with spread fusion the six-memory
    store answered the first with the apartment (a z-score made two matches of "alice" and
    "to" a full-sized gap). Every question here must get its own memory first."""
    store = open_store(embedder=minilm)
    _fill(store, memories)
    wrong = {}
    for question, want in QUESTIONS.items():
        if want not in memories:
            continue
        hits = store.recall(question, tenant=TENANT, purpose=PURPOSE, k=3)
        if not hits or hits[0].key != want:
            wrong[question] = [h.key for h in hits]
    assert not wrong


def test_a_store_of_one_memory_and_a_query_sharing_no_word(minilm, open_store):
    """One candidate (a spread of zero) and an empty text leg: the memory is still found."""
    store = open_store(embedder=minilm)
    _fill(store, {"tea": SIX["tea"]})
    assert [h.key for h in store.recall("favourite beverages", tenant=TENANT, purpose=PURPOSE)] == ["tea"]
    _fill(store, {"fans": SIX["fans"]})
    hits = store.recall("favourite beverages", tenant=TENANT, purpose=PURPOSE)
    assert [h.key for h in hits][:1] == ["tea"] and all(h.via == ("ann",) for h in hits)


def test_the_text_ceiling_bounds_every_score(store):
    """A record's BM25 is a share of the query's ceiling: the ceiling must be at least the
    best score any record gets, on either backend's BM25 (a record holding every word many
    times, in a short text, comes closest)."""
    _fill(
        store,
        {
            "full": "amber basalt cobalt " * 20,
            "one": "amber",
            "two": "amber basalt",
            **{f"pad{i}": f"unrelated memo {i}" for i in range(30)},
        },
    )
    for text in ("amber basalt cobalt", "amber", "amber missingword", "cobalt basalt"):
        q = Query(store._tenant(TENANT), text, store.embedder.embed([text])[0], PURPOSE, None, time.time())
        got = store._fts.scored(q, 50)
        ceiling = store._fts.ceiling(q)
        assert got and 0 < max(x for _, x in got) <= ceiling
    # A word no record holds adds to the ceiling (the words found explain less of the query).
    q1, q2 = (
        Query(store._tenant(TENANT), t, store.embedder.embed([t])[0], PURPOSE, None, time.time())
        for t in ("amber", "amber missingword")
    )
    assert store._fts.ceiling(q2) > store._fts.ceiling(q1)


def test_the_text_ceiling_takes_a_document_frequency_above_the_store_size(store):
    """#33: the count of rows and a term's document frequency come from different moments
    (a writer or a forget between them), so a df can exceed the count; the SQLite index's
    idf then took the log of a negative number (ValueError: math domain error). Such a term
    is in every row: it counts as one, never fails, and never lowers the ceiling."""
    _fill(store, {f"n{i}": f"note {i}" for i in range(5)})
    text = store._origin.text
    n = text.doc_count()
    every = text.bm25_ceiling([n])
    for df in (n + 1, n + 2, 10 * n + 7):
        got = text.bm25_ceiling([df])
        assert got == pytest.approx(text.bm25_ceiling([df, df]) / 2) and 0 < got <= every + 1e-9
        assert text.bm25_ceiling([1, df]) > text.bm25_ceiling([1])


def test_each_legs_best_stays_in_the_top_k():
    """A record one leg ranks first is kept in the top k even when its fused score is low; it
    displaces the lowest fused record no leg ranks that high, and the fused order stays."""
    fused = [1, 2, 3, 4, 5, 6, 7]
    assert _keeping(fused, {7}, 3) == [1, 2, 7]
    assert _keeping(fused, {1, 7}, 3) == [1, 2, 7]
    assert _keeping(fused, {2, 6, 7}, 3) == [2, 6, 7]
    assert _keeping(fused, {1}, 3) == [1, 2, 3]
    assert _keeping(fused, {5, 6, 7}, 2) == [5, 6]  # never more than k


@pytest.mark.parametrize("embedder", ["hashing", "minilm"])
def test_the_text_legs_best_matches_of_another_purpose_do_not_crowd_out_this_ones(open_store, embedder, request):
    """The full-text leg ranks every match and recall checks them live best first, in chunks:
    when the best few hundred belong to another purpose (or to a forgotten subject), the
    leg still brings this purpose's matches, the best of them first."""
    store = open_store(embedder=request.getfixturevalue("minilm") if embedder == "minilm" else "hashing")
    store.write_many(
        [{"key": f"sales-{i}", "text": f"invoice invoice invoice quarterly invoice run {i}"} for i in range(300)],
        tenant=TENANT,
        purpose="sales",
        subject="s",
    )
    support = {f"support-{i}": f"an invoice the customer {i} disputes, refund asked" for i in range(30)}
    store.write_many(
        [{"key": k, "text": t, "subject": f"customer-{i % 3}"} for i, (k, t) in enumerate(support.items())],
        tenant=TENANT,
        purpose=PURPOSE,
    )
    store.forget(tenant=TENANT, subject="customer-0")
    hits = store.recall("invoice", tenant=TENANT, purpose=PURPOSE, k=10)
    assert len(hits) == 10
    assert all(h.key.startswith("support-") and int(h.key.split("-")[1]) % 3 != 0 for h in hits)
    assert all("fts" in h.via for h in hits)


@pytest.mark.parametrize("memo", ["liveness in memory", "liveness in SQLite"])
def test_a_text_leg_checked_before_a_forget_is_checked_again(open_store, backend, monkeypatch, memo):
    """Without the origin's copy of liveness in memory (a subject-scoped recall, a large store
    still loading it) the full-text leg checks its matches live on its worker, in a snapshot of
    its own; recall takes that check as it is only when its own snapshot is of the same epoch.
    A forget committed in between (here: right after the leg's check, before the query's
    vector is ready) makes recall check the leg's matches again: nothing forgotten comes back.
    With the copy, the leg hands its ranking over unchecked and recall checks it against the
    copy, which the forget has updated before it returned."""
    import threading

    import numpy as np

    from efface.embed.hashing import HashingEmbedder
    from efface.paths import recall as R

    done = threading.Event()

    class Slow:
        """A non-lexical embedder (so the text leg runs beside the encode) whose query vector
        is ready only once the forget below has committed."""

        name, dim = "slow-hashing", 384

        def __init__(self) -> None:
            self._h = HashingEmbedder()

        def embed(self, texts):
            if len(texts) == 1 and texts[0].startswith("invoice"):
                assert done.wait(30)
            return self._h.embed(texts)

    store = open_store(embedder=Slow())
    in_memory = backend == "sqlite" and memo == "liveness in memory"
    if backend == "sqlite" and not in_memory:
        monkeypatch.setattr(store._origin.liveness, "usable", lambda subject: False)
    store.write_many(
        [{"key": f"k{i}", "text": f"invoice {i} for the order", "subject": ("alice", "bob")[i % 2]} for i in range(40)],
        tenant=TENANT,
        purpose=PURPOSE,
    )
    legs = []
    real = R._text_leg_beside

    def then_forget(*args):
        leg = real(*args)
        legs.append(leg)
        store.forget(tenant=TENANT, subject="alice")
        done.set()
        return leg

    monkeypatch.setattr(R, "_text_leg_beside", then_forget)
    hits = store.recall("invoice order", tenant=TENANT, purpose=PURPOSE, k=10)
    assert len(legs) == 1 and done.is_set()
    if in_memory:  # checked by recall against the copy, after the forget
        assert legs[0].epoch is None and legs[0].ranking is not None and not legs[0].live
    elif backend == "sqlite":  # the SQLite origin hands the leg its ranking unchecked: checked on the worker
        assert legs[0].epoch is not None and len(legs[0].live) == 40  # alice's were live then
    assert len(hits) == 10
    assert all(int(h.key[1:]) % 2 == 1 for h in hits), [h.key for h in hits]
    assert np.all([("fts" in h.via) for h in hits])


def test_the_vector_leg_votes_as_far_as_its_best_stands_out_from_what_only_the_words_found():
    """``_standing``: 0 when the best cosine is within SPREAD standard deviations of the
    cosines of records the vector leg did not propose, 1 from SPREAD + BAND, linear between;
    1 when too few records are the words' alone to say what a typical cosine is."""
    import numpy as np

    from efface.paths.scores import BAND, MIN_BACKGROUND, SPREAD, _standing

    others = np.repeat([0.25, 0.35], 100)  # mean 0.3, sd 0.05, none above 1 sd
    ids = np.arange(210, dtype=np.int64)
    proposed = list(range(200, 210))  # the vector leg's own candidates: ids 200-209

    def with_best(z: float) -> float:
        cos = np.concatenate([others, np.full(10, 0.3 + 0.05 * (SPREAD - 1.5))])
        cos[200] = 0.3 + 0.05 * z
        return _standing(ids, cos, proposed)

    assert with_best(SPREAD + BAND + 1) == 1.0
    assert with_best(SPREAD + BAND) == pytest.approx(1.0)
    assert with_best(SPREAD + BAND / 2) == pytest.approx(0.5)
    assert with_best(SPREAD) == pytest.approx(0.0, abs=1e-9)
    assert with_best(SPREAD - 0.5) == 0.0  # voted half before session 25: chat turns' typical best
    assert with_best(1.0) == 0.0
    # a best that is one of the words' own records counts too (the union's best), and is not
    # part of what it is judged against
    cos = np.concatenate([others, np.full(10, 0.3)])
    cos[5] = 0.3 + 0.05 * (SPREAD + BAND + 0.1)
    assert _standing(ids, cos, proposed) == 1.0
    # too few records the vector leg did not propose: it votes fully
    few = np.arange(MIN_BACKGROUND - 1 + 10, dtype=np.int64)
    assert _standing(few, np.linspace(0.1, 0.2, len(few)), list(range(MIN_BACKGROUND - 1, len(few)))) == 1.0
    assert _standing(ids, np.full(210, 0.4), proposed) == 1.0  # every cosine alike: nothing to judge by


def test_the_vector_leg_is_judged_against_a_sample_of_its_tenant_when_there_is_one():
    """``_standing`` with a ``background`` (the query's cosines with a random sample of the
    tenant): the best cosine is judged against it, not against the union's records."""
    import numpy as np

    from efface.paths.scores import BAND, SAMPLE, SPREAD, _standing

    ids = np.arange(22, dtype=np.int64)
    # the words' records at 0.35 and 0.45 (mean 0.4, sd 0.05), the vector leg's at 0.44: against
    # the union's records the best (0.45) stands 1 sd out, and the vector leg does not vote
    cos = np.concatenate([np.tile([0.35, 0.45], 6), np.full(10, 0.44)])
    proposed = list(range(12, 22))
    assert _standing(ids, cos, proposed) == 0.0
    sample = np.repeat([0.05, 0.15], SAMPLE // 2)  # mean 0.1, sd 0.05: 0.45 stands 7 sd above the tenant
    assert _standing(ids, cos, proposed, sample) == 1.0
    sample = np.repeat([0.35, 0.44], SAMPLE // 2)
    assert _standing(ids, cos, proposed, sample) == 0.0
    mid = 0.45 - 0.05 * (SPREAD + BAND / 2)  # the best half way into the band
    assert _standing(ids, cos, proposed, np.repeat([mid - 0.05, mid + 0.05], SAMPLE // 2)) == pytest.approx(0.5)
    assert _standing(ids, cos, proposed, np.full(SAMPLE, 0.3)) == 1.0  # every cosine alike
    # the best's own cosine in the sample (a tenant of a few records) is left out of it
    small = np.concatenate([np.repeat([mid - 0.05, mid + 0.05], SAMPLE // 2), [0.45]])
    assert _standing(ids, cos, proposed, small) == pytest.approx(0.5)


def test_a_small_tenants_best_is_judged_against_the_chance_maximum_of_its_size():
    """A sample smaller than :data:`SAMPLE` is the whole tenant: its best is judged against
    where the best of that many unrelated records lands by chance (``_edge``), at most
    SPREAD; in a tenant of twelve a best 2 sd out votes fully, in a large one it does not."""
    import numpy as np

    from efface.paths.scores import BAND, SAMPLE, SPREAD, _edge, _standing

    assert _edge(12) == pytest.approx(1.38, abs=0.01)
    assert _edge(100) == pytest.approx(2.33, abs=0.01)
    assert _edge(10_000) == SPREAD
    ids = np.arange(3, dtype=np.int64)
    cos = np.array([0.1, 0.2, 0.3])
    eleven = np.array([0.0, 0.2] * 5 + [0.1])  # mean 0.1, sd about 0.095: 0.3 stands 2.1 sd out
    assert _standing(ids, cos, [2], eleven) == 1.0
    assert _edge(12) + BAND < 2.0
    large = np.concatenate([eleven] * (SAMPLE // len(eleven) + 1))[:SAMPLE]
    assert _standing(ids, cos, [2], large) == 0.0


def test_a_querys_stop_words_are_dropped_only_while_other_words_remain():
    """The full-text leg scores a question by its content words (``content_words``), and by
    all of its words when every one is a stop word."""
    from efface.text import STOP_WORDS, content_words, query_words

    assert content_words(query_words("When did Dave see that band?")) == ["dave", "see", "band"]
    assert content_words(query_words("What did Alice say about her sister?")) == ["alice", "say", "sister"]
    assert content_words(query_words("Who is it?")) == ["who", "is", "it"]
    assert content_words(query_words("Don't they?")) == ["don", "t", "they"]
    assert content_words([]) == []
    assert {"the", "what", "did", "t", "don"} <= STOP_WORDS and "band" not in STOP_WORDS


def test_a_question_made_of_stop_words_and_one_name_finds_the_name(open_store):
    """End to end: the stop words of a question do not decide which record its words find."""
    store = open_store()
    store.write("a", "what was it that they did there", tenant=TENANT, purpose=PURPOSE, subject="s")
    store.write("b", "Zelda moved to Porto", tenant=TENANT, purpose=PURPOSE, subject="s")
    for i in range(8):
        store.write(f"f{i}", f"note {i} about the weather", tenant=TENANT, purpose=PURPOSE, subject="s")
    hits = store.recall("What was it that Zelda did there?", tenant=TENANT, purpose=PURPOSE, k=2)
    assert hits[0].key == "b", [h.key for h in hits]
    assert [h.key for h in store.recall("what was it", tenant=TENANT, purpose=PURPOSE, k=1)] == ["a"]


@pytest.mark.local_only
def test_an_origin_samples_only_its_tenants_live_vectors_for_the_purpose(open_store, backend):
    """:class:`~efface.origin.base.VectorSample`: at most ``n`` of the tenant's records live
    for the purpose, none of another tenant, purpose or a forgotten record; the same draw
    until a write."""
    import numpy as np

    from efface.origin.capabilities import VectorSample

    store = open_store()
    origin = store._origin
    assert isinstance(origin, VectorSample)
    mine = {f"m{i}": f"note number {i} about topic {i % 7} and more" for i in range(40)}
    store.write_many([{"key": k, "text": t} for k, t in mine.items()], tenant=TENANT, purpose=PURPOSE, subject="s")
    store.write_many([{"key": "o", "text": "another purpose"}], tenant=TENANT, purpose="billing", subject="s")
    store.write_many([{"key": "x", "text": "another tenant"}], tenant="other", purpose=PURPOSE, subject="s")
    store.write_many([{"key": "gone", "text": "forgotten"}], tenant=TENANT, purpose=PURPOSE, subject="bye")
    store.forget(tenant=TENANT, subject="bye")
    tid, now = store._tenant(TENANT), time.time()
    expected = store.embedder.embed(list(mine.values()))
    got = origin.vector_sample(tid, PURPOSE, now, 1000)
    assert got.shape == (len(mine), expected.shape[1])
    # every row is one of the tenant's live records' vectors (half precision as stored)
    assert np.allclose(np.sort(got @ expected.T, axis=1)[:, -1], 1.0, atol=2e-3)
    few = origin.vector_sample(tid, PURPOSE, now, 8)
    # drawn from the tenant's records, those of another purpose then left out: 7 or 8
    assert len(few) in (7, 8) and np.array_equal(few, origin.vector_sample(tid, PURPOSE, now, 8))
    assert len(origin.vector_sample(tid, "billing", now, 1000)) == 1
    assert len(origin.vector_sample(store._tenant("nobody"), PURPOSE, now, 1000)) == 0


def test_coordination_scales_a_records_text_share_by_the_root_of_the_question_words_it_holds():
    """``coordinated``: a record holding every content word of the question keeps its text
    share; one holding half keeps sqrt(1/2) of it; the stop words and case do not count, and
    the rest of the fused score (the vector leg's) is left as it is."""
    import numpy as np

    from efface.paths.scores import coordinated

    texts = ["Zebra ate the apple", "the zebra slept", "nothing here", "APPLE and zebra, zebra"]
    share = np.array([0.4, 0.6, 0.0, 0.5])
    total = share + np.array([0.1, 0.2, 0.3, 0.0])
    got = coordinated("Did the zebra eat an apple?", texts, share, total)
    # content words: zebra, eat, apple ("ate" is not "eat": words, not stems)
    want = total - share + share * np.sqrt([2 / 3, 1 / 3, 0.0, 2 / 3])
    assert np.allclose(got, want), got
    assert np.array_equal(coordinated("", texts, share, total), total)  # no word: nothing to coordinate


def test_a_text_longer_than_coordination_reads_keeps_its_share_whole():
    """A document past ``COORDINATION_CHARS`` is not folded and split for coordination (its cost
    grows with the text): it keeps its share, while a short text missing the same words loses
    part of its own; at the limit itself a text is still read."""
    import numpy as np

    from efface.paths.scores import COORDINATION_CHARS, coordinated

    filler = "ö" * (COORDINATION_CHARS - len("zebra "))
    at_limit, past = "zebra " + filler, "zebra " + filler + "x"
    assert len(at_limit) == COORDINATION_CHARS
    share, total = np.array([0.5, 0.5, 0.5]), np.array([0.7, 0.7, 0.7])
    got = coordinated("zebra apple", [at_limit, past, "zebra"], share, total)
    assert np.allclose(got, [0.2 + 0.5 * np.sqrt(0.5), 0.7, 0.2 + 0.5 * np.sqrt(0.5)]), got


class _Plain:
    """The hashing embedder's vectors under a name of its own: an embedder recall does not
    know to be lexical, so its vector leg votes as a meaning leg would."""

    name, dim = "plain-hashing", 384

    def __init__(self) -> None:
        from efface.embed.hashing import HashingEmbedder

        self._h = HashingEmbedder()

    def embed(self, texts):
        return self._h.embed(texts)


@pytest.mark.parametrize("lexical", [False, True], ids=["meaning leg", "lexical embedder"])
def test_recall_rescores_its_first_records_by_coordination_only_beside_a_meaning_leg(open_store, monkeypatch, lexical):
    """End to end: with an embedder that is not lexical, the record holding one of the two
    question words scores sqrt(1/2) of its text share, the one holding both its whole share
    (scores compared with recall's own without the re-scoring); with the hashing embedder
    (lexical: the cosine only breaks ties) nothing is re-scored."""
    from efface.paths import recall as R

    store = open_store(embedder="hashing" if lexical else _Plain())
    recs = [{"key": "a", "text": "zebra zebra"}, {"key": "b", "text": "a zebra and an apple in a longer sentence"}]
    recs += [{"key": f"f{i}", "text": f"apple note number {i} for the day"} for i in range(8)]
    store.write_many(recs, tenant=TENANT, purpose=PURPOSE, subject="s")
    calls = []
    real = R.coordinated

    def counted(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(R, "coordinated", counted)
    with_it = {h.key: h.score for h in store.recall("zebra apple", tenant=TENANT, purpose=PURPOSE, k=3)}
    monkeypatch.setattr(R, "coordinated", lambda question, texts, share, total: total)
    without = {h.key: h.score for h in store.recall("zebra apple", tenant=TENANT, purpose=PURPOSE, k=3)}
    if lexical:
        assert calls == [] and with_it == without
        return
    assert len(calls) == 1 and len(calls[0]) == 6  # the first 2k of the fused list
    assert with_it["b"] == pytest.approx(without["b"], abs=2e-6)  # holds both words
    assert with_it["a"] < without["a"] - 0.05  # holds one: its text share times sqrt(1/2)


def test_the_full_text_leg_alone_is_not_coordinated(open_store, monkeypatch):
    """Coordination re-scores the fused list where a meaning leg votes beside the words; the
    full-text path recalled alone (as bench_quality's ``efface.fts_leg``) keeps its BM25 order."""
    from efface.paths import recall as R

    store = open_store(embedder=_Plain())
    store.write_many(
        [{"key": f"k{i}", "text": f"zebra number {i}"} for i in range(12)], tenant=TENANT, purpose=PURPOSE, subject="s"
    )
    monkeypatch.setattr(R, "coordinated", lambda *a: pytest.fail("coordinated without a vector leg"))
    q = Query(
        store._tenant(TENANT), "zebra apple", store.embedder.embed(["zebra apple"])[0], PURPOSE, None, time.time()
    )
    hits = R.hybrid(store._origin, [store._fts], q, 3)
    assert len(hits) == 3 and all(h.via == ("fts",) for h in hits)


def test_with_a_lexical_embedder_a_records_own_text_finds_it_first_among_equal_text_scores(open_store):
    """With the hashing embedder the cosine breaks the text scores' ties: two records hold the
    same words (on SQLite equal BM25: "calls" and "call" share a stem, "a" and "are" are stop
    words), and a recall by one's own text puts that one first (its word pairs), whichever was
    written first."""
    store = open_store(embedder="hashing")
    recs = [
        {"key": "plural", "text": "customer support calls are recorded"},
        {"key": "singular", "text": "a customer support call, recorded"},
        {"key": "typo", "text": "custmer suport"},
    ] + [{"key": f"f{i}", "text": f"quilt {i}"} for i in range(6)]
    store.write_many(recs, tenant=TENANT, purpose=PURPOSE, subject="s")
    for own in ("plural", "singular"):
        text = next(r["text"] for r in recs if r["key"] == own)
        hits = store.recall(text, tenant=TENANT, purpose=PURPOSE, k=3)
        assert [h.key for h in hits][:2] == [own, ({"plural", "singular"} - {own}).pop()]
        assert hits[1].score > 0


def test_with_a_lexical_embedder_equal_text_scores_keep_the_text_legs_order_unless_one_is_the_querys_text(open_store):
    """With the hashing embedder the cosine breaks the text scores' ties only for a record
    holding the query's own text (``SAME_TEXT``): two records hold the same three words (equal
    BM25), the one written second holds the query's two words as a pair (a higher cosine), and
    neither is the query's text: recall keeps the full-text leg's own order, as that leg alone
    returns it (issue #36: there the cosine put the answer first no more often than the order
    did). Asked by the second one's own text, that one comes first."""
    from efface.paths import recall as R

    store = open_store(embedder="hashing")
    recs = [{"key": "apart", "text": "alpha gamma beta"}, {"key": "pair", "text": "gamma alpha beta"}]
    recs += [{"key": f"f{i}", "text": f"quilt {i}"} for i in range(6)]
    store.write_many(recs, tenant=TENANT, purpose=PURPOSE, subject="s")
    question = "alpha beta"
    q_vec, a_vec, p_vec = store.embedder.embed([question, recs[0]["text"], recs[1]["text"]])
    assert float(q_vec @ p_vec) > float(q_vec @ a_vec) + 0.05  # the cosine alone would put "pair" first
    q = Query(store._tenant(TENANT), question, q_vec, PURPOSE, None, time.time())
    alone = [h.key for h in R.hybrid(store._origin, [store._fts], q, 2)]
    assert sorted(alone) == ["apart", "pair"]
    hits = store.recall(question, tenant=TENANT, purpose=PURPOSE, k=2)
    assert [h.key for h in hits] == alone
    assert hits[0].score == pytest.approx(hits[1].score)  # a tie of the text scores
    own = store.recall("Gamma, alpha beta!", tenant=TENANT, purpose=PURPOSE, k=2)  # case and punctuation aside
    assert [h.key for h in own] == ["pair", "apart"]
