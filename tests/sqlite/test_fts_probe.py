"""verify's full-text probe still finds an erased record the index leads to, whichever way it
asks FTS5 (issue #11, item 4): one word per query, each doclist either sought to the erased
ids or read whole, whichever is cheaper (an OR of eight words read every doclist whole and
grew with the store)."""

from __future__ import annotations

import os

import apsw
import pytest

import efface
from efface.origin.sqlite import text as sqlite_text

pytestmark = pytest.mark.sqlite_only("plants an index entry in the SQLite file")


@pytest.mark.parametrize("whole", [True, False], ids=["doclist-read-whole", "doclist-sought"])
def test_an_index_entry_left_for_an_erased_record_fails_the_probe(tmp_path, monkeypatch, whole):
    monkeypatch.setattr(sqlite_text, "READ_WHOLE_PER_ID", 10**9 if whole else 0)
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    store.write_many(
        [{"key": f"b{i}", "text": f"bob drinks green tea, cup {i}"} for i in range(150)],
        tenant="t",
        subject="bob",
        purpose="p",
    )
    store.write("a", "alice drinks green tea with lemon", tenant="t", subject="alice", purpose="p")
    (rid,) = store._origin._r().execute("SELECT id FROM records WHERE key='a'").fetchone()
    receipt = store.forget(tenant="t", subject="alice")
    # (not compacted: a verify that proves 'erased' discards the evidence the probe needs)
    assert next(c for c in store.verify(receipt.handle).checks if c.name == "fts.by_text").outcome == "pass"
    path = store.path
    store.close()
    # an index entry the erasure failed to remove: the words lead to the erased id again
    # (apsw: an index with secure-delete on is FTS5 file format 5, which the standard
    # library's older SQLite cannot write)
    c = apsw.Connection(os.path.join(path, "origin.db"))
    with c:
        c.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (rid, "alice drinks green tea with lemon"))
    c.close()
    store = efface.open(path, embedder="hashing", background=False)
    try:
        probe = next(c for c in store.verify(receipt.handle).checks if c.name == "fts.by_text")
        assert probe.outcome == "fail", probe.detail
        assert "1 erased records still matched" in probe.detail
    finally:
        store.close()


def test_the_first_verify_in_the_forgetting_process_probes_the_words_kept_at_the_delete(tmp_path):
    """No walk of the whole vocabulary for the first verify after a forget in this process:
    the index kept which of the erased texts' words it still held right after the delete
    (live records' words), and an entry left for the erased id under one of them still fails."""
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write_many(
            [{"key": f"b{i}", "text": f"bob drinks green tea, cup {i}"} for i in range(20)],
            tenant="t",
            subject="bob",
            purpose="p",
        )
        store.write("a", "alice drinks green tea with lemon", tenant="t", subject="alice", purpose="p")
        (rid,) = store._origin._r().execute("SELECT id FROM records WHERE key='a'").fetchone()
        receipt = store.forget(tenant="t", subject="alice")
        # the memo holds the live words only: "alice" and "lemon" left the index with the record
        kept = set(store._origin.text._kept[rid])
        assert {"drink", "green", "tea"} <= kept and not kept & {"alic", "alice", "lemon"}
        # an entry the delete failed to remove, under a word live records share
        with store._origin.write_lock:
            store._origin.writer.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (rid, "green tea"))
        probe = next(c for c in store.verify(receipt.handle).checks if c.name == "fts.by_text")
        assert probe.outcome == "fail", probe.detail
        assert rid not in store._origin.text._kept  # answered once
    finally:
        store.close()


def test_a_verify_without_the_kept_words_walks_the_vocabulary(tmp_path):
    store = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        store.write_many(
            [{"key": f"b{i}", "text": f"bob drinks green tea, cup {i}"} for i in range(20)],
            tenant="t",
            subject="bob",
            purpose="p",
        )
        store.write("a", "alice drinks green tea with lemon", tenant="t", subject="alice", purpose="p")
        receipt = store.forget(tenant="t", subject="alice")
        first = next(c for c in store.verify(receipt.handle).checks if c.name == "fts.by_text")
        assert first.outcome == "pass" and "kept in this process" in first.detail
        again = next(c for c in store.verify(receipt.handle).checks if c.name == "fts.by_text")
        assert again.outcome == "pass" and "kept in this process" not in again.detail
        # the same words found either way
        assert first.detail.split(" (the words")[0] == again.detail
    finally:
        store.close()
