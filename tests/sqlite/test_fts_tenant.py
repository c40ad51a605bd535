"""A new store's word index holds each record's tenant id beside its words, so a query ranks
only its own tenant's matches: a small tenant beside a big one that uses the same words pays
for its own records, not for the big one's (and a store made before keeps its index)."""

from __future__ import annotations

import time

import apsw
import pytest

import efface
from efface.origin.sqlite.text import SQLiteText

pytestmark = pytest.mark.sqlite_only("reads the SQLite word index")


@pytest.fixture(autouse=True, params=["postings", "fts5"])
def ranking(request, monkeypatch):
    """Each test twice: ranked from the postings in memory, and by FTS5 (as while they load)."""
    if request.param == "fts5":
        monkeypatch.setattr(SQLiteText, "start_postings", lambda self: None)
    return request.param


PURPOSE = "support"


def _fill(store) -> None:
    store.write_many(
        [{"key": f"b{i}", "text": f"coffee order number {i} for the big tenant"} for i in range(600)],
        tenant="big",
        subject="crowd",
        purpose=PURPOSE,
    )
    store.write_many(
        [
            {"key": f"s{i}", "text": text}
            for i, text in enumerate(["alice drinks coffee", "coffee at noon", "green tea at breakfast time"])
        ],
        tenant="small",
        subject="alice",
        purpose=PURPOSE,
    )


def _ranked(store, tenant: str, depth: int = 400):
    return store._origin.text.ranked_seen(["coffee"], store._tenant(tenant), PURPOSE, None, time.time(), depth, 100)


def test_a_query_ranks_only_its_own_tenants_matches(tmp_path):
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        _fill(store)
        assert store._origin.text.scoped
        found, seen = _ranked(store, "small")
        assert seen == 2  # its own two matches, not the big tenant's 600
        keys = {
            store._origin._r().execute("SELECT key FROM records WHERE id=?", (rid,)).fetchone()[0] for rid, _ in found
        }
        assert keys == {"s0", "s1"}
        found, seen = _ranked(store, "big")
        assert seen == 400 and len(found) == 100
        hits = store.recall("coffee", tenant="small", purpose=PURPOSE)
        assert {h.key for h in hits if "fts" in h.via} == {"s0", "s1"}


def test_the_tenant_column_does_not_change_the_order_of_the_words(tmp_path):
    """The tenant column weighs nothing: the better match for the words still ranks first."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write("a", "tea", tenant="t", subject="s", purpose=PURPOSE)
        store.write("b", "tea and more tea, then tea again", tenant="t", subject="s", purpose=PURPOSE)
        store.write("c", "coffee only", tenant="t", subject="s", purpose=PURPOSE)
        rows = store._origin.text.ranked_seen(["tea"], store._tenant("t"), PURPOSE, None, time.time(), 10, 10)[0]
        ids = [rid for rid, _ in rows]
        keys = [store._origin._r().execute("SELECT key FROM records WHERE id=?", (i,)).fetchone()[0] for i in ids]
        assert keys == ["b", "a"]
        assert all(score > 0 for _, score in rows)


def test_an_erased_record_leaves_its_tenant_column_too(tmp_path):
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        _fill(store)
        receipt = store.forget(tenant="small", subject="alice")
        assert _ranked(store, "small")[1] == 0
        store.wait(receipt.handle)
        assert store.verify(receipt.handle).level == "erased"
        db = store._origin._r()
        rows = db.execute("SELECT rowid FROM fts WHERE fts MATCH ?", (f'tenant : "{store._tenant("small")}"',))
        assert rows.fetchall() == []


def test_a_store_made_before_the_tenant_column_keeps_its_index_and_works(tmp_path):
    path = tmp_path / "s"
    with efface.open(path, embedder="hashing", background=False) as store:
        _fill(store)
    db = apsw.Connection(str(path / "origin.db"))
    with db:  # the index as an older efface made it: words only, re-fed on open
        db.execute("DROP TABLE fts")
        db.execute(
            "CREATE VIRTUAL TABLE fts USING fts5(text, content='records', content_rowid='id',"
            " tokenize='porter unicode61 remove_diacritics 2')"
        )
        db.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', 0)")
        db.execute("DELETE FROM meta WHERE k='fts.folded'")
    db.close()
    with efface.open(path, embedder="hashing", background=False) as store:
        assert not store._origin.text.scoped
        found, seen = _ranked(store, "small")
        assert seen == 400  # every tenant's matches ranked, then the small tenant's kept
        assert len(found) == 2
        receipt = store.forget(tenant="small", subject="alice")
        assert {h.key for h in store.recall("coffee", tenant="small", purpose=PURPOSE)} == set()
        store.wait(receipt.handle)
        assert store.verify(receipt.handle).level == "erased"
        store.write("n", "coffee again", tenant="small", subject="bob", purpose=PURPOSE)
        assert [h.key for h in store.recall("coffee", tenant="small", purpose=PURPOSE)] == ["n"]


def test_only_a_tenant_with_a_minority_of_the_records_narrows_its_queries(tmp_path):
    """Narrowing walks the tenant's own list of records beside the words': worth it for a
    small tenant, not for one that holds most of the store (a one-tenant store)."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        _fill(store)
        fts = store._fts
        assert fts._plan(["coffee", "order"], store._tenant("small"))[2] is True
        assert fts._plan(["coffee", "order"], store._tenant("big"))[2] is False
        # either way the same scores (ties may fall in another order)
        for tenant in ("small", "big"):
            args = (["coffee"], store._tenant(tenant), PURPOSE, None, time.time(), 400, 100)
            narrow = store._origin.text.ranked_seen(*args, narrow=True)[0]
            wide = store._origin.text.ranked_seen(*args, narrow=False)[0]
            assert [s for _, s in narrow] == pytest.approx([s for _, s in wide]) and len(narrow) > 0


def test_matches_thinned_by_purpose_are_found_deeper_in_the_ranking(tmp_path, ranking):
    """A purpose's few matches rank below hundreds of another purpose's: the first ranked list
    holds none of them live, and the leg ranks deeper until it has them all (and then stops:
    the index holds no more)."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write_many(
            [{"key": f"a{i}", "text": "coffee coffee coffee"} for i in range(700)],
            tenant="t",
            subject="crowd",
            purpose="marketing",
        )
        store.write_many(
            [
                {"key": f"m{i}", "text": f"coffee with a long note about the order number {i} and more"}
                for i in range(3)
            ],
            tenant="t",
            subject="bob",
            purpose=PURPOSE,
        )
        text, tenant = store._origin.text, store._tenant("t")
        found, seen = text.ranked_seen(["coffee"], tenant, PURPOSE, None, time.time(), 400, 100)
        if ranking == "fts5":
            assert found == [] and seen == 400  # the first 400 are all marketing's: more to rank
        else:  # in memory every match is ranked at once, and checked as deep as need be
            assert len(found) == 3 and seen == 400
        found, seen = text.ranked_seen(["coffee"], tenant, PURPOSE, None, time.time(), 1600, 100)
        assert len(found) == 3 and seen == 703  # every match ranked: no deeper list to ask for
        hits = store.recall("coffee", tenant="t", purpose=PURPOSE)
        assert {h.key for h in hits if "fts" in h.via} == {"m0", "m1", "m2"}


def test_the_tenant_count_follows_writes_rewrites_and_forgets(tmp_path):
    """What decides narrowing is kept up by the writes, without reading the index's list of
    the tenant's records at every query."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        text = store._origin.text

        def counted(t: str) -> int:
            q = "SELECT count(*) FROM records WHERE tenant=?"
            return store._origin._r().execute(q, (store._tenant(t),)).fetchone()[0]

        store.write_many(
            [{"key": f"k{i}", "text": f"note {i}"} for i in range(30)], tenant="a", subject="al", purpose=PURPOSE
        )
        assert text.tenant_count(store._tenant("a")) == counted("a") == 30  # first asked: counted
        store.write_many(
            [{"key": f"k{i}", "text": f"new note {i}"} for i in range(20, 40)],
            tenant="a",
            subject="al",
            purpose=PURPOSE,
        )
        store.write("x", "other tenant", tenant="b", subject="bo", purpose=PURPOSE)
        store.forget(tenant="a", key="k3")
        store.forget(tenant="a", prefix="k2")  # k2 and k20..k29
        assert text.tenant_count(store._tenant("a")) == counted("a") == 40 - 1 - 11
        assert text.tenant_count(store._tenant("b")) == counted("b") == 1


def test_no_word_of_an_erased_text_stays_memoised(tmp_path):
    """The word index memoises each word's term (a stem); a forget takes the erased texts'
    words out, and the erasure's own evidence (their terms) is computed without memoising."""
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        text = store._origin.text
        store.write("k", "Zebulon rides horses", tenant="t", subject="zeb", purpose=PURPOSE)
        store.write("o", "Olga rides bikes", tenant="t", subject="olga", purpose=PURPOSE)
        store.recall("who rides zebulon", tenant="t", purpose=PURPOSE)
        store.recall("olga", tenant="t", purpose=PURPOSE)
        assert {"zebulon", "rides", "olga"} <= set(text._terms)
        store.forget(tenant="t", subject="zeb")
        assert not {"zebulon", "rides", "horses"} & set(text._terms)
        assert "olga" in text._terms  # other words stay: recalls do not tokenize them again
        store.compact()
        assert not {"zebulon", "rides", "horses"} & set(text._terms)
