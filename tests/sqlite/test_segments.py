"""The word index's segments merged into one (efface.origin.sqlite.segments): by compact(),
and by the background compactor once the store is idle; the index answers the same after,
FTS5's own integrity check passes, and a forget from the merged index is still erased."""

from __future__ import annotations

import os
import time

import apsw
import pytest

import efface
from efface.erasure import compactor as compactor_mod
from efface.origin.sqlite import segments

pytestmark = pytest.mark.sqlite_only("reads the SQLite file's full-text index")

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
]


def _fill(store, batches: int = 9, each: int = 40) -> None:
    """One transaction per batch: FTS5 writes each as a segment of its own (merged four at a
    time), so the index ends with several."""
    for b in range(batches):
        store.write_many(
            [
                {"key": f"k{b}-{i}", "text": f"{WORDS[(b + i) % len(WORDS)]} note {b} {i} person{b % 3}"}
                for i in range(each)
            ],
            tenant="t",
            subject=f"s{b % 3}",
            purpose="x",
        )


def _segments(store) -> list[int]:
    return segments.sizes(store._origin._r())


def _answers(store) -> dict[str, list[str]]:
    return {w: sorted(h.key for h in store.recall(w, tenant="t", purpose="x", k=500)) for w in WORDS[:6]}


def _integrity(store) -> None:
    c = apsw.Connection(os.path.join(store.path, "origin.db"))
    try:
        c.execute("INSERT INTO fts(fts) VALUES('integrity-check')")  # raises on a damaged index
    finally:
        c.close()


def test_compact_merges_the_index_into_one_segment_that_answers_the_same(tmp_path):
    store = efface.open(str(tmp_path / "s"), embedder="hashing", background=False)
    _fill(store)
    assert len(_segments(store)) > 1
    before = _answers(store)
    store.compact()
    assert len(_segments(store)) == 1
    assert _answers(store) == before
    _integrity(store)
    store.close()


def test_a_forget_from_the_merged_index_is_erased(tmp_path):
    store = efface.open(str(tmp_path / "s"), embedder="hashing", background=False)
    _fill(store)
    store.compact()
    receipt = store.forget(tenant="t", subject="s1")
    assert receipt.erased
    assert not [h for h in store.recall("person1", tenant="t", purpose="x", k=500) if "person1" in h.text]
    store.wait(receipt.handle, timeout=60)
    assert store.verify(receipt.handle).level == "erased"
    _integrity(store)
    store.close()


def test_one_step_at_a_time_when_asked_to_stop(tmp_path, monkeypatch):
    store = efface.open(str(tmp_path / "s"), embedder="hashing", background=False)
    _fill(store, batches=12)
    monkeypatch.setattr(segments, "MERGE_PAGES", 1)
    many = len(_segments(store))
    steps = []
    done = store._origin.physical.merge_segments(lambda: steps.append(1) or True, always=True)
    assert not done and steps == [1]
    assert 1 < len(_segments(store)) <= many + 1  # one step of a page: not all merged yet
    assert store._origin.physical.merge_segments(always=True)
    assert len(_segments(store)) == 1
    store.close()


@pytest.mark.parametrize(
    ("pages", "worth"),
    [
        ([], False),
        ([500], False),
        ([500, 10], False),  # a small new segment beside a big one: not worth rewriting it
        ([500, 40, 30], True),  # an eighth of the largest besides it
        ([500] + [1] * (segments.MANY - 1), True),  # many, whatever their sizes
        ([10, 10], True),
    ],
)
def test_an_idle_merge_runs_only_when_worth_rewriting_the_index(pages, worth):
    assert segments.worth_it(pages) is worth


def test_the_idle_compactor_merges_and_a_busy_one_does_not(tmp_path, monkeypatch):
    store = efface.open(str(tmp_path / "s"), embedder="hashing", background=False)
    _fill(store)
    many = len(_segments(store))
    assert many > 1 and segments.worth_it(_segments(store))
    comp = store._compactor
    comp.run(persist=True)
    # not idle yet: a mutation was just seen
    assert comp.tidy(idle_s=3600) is False
    assert len(_segments(store)) == many
    # an erasure waiting for its bytes: not idle either
    store.forget(tenant="t", key="k0-0")
    many = len(_segments(store))
    assert comp.erasure_unsaved
    assert comp.tidy(idle_s=0) is False
    assert len(_segments(store)) == many
    comp.run(persist=True, whole=False)
    assert not comp.erasure_unsaved
    assert comp.tidy(idle_s=0) is True
    assert len(_segments(store)) == 1
    store.close()


def test_a_background_store_merges_its_segments_once_idle(tmp_path, monkeypatch):
    monkeypatch.setattr(compactor_mod, "IDLE_S", 0.2)
    store = efface.open(str(tmp_path / "s"), embedder="hashing", background=True)
    _fill(store)
    deadline = time.monotonic() + 30
    while len(_segments(store)) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_segments(store)) == 1
    _integrity(store)
    store.close()
