"""verify does not read again the pages of origin.db that wait() scanned for the same erasure
and that nothing wrote since (the origin's page log, ``origin/sqlite/gaps.py``); every page
written since, the WAL and every other file are scanned; the earlier hits in live cells of
unchanged pages are counted as live, the others judged again. Real SQLite files."""

from __future__ import annotations

import os
import random

TENANT, PURPOSE = "acme", "assistant"


def fill(store, n: int) -> list[dict]:
    rng = random.Random(5)
    items = [
        {
            "key": f"k-{rng.getrandbits(96):024x}",
            "subject": f"subj-{j % 20:02d}",
            "text": f"{rng.getrandbits(128):032x} note {j} about the {rng.choice(['tea', 'train', 'desk'])}",
        }
        for j in range(n)
    ]
    store.write_many(items, tenant=TENANT, purpose=PURPOSE)
    store.compact()
    return items


def total_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(root) for f in names)


def test_verify_after_wait_reads_only_what_changed_since(open_raw):
    store = open_raw()
    fill(store, 1500)
    r = store.forget(tenant=TENANT, subject="subj-03")
    assert store.wait(r.handle).erased
    v = store.verify(r.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    detail = next(c for c in v.checks if c.name == "bytes").detail
    assert "not read again" in detail
    assert v.scanned_bytes < total_bytes(store.path) / 2


def test_erased_bytes_written_after_wait_are_found(open_raw):
    """A page written after wait's scan is scanned again: erased text put back into the file
    through the origin's own writer (in a table where no live record may hold it) fails
    verify, although wait's scan of that page had found nothing."""
    store = open_raw()
    items = fill(store, 1500)
    gone = [it for it in items if it["subject"] == "subj-07"]
    r = store.forget(tenant=TENANT, subject="subj-07")
    assert store.wait(r.handle).erased
    o = store._origin
    with o.write_lock, o.writer:
        o.writer.execute("INSERT INTO meta(k, v) VALUES('stray', ?)", (gone[0]["text"],))
    v = store.verify(r.handle)
    assert v.level != "erased"
    bytes_check = next(c for c in v.checks if c.name == "bytes")
    assert bytes_check.outcome == "fail" and "origin.db" in bytes_check.detail


def test_without_a_scan_by_wait_verify_reads_every_page(open_raw):
    store = open_raw()
    fill(store, 800)
    r = store.forget(tenant=TENANT, subject="subj-01")
    store.compact()  # no wait(): nothing was scanned for this erasure
    v = store.verify(r.handle)
    assert v.level == "erased"
    assert "not read again" not in next(c for c in v.checks if c.name == "bytes").detail
    assert v.scanned_bytes >= os.path.getsize(os.path.join(store.path, "origin.db"))


def test_verify_after_wait_when_a_live_copy_was_found_and_no_page_changed(open_raw):
    """wait's scan found the erased text where a live record still holds it (a live copy,
    not residue), and nothing wrote origin.db since: verify keeps those hits, judges them
    again, and reads no page of origin.db again (found by the state machine: an IndexError
    on an empty list of changed pages)."""
    store = open_raw()
    text = "amber birch cedar delta echo foxtrot"
    store.write("a", text, tenant=TENANT, subject="alice", purpose=PURPOSE)
    store.write("a1", text, tenant=TENANT, subject="bob", purpose=PURPOSE)
    r = store.forget(tenant=TENANT, subject="alice")
    assert store.wait(r.handle).erased
    v = store.verify(r.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    assert store.read("a1", tenant=TENANT, purpose=PURPOSE).text == text


def test_earlier_hits_stand_when_no_page_of_their_file_was_read_again():
    # The state machine's case: wait's scan had hits in origin.db (live copies), and verify
    # read none of its pages again (nothing changed): an empty range list raised IndexError.
    import numpy as np

    from efface.erasure.hits import Hits
    from efface.erasure.verify import Earlier, _merged

    def hits(offsets):
        n = len(offsets)
        i64 = np.asarray(offsets, dtype=np.int64)
        return Hits(
            ["origin.db"],
            ["text"],
            np.zeros(n, np.int64),
            i64,
            np.full(n, 8, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, np.uint64),
        )

    old = Earlier("origin.db", hits([4096, 8200]), np.asarray([16384], dtype=np.int64))
    for only in ({}, {"/s/origin.db": []}, None):
        merged = _merged(hits([]), ("/s/origin.db", old), only)
        assert sorted(merged.offset.tolist()) == [4096, 8200]
    # a hit inside a range read again is replaced by what that read found
    merged = _merged(hits([8300]), ("/s/origin.db", old), {"/s/origin.db": [(8192, 12288)]})
    assert sorted(merged.offset.tolist()) == [4096, 8300]


def test_outside_keeps_offsets_in_no_range():
    import numpy as np

    from efface.erasure.verify import _outside

    offsets = np.asarray([0, 8191, 8192, 12287, 12288, 20000, 30000], dtype=np.int64)
    assert _outside(offsets, []).all()
    got = _outside(offsets, [(8192, 12288), (19992, 20008)])
    assert got.tolist() == [True, True, False, False, True, False, True]


def live_windows(v) -> int:
    import re

    detail = next(c for c in v.checks if c.name == "bytes").detail
    m = re.search(r"(\d+) windows are held by live records", detail)
    return int(m.group(1)) if m else 0


def forgotten(store, subject: str) -> str:
    r = store.forget(tenant=TENANT, subject=subject)
    assert store.wait(r.handle).erased  # wait scans origin.db for this erasure
    return r.handle


def verified(store, handle: str, reuse: bool):
    if not reuse:
        store._verifier._clean.clear()  # as if wait had not scanned: verify reads every byte
    v = store.verify(handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    detail = next(c for c in v.checks if c.name == "bytes").detail
    assert ("not read again" in detail) == reuse
    return v


def test_live_copies_found_by_wait_are_counted_not_judged_again(open_raw):
    """Live copies of the erased text that wait's scan found in unchanged pages are counted
    by verify as they were: the same number a verify reading every byte finds; a live copy
    whose record is forgotten after wait is not counted (its page was rewritten, read again)."""
    store = open_raw()
    fill(store, 600)
    text = "amber birch cedar delta echo foxtrot golf hotel india juliet"
    for i in range(5):
        store.write(f"b{i}", text, tenant=TENANT, subject=f"bob-{i}", purpose=PURPOSE)
    for name in ("alice", "alan", "carol", "dave"):
        store.write(name, text, tenant=TENANT, subject=name, purpose=PURPOSE)
    store.compact()
    # both forgotten before either is verified: the two verifications see the same live copies
    alice, alan = forgotten(store, "alice"), forgotten(store, "alan")
    reused = verified(store, alice, reuse=True)
    assert "hits in live cells then still in them" in next(c for c in reused.checks if c.name == "bytes").detail
    full = verified(store, alan, reuse=False)
    assert live_windows(reused) == live_windows(full) > 0

    carol, dave = forgotten(store, "carol"), forgotten(store, "dave")  # their scans count bob-0's copy ...
    forgotten(store, "bob-0")  # ... which goes now
    later = verified(store, carol, reuse=True)
    fresh = verified(store, dave, reuse=False)
    assert live_windows(later) == live_windows(fresh) < live_windows(full)
