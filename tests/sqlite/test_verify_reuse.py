"""verify does not read again the pages of origin.db that wait() scanned for the same erasure
and that nothing wrote since (the origin's page log, ``origin/sqlite/gaps.py``); every page
written since, the WAL and every other file are scanned, and the earlier hits are judged
again. Real SQLite files."""

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

    from efface.erasure.fingerprint import Hits
    from efface.erasure.verify import _merged

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

    old = hits([4096, 8200])
    for only in ({}, {"/s/origin.db": []}, None):
        merged = _merged(hits([]), ("/s/origin.db", old), only)
        assert sorted(merged.offset.tolist()) == [4096, 8200]
    # a hit inside a range read again is replaced by what that read found
    merged = _merged(hits([8300]), ("/s/origin.db", old), {"/s/origin.db": [(8192, 12288)]})
    assert sorted(merged.offset.tolist()) == [4096, 8300]
