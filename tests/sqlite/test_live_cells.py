"""verify judges the byte scan's hits inside live cells with array operations (issue #11, item 4).

A window an erased record shares with every live record (the prefix of a metadata document,
a template phrase) is met once per live record, so a judgement with a Python step per hit
grew with the store. Now a hit that lies in the cell content area of a page of a live b-tree
of the database file, outside every freeblock, is a live row's bytes and counts as a live
copy at once; the rest (the unallocated gap, freeblocks, other tables' pages, the WAL) is
judged as before, whole value by whole value.

The tests run on a real SQLite file and plant bytes in it where SQLite may leave them.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import efface
from efface import compiled
from efface.erasure import bytescan, residue
from efface.erasure.fingerprint import Fingerprinter, Fingerprints
from efface.erasure.mix import mix as _mix
from efface.erasure.mix import unmix as _unmix

pytestmark = pytest.mark.sqlite_only("raw bytes of the store's files")

SHARED = "ledger entry about the quarterly figures, for the team: "


def _many(store: efface.Store, n: int = 400) -> None:
    """n live records of bob whose texts and metadata share long prefixes with alice's."""
    store.write_many(
        [
            {
                "key": f"bob-{i:05d}",
                "text": f"{SHARED}bob's note number {i:05d}",
                "metadata": {"kind": "note", "seq": i},
            }
            for i in range(n)
        ],
        tenant="t",
        subject="bob",
        purpose="p",
    )


def _judged(monkeypatch) -> list[int]:
    """Record how many hits reach the per-hit judge (the slow path)."""
    seen: list[int] = []
    judge = residue.Judge.judge

    def counting(self, hits):
        seen.append(len(hits))
        return judge(self, hits)

    monkeypatch.setattr(residue.Judge, "judge", counting)
    return seen


def test_hits_in_live_cells_do_not_reach_the_per_hit_judge(open_raw, monkeypatch, scan_kernel):
    """Every live record shares the prefix of the erased text and of its metadata: hundreds of
    hits, judged live without a Python step each. On the code before, all of them went
    through the per-hit judge."""
    store = open_raw()
    _many(store)
    for i in range(5):
        store.write(
            f"alice-{i}",
            f"{SHARED}alice's note {i}",
            tenant="t",
            subject="alice",
            purpose="p",
            metadata={"kind": "note", "seq": 10_000 + i},
        )
    receipt = store.forget(tenant="t", subject="alice")
    assert store.wait(receipt.handle).erased
    seen = _judged(monkeypatch)
    v = store.verify(receipt.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    detail = next(c.detail for c in v.checks if c.name == "bytes")
    held = int(detail.split(" windows are held by live records")[0].rsplit("; ", 1)[1])
    assert held >= 400, detail  # a shared window in each live record's text or metadata
    assert sum(seen) < held // 10, f"{sum(seen)} of {held} live hits went through the per-hit judge"


def _freeblock(db: str, table: str = "records") -> tuple[int, int]:
    """(offset in the file, size) of the largest freeblock in a leaf page of ``table``."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        size = c.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in c.execute("SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf'", (table,))]
    data = Path(db).read_bytes()
    best = (0, 0)
    for page in pages:
        base = (page - 1) * size
        head = base + (100 if page == 1 else 0)
        at = int.from_bytes(data[head + 1 : head + 3], "big")
        while at:
            n = int.from_bytes(data[base + at + 2 : base + at + 4], "big")
            if n > best[1]:
                best = (base + at, n)
            at = int.from_bytes(data[base + at : base + at + 2], "big")
    return best


def test_an_erased_text_in_a_freeblock_of_a_live_page_is_residue(open_raw, scan_kernel):
    """A freeblock lies inside a page's cell content area but holds no live cell (with
    secure_delete its bytes are zeros): bytes found there are not a live row's, even where
    every window of them is shared with live records."""
    store = open_raw()
    _many(store, 60)
    text = f"{SHARED}alice's note, the one to plant"
    store.write("alice", text, tenant="t", subject="alice", purpose="p")
    # deleting some of bob's rows leaves freeblocks in live pages
    for i in range(0, 60, 3):
        store.forget(tenant="t", key=f"bob-{i:05d}")
    receipt = store.forget(tenant="t", subject="alice")
    assert store.wait(receipt.handle).erased
    path = store.path
    store.close()
    db = os.path.join(path, "origin.db")
    at, size = _freeblock(db)
    assert size >= len(text) + 4, "no freeblock to plant in"
    with open(db, "r+b") as f:
        f.seek(at + 4)  # past the freeblock's link and size
        f.write(text.encode())
    store = open_raw("s")
    v = store.verify(receipt.handle)
    assert v.level == "unreadable", "verify said erased with the whole text in a freeblock"
    assert "origin.db (text)" in next(c.detail for c in v.checks if c.name == "bytes")
    store.close()
    with open(db, "r+b") as f:
        f.seek(at + 4)
        f.write(bytes(len(text)))
    store = open_raw("s")
    assert store.verify(receipt.handle).level == "erased"


def test_the_compiled_live_cell_test_decides_as_the_numpy_one(open_raw, monkeypatch):
    """Every 8-aligned window of a real database file, pages with freeblocks among them, and
    a page whose freeblock chain is damaged: the compiled pass (efface.compiled) says
    inside/outside and reads the same words as LiveCells.inside and LiveCells.words."""
    store = open_raw()
    _many(store, 300)
    for i in range(0, 300, 4):
        store.forget(tenant="t", key=f"bob-{i:05d}")  # freeblocks in live pages
    store.compact()
    db = os.path.join(store.path, "origin.db")
    at, size = _freeblock(db)
    assert size, "no freeblock"
    monkeypatch.setenv(compiled.KERNEL_ENV, "compiled")
    compiled.reset()
    try:
        assert compiled.on()
        physical = store._origin.physical
        with physical.live_cells(store.path) as cells:
            assert cells is not None and cells.pages() > 0
            n = os.path.getsize(db)
            offsets = np.arange(0, n + 16, 8, dtype=np.int64)  # a few past the end too
            for width in (8, 16):
                widths = np.full(offsets.size, width, dtype=np.int64)
                inside, a, b = cells.inside_words(offsets, widths)
                assert (inside == cells.inside(offsets, widths)).all()
                wa, wb = cells.words(offsets)
                assert (a == wa).all() and (b == wb).all()
                assert inside.any() and not inside.all()
            # a damaged chain: the freeblock's link points past its page (both fail closed)
            page_base = at - at % cells._ps
            data = np.array(cells._data)  # a writable copy of the file's bytes
            data[at : at + 2] = [0xFF, 0xF0]
            damaged = type(cells)(cells.name, data, cells._ps, cells._usable, cells._pages)
            near = np.arange(page_base, page_base + cells._ps, 8, dtype=np.int64)
            widths = np.full(near.size, 8, dtype=np.int64)
            assert (damaged.inside_words(near, widths)[0] == damaged.inside(near, widths)).all()
    finally:
        compiled.reset()


def test_the_mix_is_inverted_exactly():
    """The scan's prefilter indexes the window's keyed sum before the mix, found from each
    fingerprint by inverting the mix: a wrong inverse would lose hits."""
    f = Fingerprinter(os.urandom(32))
    x = np.random.default_rng(3).integers(0, 2**63, size=10_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    assert (_unmix(_mix(x.copy(), f._k3, f._k4), f._k3, f._k4) == x).all()


@pytest.mark.parametrize("shift", range(8))
def test_a_copy_across_a_chunk_seam_is_found_at_every_alignment(tmp_path, shift, scan_kernel):
    """Files are hashed in chunks (of ``CHUNK`` or ``COMPILED_CHUNK`` bytes); a copy lying
    across the seam between two chunks is met at each of the eight alignments, as anywhere
    else."""
    f = Fingerprinter(b"s" * 32)
    fp = Fingerprints()
    item = bytes(np.random.default_rng(shift).integers(33, 127, size=90, dtype=np.uint8))
    f.add_many(fp, "text", [item])
    step = bytescan.chunk_size(compiled.on())
    data = bytearray(os.urandom(2 * step))
    at = step - 40 + shift
    data[at : at + len(item)] = item
    path = tmp_path / "file"
    path.write_bytes(bytes(data))
    hits, scanned = f.scan([str(path)], Fingerprints.from_blob(fp.to_blob()))
    assert scanned == len(data)
    assert hits and all(at <= h.offset < at + len(item) for h in hits)
