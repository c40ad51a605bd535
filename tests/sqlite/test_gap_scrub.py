"""The unallocated gap of every b-tree page is zeroed by the compactor's checkpoint, on the
pages that changed (``origin/sqlite/gaps.py``), instead of rebuilding whole indexes.

SQLite leaves the old cell bytes of a page it rebuilds in a rebalance in the page's gap, even
with ``secure_delete``; a record erased later leaves that stale copy behind (the index rebuild
after every erasure was the old answer, O(index); it never reached table pages, whose stale
copies only ``wait``'s scan found and a VACUUM removed). Real SQLite files, read raw."""

from __future__ import annotations

import os
import random

import numpy as np

from efface.origin.sqlite.gaps import gaps
from efface.origin.sqlite.origin import WAL_AUTOCHECKPOINT

TENANT, PURPOSE = "acme", "assistant"


def gap_bytes(db: str) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(pages, non-zero bytes in their gaps, [(page, lo, hi)] of the pages with any) of a file."""
    data = np.fromfile(db, dtype=np.uint8)
    ps = int.from_bytes(data[16:18].tobytes(), "big")
    usable = ps - int(data[20])
    n = data.size // ps
    rows = data[: n * ps].reshape(n, ps)
    lo, hi = gaps(rows, np.arange(1, n + 1), usable)
    col = np.arange(ps)
    nz = ((rows != 0) & (col >= lo[:, None]) & (col < hi[:, None])).sum(axis=1)
    bad = [(int(p) + 1, int(lo[p]), int(hi[p])) for p in np.flatnonzero(nz)]
    return n, int(nz.sum()), bad


def fill(store, n: int, seed: int = 7) -> list[dict]:
    """Records with random keys written in small batches: the (tenant, key) index and the
    records table split and rebalance all over, leaving stale cells in page gaps."""
    rng = random.Random(seed)
    items = [
        {
            "key": f"k-{rng.getrandbits(96):024x}",
            "subject": f"subj-{j % 40:03d}",
            "text": f"note {j}: " + " ".join(rng.choice(["tea", "lunch", "train", "desk", "rain"]) for _ in range(12)),
        }
        for j in range(n)
    ]
    order = list(range(n))
    rng.shuffle(order)
    for start in range(0, n, 50):
        store.write_many([items[j] for j in order[start : start + 50]], tenant=TENANT, purpose=PURPOSE)
    return items


def test_the_checkpoint_leaves_no_stale_byte_in_any_page_gap(open_raw):
    """After forgets and compact(), no b-tree page of origin.db, table or index, has a
    non-zero byte in its unallocated gap. Before the scrub, compact() rebuilt the key and
    subject indexes only: the records table's pages kept stale cells in their gaps."""
    store = open_raw()
    fill(store, 2000)
    store.compact()  # the first checkpoint after opening looks at every page
    db = os.path.join(store.path, "origin.db")
    receipts = [store.forget(tenant=TENANT, subject=f"subj-{s:03d}") for s in range(0, 40, 4)]
    store.compact()
    pages, stale, bad = gap_bytes(db)
    assert pages > 100
    assert stale == 0, f"{len(bad)} pages keep {stale} stale bytes in their gaps, e.g. {bad[:5]}"
    assert store._origin.physical.scrubbed.examined < pages  # only the pages that changed
    assert store.verify(receipts[-1].handle).level == "erased"


def test_writes_after_a_scrub_are_scrubbed_at_the_next_checkpoint(open_raw):
    """The page log follows every commit, SQLite's own automatic checkpoints included (the
    log's WAL hook replaces SQLite's default one and runs the same checkpoint): after more
    writes and forgets, the next compact() leaves every gap zeroed again, and the WAL stayed
    bounded while the writes went on."""
    store = open_raw()
    fill(store, 1500, seed=1)
    store.compact()
    wal = os.path.join(store.path, "origin.db-wal")
    biggest = 0
    rng = random.Random(3)
    for round_ in range(130):
        batch = [
            {"key": f"x-{rng.getrandbits(96):024x}", "subject": "later", "text": f"later note {round_} " + "x" * 900}
            for _ in range(40)
        ]
        store.write_many(batch, tenant=TENANT, purpose=PURPOSE)
        biggest = max(biggest, os.path.getsize(wal))
    # the automatic checkpoint (past WAL_AUTOCHECKPOINT frames) kept the WAL from growing
    # with every write (~8,500 frames' worth were written)
    assert biggest < (WAL_AUTOCHECKPOINT + 600) * 4120
    store.forget(tenant=TENANT, subject="later")
    store.forget(tenant=TENANT, subject="subj-005")
    store.compact()
    _pages, stale, bad = gap_bytes(os.path.join(store.path, "origin.db"))
    assert stale == 0, f"{len(bad)} pages keep {stale} stale bytes, e.g. {bad[:5]}"


def test_the_first_checkpoint_after_opening_scrubs_every_page(open_raw, tmp_path):
    """Bytes written to a page's gap while no efface had the store open (a crash, another
    program) are unknown to the page log: the first checkpoint after opening examines every
    page and zeroes them."""
    store = open_raw("s")
    items = fill(store, 800, seed=2)
    store.compact()
    store.close()
    db = str(tmp_path / "s" / "origin.db")
    data = np.fromfile(db, dtype=np.uint8)
    ps = int.from_bytes(data[16:18].tobytes(), "big")
    n = data.size // ps
    lo, hi = gaps(data[: n * ps].reshape(n, ps), np.arange(1, n + 1), ps - int(data[20]))
    wide = [p for p in range(n) if hi[p] - lo[p] >= 64][:3]
    assert wide
    with open(db, "r+b") as f:
        for p in wide:
            f.seek(p * ps + int(lo[p]))
            f.write(b"stale cell bytes" * 4)
    assert gap_bytes(db)[1] > 0
    again = open_raw("s")
    again.compact()
    assert gap_bytes(db)[1] == 0
    assert again.read(items[0]["key"], tenant=TENANT, purpose=PURPOSE).text == items[0]["text"]


def test_a_file_the_scrub_cannot_read_safely_falls_back_to_rebuilding_the_indexes(open_raw, monkeypatch):
    """Past 2**24 pages (or with auto-vacuum's pointer-map pages) a page's first byte no longer
    tells a b-tree page from the others, so the scrub refuses; the checkpoint then rebuilds the
    key and subject indexes before it records the erasure's bytes as gone, as before the scrub."""
    from efface.origin.sqlite import gaps as gaps_module

    store = open_raw()
    fill(store, 600, seed=4)
    monkeypatch.setattr(gaps_module, "MAX_PAGES", 1)
    r = store.forget(tenant=TENANT, subject="subj-002")
    store.compact()
    physical = store._origin.physical
    assert physical._log is None  # the page log is off for this file from now on
    assert store._origin.meta_get("origin.reindex") == "0"  # and the indexes were rebuilt
    assert store.wait(r.handle).erased
    assert store.verify(r.handle).level == "erased"
