"""The word index memoises the document frequencies of common terms (issue #11, item 3):
FTS5 counts a term's rows by reading its whole doclist at every recall. The memo must not
change what a recall finds, must follow the store's growth, and an erasure must take its
words out of it. The memo serves FTS5's own ranking, which a store uses while its postings
load into memory (origin/sqlite/postings.py): these stores run without them."""

from __future__ import annotations

import pytest

import efface
from efface.origin.sqlite import text as sqlite_text

pytestmark = pytest.mark.sqlite_only("the SQLite word index's memo")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_text, "DF_MEMO_MIN", 5)
    s = efface.open(tmp_path / "s", embedder="hashing", background=False)
    s._origin.text.stop_postings()  # ranked by FTS5, as while the postings load
    s.write_many(
        [{"key": f"k{i}", "text": f"common words here, number {i}"} for i in range(200)],
        tenant="t",
        subject="bob",
        purpose="p",
    )
    yield s
    s.close()


def _asked(store, monkeypatch, words):
    """The terms ``document_frequency`` had to ask FTS5 about."""
    text = store._origin.text
    asked: list[list[str]] = []
    real = text._db.reader

    class Spy:
        def __init__(self, conn):
            self._c = conn

        def execute(self, sql, args=()):
            if "fts_vocab" in sql:
                asked.append(list(args))
            return self._c.execute(sql, args)

    monkeypatch.setattr(text._db, "reader", lambda: Spy(real()))
    try:
        got = text.document_frequency(words)
    finally:
        monkeypatch.setattr(text._db, "reader", real)
    return got, [t for a in asked for t in a]


def test_a_common_term_is_counted_once_and_a_rare_one_every_time(store, monkeypatch):
    first, asked = _asked(store, monkeypatch, ["common", "number", "7"])
    assert first == {"common": 200, "number": 200, "7": 1} and len(asked) == 3
    again, asked = _asked(store, monkeypatch, ["common", "number", "7"])
    assert again == first and asked == ["7"]  # the rare term is asked again


def test_a_word_just_written_is_found_and_the_memo_follows_growth(store, monkeypatch):
    _asked(store, monkeypatch, ["common"])
    store.write("new", "zanzibar common", tenant="t", subject="bob", purpose="p")
    assert [h.key for h in store.recall("zanzibar", tenant="t", purpose="p", k=3)][:1] == ["new"]
    # one more row is within the drift: the memo answers, one short
    got, asked = _asked(store, monkeypatch, ["common"])
    assert got == {"common": 200} and asked == []
    store.write_many(
        [{"key": f"m{i}", "text": f"common again {i}"} for i in range(10)], tenant="t", subject="bob", purpose="p"
    )
    got, asked = _asked(store, monkeypatch, ["common"])
    assert got == {"common": 211} and asked == ["common"]  # grown past the drift: counted again


def test_an_erasure_takes_its_terms_out_of_the_memo(store, monkeypatch):
    store.write_many(
        [{"key": f"a{i}", "text": f"alice zelinski walks {i}"} for i in range(10)],
        tenant="t",
        subject="alice",
        purpose="p",
    )
    _asked(store, monkeypatch, ["zelinski", "common"])
    memo = store._origin.text._df
    assert "zelinski" in memo and "common" in memo
    store.forget(tenant="t", subject="alice")
    assert "zelinski" not in memo and "common" in memo
    assert not [h for h in store.recall("zelinski", tenant="t", purpose="p", k=3) if h.key.startswith("a")]
