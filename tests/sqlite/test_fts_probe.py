"""verify's full-text probe still finds an erased record the index leads to, whichever way it
asks FTS5 (issue #11, item 4): one word per query, each doclist either sought to the erased
ids or read whole, whichever is cheaper (an OR of eight words read every doclist whole and
grew with the store)."""

from __future__ import annotations

import os
import sqlite3

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
    with sqlite3.connect(os.path.join(path, "origin.db")) as c:
        c.execute("INSERT INTO fts(rowid, text) VALUES(?, ?)", (rid, "alice drinks green tea with lemon"))
    store = efface.open(path, embedder="hashing", background=False)
    try:
        probe = next(c for c in store.verify(receipt.handle).checks if c.name == "fts.by_text")
        assert probe.outcome == "fail", probe.detail
        assert "1 erased records still matched" in probe.detail
    finally:
        store.close()
