"""The word index's postings held in memory (origin/sqlite/postings.py): the scores are FTS5's
own BM25, the common words past the posting budget add to the scores of the records the rare
ones find, and the postings follow every committed write, rewrite and erasure (and nothing
that rolled back), loaded or kept up, so that they always equal a fresh load of the index."""

from __future__ import annotations

import random
import threading
import time

import apsw
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import efface
from efface import compiled
from efface.origin.sqlite import inmemory
from efface.origin.sqlite import postings as postings_mod
from efface.origin.sqlite import text as sqlite_text
from efface.origin.sqlite.postings import TEXT, Postings, load

pytestmark = pytest.mark.sqlite_only("the SQLite word index's postings")

PURPOSE = "support"
WORDS = [
    "alice",
    "bob",
    "carol",
    "tea",
    "coffee",
    "green",
    "black",
    "morning",
    "evening",
    "walks",
    "runs",
    "running",
    "garden",
    "paris",
    "berlin",
    "meeting",
    "notes",
    "order",
    "number",
    "invoice",
    "birthday",
    "prefers",
    "likes",
    "drinks",
    "moved",
    "apartment",
    "city",
]


def _texts(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def _fresh(store) -> Postings:
    """The postings as a new load of the index would make them now."""
    conn = apsw.Connection(store._origin.path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        got = load(conn, store._origin.text.scoped)
    finally:
        conn.close()
    assert got is not None
    return Postings.of(got)


def _state(p: Postings) -> tuple[dict, dict, int, float]:
    terms = {}
    for col, held in enumerate(p._cols):
        for term, t in held.items():
            ids, tf = t.merged()
            keep = [j for j, i in enumerate(ids.tolist()) if i not in t.dead]  # waiting for the purge
            if keep:
                terms[(col, term)] = (ids[keep].tolist(), tf[keep].tolist())
    here = np.flatnonzero(p._here)
    lengths = {int(i): float(p._len[i]) for i in here}
    return terms, lengths, p._rows, round(p._tokens, 3)


def _same(store) -> None:
    live = store._origin.text._post
    assert live is not None
    assert _state(live) == _state(_fresh(store))


def test_scores_are_fts5s_own_bm25(tmp_path, scan_kernel):
    """In numpy and in the compiled walk (efface.compiled) alike."""
    rng = random.Random(7)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        for t, tenant in enumerate(("a", "b")):
            texts = _texts(rng, 300)
            store.write_many(
                [{"key": f"{t}-{i}", "text": x} for i, x in enumerate(texts)],
                tenant=tenant,
                subject="s",
                purpose=PURPOSE,
            )
        post = store._origin.text._post
        db = store._origin._r()
        for _ in range(30):
            words = rng.sample(WORDS, rng.randint(1, 4))
            ranking = post.rank(store._origin.text.index_terms(words), [])
            ids, scores = ranking.head(len(ranking))
            mine = dict(zip(ids.tolist(), scores.tolist(), strict=True))
            match = " OR ".join(f'"{w}"' for w in words)
            theirs = dict(db.execute("SELECT rowid, -bm25(fts, 1.0, 0.0) FROM fts WHERE fts MATCH ?", (match,)))
            assert mine.keys() == theirs.keys()
            assert all(abs(mine[i] - theirs[i]) <= 1e-6 * max(1.0, abs(theirs[i])) for i in theirs)  # float32 counts
            assert list(ids) == sorted(mine, key=lambda i: (-mine[i], i))  # best first, ties by id


def test_common_words_score_the_records_the_rare_ones_find(tmp_path, monkeypatch):
    """Past the posting budget a word no longer finds records, but it still scores the ones
    found: the record with both words ranks first (by FTS5 alone the two would tie)."""
    monkeypatch.setattr("efface.paths.fts.POSTING_BUDGET", 50)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write_many(
            [{"key": f"c{i}", "text": f"{'common' if i % 3 == 0 else 'plain'} filler {i}"} for i in range(200)],
            tenant="t",
            subject="s",
            purpose=PURPOSE,
        )
        store.write("only", "zanzibar trip", tenant="t", subject="s", purpose=PURPOSE)
        store.write("both", "zanzibar common trip", tenant="t", subject="s", purpose=PURPOSE)
        fts = store._fts
        assert fts._plan(["zanzibar", "common"], store._tenant("t"))[0] == ["zanzibar"]

        def keys(got):
            q = "SELECT key FROM records WHERE id=?"
            return [store._origin._r().execute(q, (i,)).fetchone()[0] for i, _ in got]

        assert keys(fts.scored(fts_query(store, "zanzibar common"), 10)) == ["both", "only"]
        assert [h.key for h in store.recall("zanzibar common", tenant="t", purpose=PURPOSE, k=5)][:2] == [
            "both",
            "only",
        ]
        store._origin.text.stop_postings()  # FTS5's ranking: the common word finds nothing and scores nothing
        assert keys(fts.scored(fts_query(store, "zanzibar common"), 10)) == ["only", "both"]  # the shorter first


def fts_query(store, text: str):
    from efface.paths.base import Query

    return Query(store._tenant("t"), text, np.empty(0, np.float32), PURPOSE, None, time.time())


@pytest.mark.parametrize(("tail", "drop_now"), [(4096, 16384), (2, 16384), (4096, 0), (2, 0)])
def test_the_postings_follow_writes_rewrites_and_erasures(tmp_path, monkeypatch, tail, drop_now):
    """Random writes, rewrites and forgets; at TAIL 2 the tails are merged into the arrays all
    along; at DROP_NOW 0 every erased id waits in its arrays for the purge, which verify runs."""
    monkeypatch.setattr("efface.origin.sqlite.postings.TAIL", tail)
    monkeypatch.setattr("efface.origin.sqlite.postings.DROP_NOW", drop_now)
    rng = random.Random(11)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        subjects = ["ann", "ben", "cat", "dan"]
        for step in range(40):
            op = rng.random()
            tenant = rng.choice(("t", "u"))
            who = rng.randrange(len(subjects))  # a key is always its subject's: rewrites, not takeovers
            if op < 0.5:
                texts = _texts(rng, rng.randint(1, 15))
                keys = rng.sample(range(15), len(texts))
                store.write_many(
                    [{"key": f"{who}-{k}", "text": x} for k, x in zip(keys, texts, strict=True)],
                    tenant=tenant,
                    subject=subjects[who],
                    purpose=PURPOSE,
                )
            elif op < 0.7:
                key = f"{who}-{rng.randrange(15)}"
                store.write(key, _texts(rng, 1)[0], tenant=tenant, subject=subjects[who], purpose=PURPOSE)
            elif op < 0.9:
                store.forget(tenant=tenant, subject=subjects[who])
            else:
                store.forget(tenant=tenant, key=f"{who}-{rng.randrange(15)}")
            if step % 5 == 4:
                _same(store)
        _same(store)
        post = store._origin.text._post
        gone = [i for i in range(1, 400) if not post._held(i)]
        post.purge()
        assert not post._dirty and not any(t.dead for terms in post._cols for t in terms.values())
        assert post.holds(gone, every_list=True) == []
        _same(store)


@pytest.mark.parametrize("drop_now", [16384, 0])
def test_an_erasure_leaves_nothing_of_its_records_in_memory_and_verify_says_so(tmp_path, monkeypatch, drop_now):
    monkeypatch.setattr("efface.origin.sqlite.postings.DROP_NOW", drop_now)
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write_many(
            [{"key": f"a{i}", "text": f"alice zelinski walks her dog {i}"} for i in range(10)],
            tenant="t",
            subject="alice",
            purpose=PURPOSE,
        )
        store.write("b", "bob walks too", tenant="t", subject="bob", purpose=PURPOSE)
        text = store._origin.text
        ids = [r[0] for r in store._origin._r().execute("SELECT id FROM records WHERE key LIKE 'a%'")]
        assert text.held_in_memory(ids) == ids and text._post.holds_term("zelinski")
        receipt = store.forget(tenant="t", subject="alice")
        assert not [h for h in store.recall("walks", tenant="t", purpose=PURPOSE) if h.key != "b"]
        assert text.held_in_memory(ids) == []  # after the purge it runs first
        assert text._post.holds(ids, every_list=True) == []
        assert not text._post.holds_term("zelinski") and text._post.holds_term("walk")  # bob's word stays
        _same(store)
        store.wait(receipt.handle)
        report = store.verify(receipt.handle)
        assert report.level == "erased"
        check = next(c for c in report.checks if c.name == "fts.by_text")
        assert "in none of the postings held in memory" in check.detail


def test_a_leak_into_the_postings_fails_verify(tmp_path):
    """verify asks the postings too: an erased record's id left there is a failed check."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write("a", "alice zelinski", tenant="t", subject="alice", purpose=PURPOSE)
        text = store._origin.text
        kept = Postings.of([((TEXT, "zelinski"), np.array([1]), np.array([1.0], np.float32))])
        receipt = store.forget(tenant="t", subject="alice")
        text._post = kept  # as if the forget had not reached them
        report = store.verify(receipt.handle)
        check = next(c for c in report.checks if c.name == "fts.by_text")
        assert check.outcome == "fail" and "in the postings in memory" in check.detail


def test_a_write_that_rolls_back_leaves_the_postings_as_they_were(tmp_path, monkeypatch):
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write("a", "alice drinks tea", tenant="t", subject="alice", purpose=PURPOSE)
        text = store._origin.text
        before = _state(text._post)
        real = sqlite_text.SQLiteText._change

        def failing(self, tenant_tokens, old, new):
            real(self, tenant_tokens, old, new)
            raise RuntimeError("the member fails after staging its postings")

        monkeypatch.setattr(sqlite_text.SQLiteText, "_change", failing)
        with pytest.raises(RuntimeError):
            store.write("b", "bob drinks coffee", tenant="t", subject="bob", purpose=PURPOSE)
        with pytest.raises(RuntimeError):
            store.forget(tenant="t", subject="alice")
        monkeypatch.setattr(sqlite_text.SQLiteText, "_change", real)
        assert _state(text._post) == before
        _same(store)
        assert [h.key for h in store.recall("tea", tenant="t", purpose=PURPOSE)] == ["a"]


@pytest.mark.parametrize("read_first", [False, True], ids=["held-before-reading", "held-after-reading"])
def test_a_large_store_loads_in_the_background_and_keeps_what_was_written_meanwhile(tmp_path, monkeypatch, read_first):
    """A store above LOAD_HERE loads its postings from its first full-text query on, in the
    background: FTS5 ranks meanwhile, and what is committed during the load is applied after
    (``read_first``: the load has read the index before those commits, the erased record
    with it, and must take it out of every list it read it into)."""
    path = tmp_path / "s"
    rng = random.Random(3)
    with efface.open(path, embedder="hashing", background=False) as store:
        store.write_many(
            [{"key": f"k{i}", "text": x} for i, x in enumerate(_texts(rng, 200))],
            tenant="t",
            subject="ann",
            purpose=PURPOSE,
        )
        store.write("z", "zanzibar trip", tenant="t", subject="zed", purpose=PURPOSE)
    monkeypatch.setattr(inmemory, "LOAD_HERE", 10)
    go, started = threading.Event(), threading.Event()
    real = inmemory.load

    def slow(conn, scoped, stop=None, between=None):
        started.set()
        got = real(conn, scoped, stop, between) if read_first else None
        assert go.wait(30)
        return got if read_first else real(conn, scoped, stop, between)

    monkeypatch.setattr(inmemory, "load", slow)
    with efface.open(path, embedder="hashing", background=False) as store:
        text = store._origin.text
        store.write("x", "xanadu trip", tenant="t", subject="xi", purpose=PURPOSE)  # before the load
        assert not started.wait(0.2)  # nothing loads until a full-text query asks
        assert [h.key for h in store.recall("zanzibar", tenant="t", purpose=PURPOSE)][:1] == ["z"]
        assert started.wait(30)
        assert text._post is None  # loading: FTS5 ranks meanwhile
        store.write("y", "yokohama trip", tenant="t", subject="yan", purpose=PURPOSE)
        store.write("k0", "a rewritten note about kyoto", tenant="t", subject="ann", purpose=PURPOSE)
        zid = store._origin._r().execute("SELECT id FROM records WHERE key='z'").fetchone()[0]
        store.forget(tenant="t", subject="zed")
        # the erased text's terms do not wait in memory for the load: only its id is queued
        queued = list(text._post_queue or ())
        assert any(zid in ch.removed for ch in queued)
        assert all(cols is None for ch in queued for cols in ch.removed.values())
        text.committed(queued)  # a change queued twice is applied as once
        # verify's question waits for the load (what it read so far may hold the erased record)
        asked: list[list[int]] = []
        waiting = threading.Thread(target=lambda: asked.append(text.held_in_memory([zid])))
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive() and not asked
        go.set()
        waiting.join(30)
        assert asked == [[]]
        deadline = time.time() + 30
        while text._post is None and time.time() < deadline:
            time.sleep(0.01)
        assert text._post is not None
        _same(store)
        assert not text._post.holds_term("zanzibar")
        assert text._post.holds([zid], every_list=True) == []
        assert [h.key for h in store.recall("yokohama", tenant="t", purpose=PURPOSE)][:1] == ["y"]
        assert [h.key for h in store.recall("kyoto", tenant="t", purpose=PURPOSE)][:1] == ["k0"]
        assert [h.key for h in store.recall("xanadu", tenant="t", purpose=PURPOSE)][:1] == ["x"]


def test_an_erasure_during_a_load_leaves_what_it_read_at_its_next_chunk(tmp_path, monkeypatch):
    """A forget while a large store's postings load: the load takes the erased record out of
    what it has read so far after the chunk it is reading, and verify's question waits for
    that, not for the whole load."""
    path = tmp_path / "s"
    rng = random.Random(5)
    with efface.open(path, embedder="hashing", background=False) as store:
        store.write("z", "zanzibar alice trip", tenant="t", subject="zed", purpose=PURPOSE)
        store.write_many(
            [{"key": f"k{i}", "text": x} for i, x in enumerate(_texts(rng, 300))],
            tenant="t",
            subject="ann",
            purpose=PURPOSE,
        )
    monkeypatch.setattr(inmemory, "LOAD_HERE", 10)
    monkeypatch.setattr("efface.origin.sqlite.postings.LOAD_CHUNK", 60)  # many chunks
    paused, resume, later, finish = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    seen: list[list] = []
    real = inmemory.load

    def paused_load(conn, scoped, stop=None, between=None):
        calls = 0

        def step(out):
            nonlocal calls
            between(out)
            seen.append([key for key, a, _c in out if zid in a.tolist()])
            calls += 1
            if calls == 3:  # a few chunks read, the erased record among them
                paused.set()
                assert resume.wait(30)
            if calls == 5:
                later.set()
                assert finish.wait(30)

        return real(conn, scoped, stop, step)

    monkeypatch.setattr(inmemory, "load", paused_load)
    with efface.open(path, embedder="hashing", background=False) as store:
        text = store._origin.text
        zid = store._origin._r().execute("SELECT id FROM records WHERE key='z'").fetchone()[0]
        store.recall("alice", tenant="t", purpose=PURPOSE)  # starts the load
        assert paused.wait(30)
        assert seen[-1]  # the load has read some of the record's terms
        store.forget(tenant="t", subject="zed")
        asked: list[list[int]] = []
        waiting = threading.Thread(target=lambda: asked.append(text.held_in_memory([zid])))
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive()  # the chunk under way has not taken it out yet
        resume.set()
        assert later.wait(30)  # two chunks on, the load is not over
        waiting.join(30)
        assert asked == [[]] and text._post is None
        assert not any(seen[3:])  # out of what was read from the next chunk on
        finish.set()
        deadline = time.time() + 30
        while text._post is None and time.time() < deadline:
            time.sleep(0.01)
        _same(store)
        assert text._post.holds([zid], every_list=True) == []


def test_postings_that_fail_to_follow_a_commit_are_dropped_not_the_write(tmp_path, monkeypatch):
    """The write is committed: a failure to apply it in memory drops the postings (FTS5 ranks
    from then on); the write stands and is found."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write("a", "alice drinks tea", tenant="t", subject="alice", purpose=PURPOSE)

        def broken(self, change):
            raise MemoryError

        monkeypatch.setattr(Postings, "apply", broken)
        store.write("b", "bob drinks tea", tenant="t", subject="bob", purpose=PURPOSE)
        assert store._origin.text._post is None
        assert {h.key for h in store.recall("tea", tenant="t", purpose=PURPOSE)} == {"a", "b"}


_sorted_ids = st.lists(st.integers(0, 3000), max_size=400, unique=True).map(lambda v: np.asarray(sorted(v), np.int64))


@settings(max_examples=300, deadline=None)
@given(cands=_sorted_ids, ids=_sorted_ids, split=st.integers(0, 400), seed=st.integers(0, 2**32 - 1))
def test_a_terms_bm25_lands_on_the_candidates_that_hold_it_in_numpy_and_compiled(cands, ids, split, seed):
    """_term_into adds one term's BM25 to each candidate that holds it, from a term's parts
    (its sorted array and its tail: disjoint), whichever list is longer; the compiled walk
    (galloping through the longer list) gives exactly numpy's totals, bit for bit, and both
    the formula's."""
    assert compiled.on(), "numba should load and compile"
    rng = np.random.default_rng(seed)
    tf = rng.integers(1, 9, len(ids)).astype(np.float32)
    mine = rng.random(len(ids)) < split / 400  # which ids the tail holds
    parts = [(ids[~mine], tf[~mine]), (ids[mine], tf[mine])]
    norm, start, idf = rng.random(len(cands)) * 2 + 0.1, rng.random(len(cands)), float(rng.random() * 5)
    count = dict(zip(ids.tolist(), tf.tolist(), strict=True))
    want = np.array(
        [
            s + (idf * (count.get(c, 0.0) * (postings_mod.K1 + 1.0))) / (count.get(c, 0.0) + m)
            for c, s, m in zip(cands.tolist(), start.tolist(), norm.tolist(), strict=True)
        ]
    )
    by_numpy, by_loop = start.copy(), start.copy()
    ready = compiled.ready
    try:
        compiled.ready = lambda: False  # the numpy path, in this process where the loops are compiled
        postings_mod._term_into(cands, parts, norm, idf, by_numpy)
    finally:
        compiled.ready = ready
    postings_mod._term_into(cands, parts, norm, idf, by_loop)
    assert np.array_equal(by_numpy, want) and np.array_equal(by_loop, want)
