"""No recall waits for the ANN index to absorb a bulk import (issue #11).

With the background compactor on, records written but not yet absorbed by the usearch index
are searched exactly (``paths/delta.py``). The tests hold the index's mutator lock, as a long
absorption does, so the index cannot absorb anything meanwhile: before the delta, recall's
read-your-writes took that same lock and waited for the whole absorption.
"""

from __future__ import annotations

import threading

import pytest

from conftest import record_id_of

pytestmark = [
    pytest.mark.local_only("holds the ANN index's lock, as an absorption in progress does"),
    pytest.mark.ann_files("the delta of the ANN files"),
]

N = 1500


def _texts(n: int) -> list[str]:
    return [f"note {i} about harbor{i % 37} lumen{i % 11} kestrel{i}" for i in range(n)]


def _recall_beside(store, query: str, **kw):
    """Recall on another thread while this one holds the ANN index's mutator lock."""
    out: dict = {}

    def run():
        try:
            out["hits"] = store.recall(query, **kw)
        except Exception as exc:  # re-raised below, on the test's thread
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "recall waited for the ANN index's absorption"
    if "error" in out:
        raise out["error"]
    return out["hits"]


def test_recall_right_after_a_bulk_import_finds_unabsorbed_records(open_store):
    store = open_store(background=True)
    store.write("seed", "a first note about tea", tenant="acme", subject="s0", purpose="support")
    texts = _texts(N)
    with store._ann._mu:  # an absorption in progress: the index takes nothing in meanwhile
        applied = store._ann.applied_epoch()
        store.write_many(
            [{"key": f"k{i}", "text": t, "subject": f"s{i % 30}"} for i, t in enumerate(texts)],
            tenant="acme",
            purpose="support",
        )
        hits = _recall_beside(store, texts[N - 3], tenant="acme", purpose="support", k=5)
        assert store._ann.applied_epoch() == applied  # the index absorbed none of the import
        assert hits[0].key == f"k{N - 3}"
        assert "ann" in hits[0].via  # found by meaning (the delta), not only by its words
    store.compact()
    assert store.recall(texts[7], tenant="acme", purpose="support", k=3)[0].key == "k7"


def test_an_erased_record_of_the_delta_is_never_returned_and_leaves_memory(open_store):
    store = open_store(background=True)
    store.write("seed", "a first note about tea", tenant="acme", subject="s0", purpose="support")
    texts = _texts(400)
    with store._ann._mu:
        store.write_many(
            [{"key": f"k{i}", "text": t, "subject": "bob" if i < 40 else "carol"} for i, t in enumerate(texts)],
            tenant="acme",
            purpose="support",
        )
        _recall_beside(store, texts[0], tenant="acme", purpose="support", k=5)  # the delta takes them in
        ids = [record_id_of(store, "acme", f"k{i}") for i in range(40)]
        assert store._ann._delta.holding(ids) == 40
        receipt = store.forget(tenant="acme", subject="bob")
        for i in (0, 13, 39):
            hits = _recall_beside(store, texts[i], tenant="acme", purpose="support", k=10)
            assert not {h.key for h in hits} & {f"k{j}" for j in range(40)}
        # a later write makes the delta take in the erasure too: the erased rows are zeroed
        store.write("late", "one more note", tenant="acme", subject="carol", purpose="support")
        _recall_beside(store, "one more note", tenant="acme", purpose="support", k=3)
        assert store._ann._delta.holding(ids) == 0
    store.wait(receipt.handle, timeout=60)
    assert store.verify(receipt.handle).level in ("unreadable", "erased")
    assert store._ann._delta.holding(ids) == 0
    assert store._ann.holding(store._tenant("acme"), ids) == 0
