"""The batched write path: ``write_many`` writes one statement per table for a whole batch,
and must leave exactly the rows that one ``write`` per item leaves; a background absorption
stands back while a write runs."""

from __future__ import annotations

import pytest

from efface.paths import ann as ann_mod

from conftest import raw_db

ITEMS_1 = [
    {"key": "a1", "text": "Ada likes green tea in the morning", "subject": "ada"},
    {"key": "a2", "text": "Ada's flight to Lisbon leaves Friday", "subject": "ada", "metadata": {"seq": 2}},
    {"key": "b1", "text": "Bo prefers the window seat", "subject": "bo", "purpose": "travel", "ttl": 3600},
    {"key": "d1", "text": "digest of Ada's week", "subject": "ada", "sources": ["a1", "a2"]},
]
ITEMS_2 = [  # rewrites (same subject), a new source list, a new purpose, new keys
    {"key": "a1", "text": "Ada now drinks black coffee", "subject": "ada", "metadata": {"v": 2}},
    {"key": "d1", "text": "new digest naming Bo Lindqvist", "subject": "ada", "sources": ["a2", "b1"]},
    {"key": "b1", "text": "Bo prefers the aisle seat", "subject": "bo", "purpose": "travel", "basis": "contract"},
    {"key": "c1", "text": "Cy asked about the invoice", "subject": "cy", "ttl": 60.5},
    {"key": "c2", "text": "Cy and Bo Lindqvist met in Oslo", "subject": "cy", "purpose": "travel"},
]


def _fill(s, batched: bool) -> None:
    s.register_subject("bo", tenant="acme", identifiers=["Bo Lindqvist"])
    for items in (ITEMS_1, ITEMS_2):
        if batched:
            s.write_many(items, tenant="acme", purpose="support")
        else:
            for it in items:
                s.write(
                    it["key"],
                    it["text"],
                    tenant="acme",
                    subject=it["subject"],
                    purpose=it.get("purpose", "support"),
                    basis=it.get("basis", "consent"),
                    ttl=it.get("ttl"),
                    metadata=it.get("metadata"),
                    sources=it.get("sources"),
                )


def _rows(s) -> dict[str, object]:
    db = raw_db(s)
    one = lambda sql: sorted(db.execute(sql).fetchall())  # noqa: E731
    out: dict[str, object] = {
        "records": one("SELECT key, text, metadata, sources, embedding FROM records"),
        "claims": one(
            "SELECT r.key, c.subject, c.purpose, c.basis, c.expires_at - c.created_at"
            " FROM claims c JOIN records r ON r.id=c.record_id"
        ),
        "lineage": one("SELECT r.key, l.source_key FROM lineage l JOIN records r ON r.id=l.record_id"),
        "mentions": one("SELECT r.key, m.subject FROM mentions m JOIN records r ON r.id=m.record_id"),
        "purposes": one("SELECT purpose FROM purposes"),
        "subject_keys": one("SELECT subject FROM subject_keys"),
        "changed": one("SELECT DISTINCT r.key FROM changes c JOIN records r ON r.id=c.record_id"),
    }
    # the text column's words (the tenant column holds tenant ids, keyed by each store's secret)
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.fts_cols USING fts5vocab(main, fts, 'col')")
    words = {t for (t,) in db.execute("SELECT term FROM temp.fts_cols WHERE col='text'")}
    out["fts"] = {
        w: sorted(
            k
            for (k,) in db.execute(
                "SELECT r.key FROM fts f JOIN records r ON r.id=f.rowid WHERE fts MATCH ?", (f'text : "{w}"',)
            )
        )
        for w in sorted(words)
    }
    # and every record under its own tenant's id in the tenant column, under no other
    out["fts_tenant"] = sorted(
        (k, own)
        for (t,) in db.execute("SELECT DISTINCT tenant FROM records")
        for (k, own) in db.execute(
            "SELECT r.key, r.tenant=? FROM fts f JOIN records r ON r.id=f.rowid WHERE fts MATCH ?",
            (t, f'tenant : "{t}"'),
        )
    )
    return out


def fts_keys(store, word: str) -> list[str]:
    sql = "SELECT r.key FROM fts f JOIN records r ON r.id=f.rowid WHERE fts MATCH ?"
    return sorted(k for (k,) in raw_db(store).execute(sql, (f'"{word}"',)))


@pytest.mark.sqlite_only("compares the origin's tables")
def test_a_batch_leaves_the_rows_that_one_write_per_item_leaves(open_store, tmp_path):
    single = open_store(tmp_path / "single")
    batched = open_store(tmp_path / "batched")
    _fill(single, batched=False)
    _fill(batched, batched=True)
    a, b = _rows(single), _rows(batched)
    assert a == b
    # and the rows are the ones the items say (not two equal wrong answers)
    assert ("d1", "a2") in a["lineage"] and ("d1", "a1") not in a["lineage"]  # type: ignore[operator]
    assert sorted(a["mentions"]) == [("c2", "bo"), ("d1", "bo")]  # type: ignore[arg-type]
    for store in (single, batched):  # the index's own tokenizer (stems) turns each word into its term
        assert fts_keys(store, "tea") == [] and fts_keys(store, "coffee") == ["a1"]
    assert ("b1", "bo", "travel", "consent", 3600.0) in a["claims"]  # type: ignore[operator]
    assert ("b1", "bo", "travel", "contract", None) in a["claims"]  # type: ignore[operator]


def test_a_rewritten_record_in_a_batch_is_read_and_recalled_with_its_new_text(store):
    store.write_many(ITEMS_1, tenant="acme", purpose="support")
    store.write_many(ITEMS_2, tenant="acme", purpose="support")
    assert store.read("a1", tenant="acme", purpose="support").text == "Ada now drinks black coffee"
    assert "a1" in [h.key for h in store.recall("black coffee", tenant="acme", purpose="support")]
    r = store.forget(tenant="acme", subject="ada")
    assert sorted(r.erased) == ["a1", "a2", "d1"]


@pytest.mark.local_only("reaches the vector index's absorption")
@pytest.mark.ann_files("it pauses the process's ANN absorption")
def test_a_background_absorption_stands_back_while_a_write_runs(store, monkeypatch):
    """A write_many of 1000 records lasts longer than the absorption's quiet window; an
    absorption that only looked at the last write's commit ran beside the write (usearch
    releases the GIL, but the two shared the cores: the import ran at half its rate)."""
    ann = store._ann
    slept: list[float] = []
    monkeypatch.setattr(ann_mod.time, "sleep", slept.append)
    ann.yielding = True
    ann._activity = 0.0  # the last read or commit was long ago
    ann._pause()
    assert slept == []  # nothing under way: no standing back
    with ann.writing():
        ann._pause()
    assert slept and len(slept) <= ann_mod.MAX_PAUSE_S / ann_mod.QUIET_S + 1  # stood back, within its bound
    slept.clear()
    ann._urgent = True  # an erasure to absorb: its propagation bound comes first
    with ann.writing():
        ann._pause()
    assert slept == []
