"""`wait(until="erased")` for erasures that drop no record: the compactor must hurry for them
too, not leave their bytes to the next periodic save (30 s away)."""

from __future__ import annotations

import threading
import time

import pytest

from efface.erasure import compactor


@pytest.fixture
def no_periodic_save(monkeypatch):
    # Only an erasure's own hurry can bring the save now: the periodic one never comes.
    monkeypatch.setattr(compactor, "PERSIST_EVERY_S", 1e9)


def test_forget_of_identifiers_only_reaches_erased(open_store, no_periodic_save):
    store = open_store(background=True, compact_interval=0.05)
    store.register_subject("s1", tenant="t", identifiers=["Zebulon Quartermaine"])
    store.write("k", "an unrelated note", tenant="t", subject="other", purpose="p")
    store.wait(store.forget(key="nothing-here", tenant="t").handle, timeout=20)  # settle the write
    receipt = store.forget(subject="s1", tenant="t")
    assert receipt.erased == () and receipt.identifiers_erased
    status = store.wait(receipt.handle, timeout=20, tenant="t")
    assert status.erased
    assert store.verify(receipt.handle, tenant="t").level == "erased"
    assert store.read("k", tenant="t", purpose="p") is not None  # the other subject's record stays


def test_forget_of_a_record_under_hold_reaches_erased(open_store, no_periodic_save):
    store = open_store(background=True, compact_interval=0.05)
    store.register_subject("s1", tenant="t", identifiers=["Zebulon Quartermaine"])
    store.write("k", "a note on the case", tenant="t", subject="s1", purpose="p")
    store.retain("k", tenant="t", subject="s1", purpose="p", basis="legal_hold")
    receipt = store.forget(subject="s1", tenant="t")
    assert receipt.erased == () and [r.key for r in receipt.retained] == ["k"]
    status = store.wait(receipt.handle, timeout=20, tenant="t")
    assert status.erased
    assert store.verify(receipt.handle, tenant="t").level == "erased"


@pytest.mark.sqlite_only("the WAL checkpoint is the SQLite origin's")
def test_a_checkpoint_held_back_is_retried_before_the_periodic_save(open_store, no_periodic_save):
    store = open_store(background=True, compact_interval=0.05)
    physical = store._origin.physical
    real, refused = physical.checkpoint, []

    def held_back_once() -> bool:
        if not refused:  # as when a reader keeps its snapshot past the busy timeout
            refused.append(True)
            return False
        return real()

    physical.checkpoint = held_back_once
    store.write("k", "a note to forget", tenant="t", subject="s1", purpose="p")
    receipt = store.forget(subject="s1", tenant="t")
    assert store.wait(receipt.handle, timeout=20, tenant="t").erased
    assert refused and store.verify(receipt.handle, tenant="t").level == "erased"


@pytest.mark.sqlite_only("the byte scan of the origin's files is the SQLite origin's")
def test_wait_scans_the_origin_while_the_ann_file_is_saved(open_store, no_periodic_save):
    """The compactor finishes the origin's files (its WAL checkpointed) before it erases from
    the ANN file, and wait scans the origin's files in between: the two overlap instead of
    following one another (a whole save of the ANN file took a second at a million records)."""
    import threading
    import time

    store = open_store(background=True, compact_interval=0.05)
    for i in range(50):
        store.write(f"k{i}", f"note {i} about the harbour", tenant="t", subject=f"s{i % 5}", purpose="p")
    store.wait(store.forget(key="nothing-here", tenant="t").handle, timeout=20)  # settle the writes
    ann, verifier = store._ann, store._verifier
    real_erase, real_scan = ann.erase, verifier.origin_residue
    erased, scanning, scanned_before_erase_ended = threading.Event(), threading.Event(), []

    def slow_erase() -> None:
        # as a big ANN file's whole save took a second; held until the scan starts (at most
        # 10 s), so a loaded machine that wakes the waiter late does not fail the test, while
        # a wait that scans only after the erase still does
        scanning.wait(10.0)
        time.sleep(0.05)
        real_erase()
        erased.set()

    def scan(blob: bytes, handle: str) -> bool:
        # the scan may start before the erase or while it runs: not after it
        scanned_before_erase_ended.append(not erased.is_set())
        scanning.set()
        return real_scan(blob, handle)

    ann.erase, verifier.origin_residue = slow_erase, scan
    receipt = store.forget(subject="s1", tenant="t")
    assert store.wait(receipt.handle, timeout=20, tenant="t").erased
    assert scanned_before_erase_ended == [True]
    assert store.verify(receipt.handle, tenant="t").level == "erased"


def test_a_waited_on_erasure_is_not_held_back_by_the_last_ones(open_store, no_periodic_save, monkeypatch):
    """Erasures nobody waits on are erased in batches (at most every ERASE_PERSIST_S); one a
    caller waits on is erased at once. With the batching interval made endless, only the
    waiter's hurry can bring the second of two back-to-back erasures to `erased`."""
    monkeypatch.setattr(compactor, "ERASE_PERSIST_S", 1e9)
    store = open_store(background=True, compact_interval=0.05)
    for s in ("a", "b"):
        store.write_many(
            [{"key": f"{s}{i}", "text": f"note {i} about {s}"} for i in range(5)], tenant="t", subject=s, purpose="p"
        )
    first = store.forget(subject="a", tenant="t")
    assert store.wait(first.handle, timeout=20, tenant="t").erased
    second = store.forget(subject="b", tenant="t")  # right after the first's save
    assert store.wait(second.handle, timeout=20, tenant="t").erased
    assert store.verify(second.handle, tenant="t").level == "erased"


def test_without_a_waiter_erasures_wait_for_the_batch(open_store, no_periodic_save, monkeypatch):
    """The other side: with nobody waiting and the interval endless, the bytes stay (so the
    test above passes because of the waiter, not by chance)."""
    monkeypatch.setattr(compactor, "ERASE_PERSIST_S", 1e9)
    store = open_store(background=True, compact_interval=0.05)
    store.write("k", "a note about b", tenant="t", subject="b", purpose="p")
    receipt = store.forget(subject="b", tenant="t")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert not store.status(receipt.handle, tenant="t").erased
        time.sleep(0.05)


def test_the_periodic_whole_save_waits_for_erasures_to_stop(open_store):
    """A whole save of the ANN files holds the GIL for about a second at a million records;
    an erasure's wait and verify that ran into it took 2.4 s instead of about 1. So while
    erasures come it is put off (their bytes go in place), and it comes once they stop, or
    once the last one is PERSIST_LATEST_S old whatever comes."""
    store = open_store(background=True, compact_interval=0.05)
    c = store._compactor
    now = time.monotonic()
    c._last_persist, c._erased_at = now - compactor.PERSIST_EVERY_S - 1, now - compactor.QUIET_S - 1
    assert c.save_due(now)
    assert not c.save_due(now, urgent=True)  # a caller waits for an erasure's bytes
    c._erased_at = now - 1.0  # an erasure a second ago
    assert not c.save_due(now)
    c._last_persist = now - compactor.PERSIST_LATEST_S - 1
    assert c.save_due(now, urgent=True)  # put off long enough
    c._last_persist, c._erased_at = now - 1.0, now - compactor.QUIET_S - 1
    assert not c.save_due(now)  # saved a second ago


def test_a_waited_on_erasure_goes_in_place_while_a_whole_save_is_due(open_store, monkeypatch):
    """A whole save is due every round (PERSIST_EVERY_S 0) but put off while erasures come; a
    waited-on erasure's bytes do not wait for it: the rounds that erase them are not whole
    (the ANN files' bytes go in place, where the store has ANN files; on PostgreSQL the
    origin's maintenance runs in them). Once the erasures stop, the whole save comes.

    No timing: "erasures stop" is the test's to say. While it waits and verifies, the quiet
    that a whole save waits for never comes (QUIET_S endless: on PostgreSQL the wait includes
    the maintenance and verify scans the server's files, which on a loaded host outlast any
    fixed QUIET_S); then QUIET_S drops to 0 and the test waits for the whole save's round
    itself (an event), not a while. The quiet rule's own arithmetic, urgency included, is
    tested exactly above (test_the_periodic_whole_save_waits_for_erasures_to_stop)."""
    monkeypatch.setattr(compactor, "PERSIST_EVERY_S", 0.0)  # a whole save due every round
    monkeypatch.setattr(compactor, "QUIET_S", 1e9)  # ... put off while erasures come
    store = open_store(background=True, compact_interval=0.05)
    store.write_many(
        [{"key": f"k{i}", "text": f"note {i} about b"} for i in range(5)], tenant="t", subject="b", purpose="p"
    )
    c, rounds, whole_done = store._compactor, [], threading.Event()
    real_run = c.run

    def run(persist: bool, whole: bool = True, merge: bool = False) -> int:
        if persist:
            rounds.append("whole" if whole else "in place")
        applied = real_run(persist, whole, merge)
        if persist and whole:
            whole_done.set()
        return applied

    c.run = run
    ann, files = store._ann, []
    if not ann.synchronous:  # ANN files of this process's own (not an origin's vector index)
        real_persist, real_erase = ann.persist, ann.erase
        ann.persist = lambda: (files.append("whole"), real_persist())[1]
        ann.erase = lambda: (files.append("in place"), real_erase())[1]
    receipt = store.forget(subject="b", tenant="t")
    assert store.wait(receipt.handle, timeout=60, tenant="t").erased
    assert store.verify(receipt.handle, tenant="t").level == "erased"
    assert "in place" in rounds and "whole" not in rounds  # the erasure did not wait for a whole save
    if not ann.synchronous:
        assert "in place" in files and "whole" not in files
    monkeypatch.setattr(compactor, "QUIET_S", 0.0)  # the erasures stopped
    assert whole_done.wait(60), "no whole save came once the erasures stopped"
    if not ann.synchronous:
        assert "whole" in files
