"""The SQLite word index erases in the forget's own transaction (issue #11, item 4): FTS5's
``secure-delete`` takes the rows' entries out of the pages that hold them, and the page
separators an erased word leaves in ``fts_idx`` are rewritten (efface.origin.sqlite.separators),
so no compactor merge of the whole index is needed, and no prefix of an erased word is left."""

from __future__ import annotations

import os
import random

import apsw
import pytest

import efface
from efface.origin.sqlite import separators
from efface.origin.sqlite import text as sqlite_text

pytestmark = pytest.mark.sqlite_only("reads the SQLite file's full-text index")

LETTERS = "bcdfghjklmnpqrstvwxz"


def _word(rng: random.Random) -> str:
    return "q" + "".join(rng.choice(LETTERS) for _ in range(11))


def _store(path, rng: random.Random, people: int = 60, each: int = 20):
    """A store whose index has many small leaf pages (FTS5 ``pgsz`` 64), so that erased words
    are often the first on a page; returns it and each person's unique words."""
    store = efface.open(path, embedder="hashing", background=False)
    c = apsw.Connection(os.path.join(store.path, "origin.db"))
    with c:
        c.execute("INSERT INTO fts(fts, rank) VALUES('pgsz', 64)")
    c.close()
    words: dict[str, list[str]] = {}
    for p in range(people):
        mine = [_word(rng) for _ in range(each * 2)]
        words[f"p{p}"] = mine
        store.write_many(
            [{"key": f"p{p}-{i}", "text": f"alpha beta {mine[2 * i]} gamma {mine[2 * i + 1]}"} for i in range(each)],
            tenant="t",
            subject=f"p{p}",
            purpose="x",
        )
    # the index merged into one segment, as the compactor leaves a big store
    store._origin.writer.execute("INSERT INTO fts(fts) VALUES('optimize')")
    return store, words


def _separators(store) -> list[bytes]:
    return [bytes(r[0])[1:] for r in store._origin._r().execute("SELECT term FROM fts_idx") if r[0]]


def _stale(store, erased: list[str]) -> list[bytes]:
    """Separators that are a prefix (5 bytes or more) of an erased word and of no live term."""
    live = [r[0].encode() for r in store._origin._r().execute("SELECT term FROM fts_vocab")]
    out = []
    for sep in _separators(store):
        if len(sep) < 5 or not any(w.encode().startswith(sep) for w in erased):
            continue
        if not any(t.startswith(sep) for t in live):
            out.append(sep)
    return out


def _forget_some(store, words, rng, n=12) -> list[str]:
    erased: list[str] = []
    for p in rng.sample(sorted(words), n):
        store.forget(tenant="t", subject=p)
        erased += words[p]
    return erased


def test_an_erasure_leaves_no_separator_of_its_words_and_needs_no_merge(tmp_path):
    rng = random.Random(7)
    store, words = _store(tmp_path / "s", rng)
    try:
        erased = _forget_some(store, words, rng)
        o = store._origin
        assert o.meta_get(sqlite_text.DIRTY) != "1"  # no merge asked for
        assert o.text.purged_epoch() == o.current_epoch()
        assert _stale(store, erased) == []
        # the index is whole, and every live word still finds its record
        o.writer.execute("INSERT INTO fts(fts, rank) VALUES('integrity-check', 1)")
        gone = set(erased)
        for p, mine in words.items():
            for i, w in enumerate(mine[:6]):
                hits = {h.key for h in store.recall(w, tenant="t", purpose="x", k=5)}
                assert (f"{p}-{i // 2}" in hits) is (w not in gone), (p, w)
        # and nothing of the erased words is in the index's pages
        assert not [r for r in o._r().execute("SELECT term FROM fts_vocab") if r[0] in gone]
    finally:
        store.close()


def test_without_the_rewrite_the_separators_keep_erased_prefixes(tmp_path, monkeypatch):
    """The check above can fail: secure-delete alone leaves them."""
    monkeypatch.setattr(sqlite_text, "rewrite_stale", lambda c, terms: True)
    rng = random.Random(7)
    store, words = _store(tmp_path / "s", rng)
    try:
        erased = _forget_some(store, words, rng)
        assert _stale(store, erased)
    finally:
        store.close()


def test_a_separator_it_cannot_rewrite_asks_for_the_merge(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_text, "rewrite_stale", lambda c, terms: False)
    rng = random.Random(3)
    store, _words = _store(tmp_path / "s", rng, people=4, each=5)
    try:
        r = store.forget(tenant="t", subject="p1")
        o = store._origin
        assert o.meta_get(sqlite_text.DIRTY) == "1"
        assert o.text.purged_epoch() < r.epoch
        store.compact()
        assert o.text.purged_epoch() >= r.epoch
    finally:
        store.close()


def test_rewrite_stale_keeps_a_separator_a_live_term_begins_with(tmp_path):
    """Unit: a separator that is a live term's prefix is that term's bytes, and stays."""
    c = apsw.Connection(str(tmp_path / "u.db"))
    c.execute("CREATE VIRTUAL TABLE fts USING fts5(text)")
    c.execute("CREATE VIRTUAL TABLE fts_inst USING fts5vocab(fts, 'instance')")
    c.execute("INSERT INTO fts(fts, rank) VALUES('pgsz', 64)")
    c.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 1)")
    rng = random.Random(1)
    rows = [f"{_word(rng)} {_word(rng)}" for _ in range(400)]
    with c:
        for i, t in enumerate(rows, 1):
            c.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (i, t))
    c.execute("INSERT INTO fts(fts) VALUES('optimize')")
    before = {bytes(r[0]) for r in c.execute("SELECT term FROM fts_idx")}
    with c:
        assert separators.rewrite_stale(c, [w for t in rows for w in t.split()])  # nothing deleted
        assert len(separators.still_held(c, [w for t in rows for w in t.split()] + ["qnotaword"])) == 800
    assert {bytes(r[0]) for r in c.execute("SELECT term FROM fts_idx")} == before
    c.close()


def test_an_index_that_does_not_delete_in_place_waits_for_the_merge(tmp_path):
    """If secure-delete were not on, the in-place claim would be false: the merge is asked for."""
    rng = random.Random(5)
    store, _words = _store(tmp_path / "s", rng, people=4, each=5)
    try:
        o = store._origin
        assert o.text.secure
        o.text.secure = False
        r = store.forget(tenant="t", subject="p2")
        assert o.meta_get(sqlite_text.DIRTY) == "1" and o.text.purged_epoch() < r.epoch
    finally:
        store.close()


def test_the_page_reader_reads_every_separators_page(tmp_path):
    """separators._first_term against a real index: every separator is a prefix of the first
    term on its page (which is what the rewrite relies on)."""
    rng = random.Random(11)
    store, _words = _store(tmp_path / "s", rng, people=20, each=20)
    try:
        c = store._origin._r()
        rows = [(s, bytes(k), p) for s, k, p in c.execute("SELECT segid, term, pgno FROM fts_idx") if len(k) > 1]
        assert len(rows) > 50
        for segid, key, pgno in rows:
            first = separators._first_term(c, segid, pgno >> 1)
            assert first is not None and first.startswith(key), (segid, key, pgno)
    finally:
        store.close()
