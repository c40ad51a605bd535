"""An erasure takes the erased vectors out of the saved ANN file in place (their rows
overwritten, the file fsynced) instead of saving the whole index: the layout read from a real
usearch file, the rows it names, a file it cannot read (saved whole instead), and a store
that reopens on such a file. Real usearch indexes and files."""

from __future__ import annotations

import glob
import os

import numpy as np
from usearch.index import Index

from efface.paths import ann_file

TENANT, PURPOSE = "acme", "assistant"


def saved_index(tmp_path, n: int = 300, dim: int = 16) -> tuple[Index, str]:
    rng = np.random.default_rng(3)
    idx = Index(ndim=dim, metric="cos", dtype="i8", connectivity=16)
    idx.add(np.arange(1000, 1000 + n, dtype=np.uint64), rng.standard_normal((n, dim)).astype(np.float32))
    idx.remove(1005)  # a removed node, as erasures leave before a rebuild
    path = str(tmp_path / "t.usearch")
    idx.save(path)
    return idx, path


def row_of(idx: Index, key: int) -> bytes:
    return np.asarray(idx.get(np.uint64(key), dtype="i8"), dtype=np.int8).tobytes()


def test_layout_names_the_row_usearch_holds_for_each_key(tmp_path):
    idx, path = saved_index(tmp_path)
    layout = ann_file.read_layout(path, 16)
    assert layout is not None and layout.size == os.path.getsize(path)
    live = [int(k) for k in idx.keys]
    assert set(live) <= {int(k) for k in layout.keys}
    with open(path, "rb") as f:
        data = f.read()
    for key in live[:50]:
        (slot,) = layout.slots([key]).tolist()
        at = ann_file.MATRIX_HEADER + slot * layout.width
        assert data[at : at + layout.width] == row_of(idx, key)


def test_a_file_it_cannot_read_gives_none(tmp_path):
    _idx, path = saved_index(tmp_path)
    assert ann_file.read_layout(path, 15) is None  # another row width
    with open(path, "rb") as f:
        data = f.read()
    torn = tmp_path / "torn.usearch"
    torn.write_bytes(data[: len(data) - 100])
    assert ann_file.read_layout(str(torn), 16) is None
    foreign = tmp_path / "foreign.usearch"
    foreign.write_bytes(b"\x00" * 4096)
    assert ann_file.read_layout(str(foreign), 16) is None
    assert ann_file.read_layout(str(tmp_path / "missing.usearch"), 16) is None


def test_overwritten_rows_are_gone_and_the_file_still_loads(tmp_path):
    idx, path = saved_index(tmp_path)
    gone, kept = [1010, 1011, 1200], [1020, 1100]
    before = {k: row_of(idx, k) for k in gone + kept}
    layout = ann_file.read_layout(path, 16)
    assert layout is not None
    ann_file.overwrite(path, layout, layout.slots(gone), np.random.default_rng(0))
    with open(path, "rb") as f:
        data = f.read()
    assert all(before[k] not in data for k in gone)
    loaded = Index.restore(path)
    assert loaded is not None and len(loaded) == len(idx)
    assert all(row_of(loaded, k) == before[k] for k in kept)


def fill(store, n: int) -> None:
    store.write_many(
        [
            {
                "key": f"k{i}",
                "text": f"note {i} about the {('tea', 'train', 'desk')[i % 3]} {i * 7919}",
                "subject": f"s{i % 10}",
            }
            for i in range(n)
        ],
        tenant=TENANT,
        purpose=PURPOSE,
    )
    store.compact()  # saved whole: the file holds every vector


def ann_bytes(store) -> bytes:
    return b"".join(open(p, "rb").read() for p in glob.glob(os.path.join(store.path, "ann", "*.usearch")))


def subject_rows(store, subject: int) -> list[bytes]:
    """The i8 rows the ANN index holds for subject ``s<subject>``'s records."""
    ids = [
        rid for rid, key in store._origin._r().execute("SELECT id, key FROM records") if int(key[1:]) % 10 == subject
    ]
    return store._ann.quantized(store._tenant(TENANT), ids)


def test_forget_overwrites_the_erased_rows_without_saving_the_file(open_raw):
    store = open_raw("s")
    fill(store, 400)
    ann = store._ann
    saved = ann.saved_epoch()
    rows, others = subject_rows(store, 3), subject_rows(store, 2)
    assert len(rows) == 40 and all(row in ann_bytes(store) for row in rows)
    r = store.forget(tenant=TENANT, subject="s3")
    assert store.wait(r.handle).erased
    assert ann.saved_epoch() == saved  # not saved whole ...
    assert ann.erased_epoch() >= r.epoch  # ... but the erased rows are gone from it
    on_disk = ann_bytes(store)
    assert not any(row in on_disk for row in rows)
    assert all(row in on_disk for row in others)
    v = store.verify(r.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]
    assert "overwritten in place" in next(c for c in v.checks if c.name == "ann.erased").detail
    hits = store.recall("note about the tea", tenant=TENANT, purpose=PURPOSE, k=50)
    assert hits and not {h.key for h in hits} & {f"k{i}" for i in range(3, 400, 10)}


def test_a_store_reopens_on_a_file_erased_in_place(open_raw):
    store = open_raw("s")
    fill(store, 400)
    r = store.forget(tenant=TENANT, subject="s4")
    assert store.wait(r.handle).erased
    gone = {f"k{i}" for i in range(4, 400, 10)}
    store._compactor.run = lambda *a, **k: 0  # as after kill -9: nothing saved at close
    store.close()
    again = open_raw("s")
    assert again._ann.saved_epoch() < r.epoch <= again._ann.erased_epoch()  # the file was erased in place
    assert again._ann.size(again._tenant(TENANT)) == 360
    for text in ("note 4 about the train 31676", "note 14 about the desk 110866"):
        hits = again.recall(text, tenant=TENANT, purpose=PURPOSE, k=10)
        assert hits and not {h.key for h in hits} & gone
    assert again.read("k5", tenant=TENANT, purpose=PURPOSE) is not None
    v = again.verify(r.handle)
    assert v.level == "erased", [c.to_dict() for c in v.failed]


def test_a_file_it_cannot_read_is_saved_whole(open_raw, monkeypatch):
    store = open_raw("s")
    fill(store, 200)
    saved = store._ann.saved_epoch()
    monkeypatch.setattr(ann_file, "read_layout", lambda path, width: None)
    r = store.forget(tenant=TENANT, subject="s1")
    assert store.wait(r.handle).erased
    assert store._ann.saved_epoch() >= r.epoch > saved
    assert store.verify(r.handle).level == "erased"


def test_erasures_in_place_after_a_whole_save_that_holds_scrub_noise(open_raw):
    """The second erasure reads a file saved after the first: removed slots refilled with
    noise under reserved labels. Its rows are found by key all the same."""
    store = open_raw("s")
    fill(store, 400)
    first = store.forget(tenant=TENANT, subject="s3")
    assert store.wait(first.handle).erased
    store.compact()  # a whole save: the file now holds the scrub noise of the first erasure
    rows, others = subject_rows(store, 5), subject_rows(store, 6)
    second = store.forget(tenant=TENANT, subject="s5")
    assert store.wait(second.handle).erased
    assert store._ann.saved_epoch() < second.epoch <= store._ann.erased_epoch()
    on_disk = ann_bytes(store)
    assert rows and not any(row in on_disk for row in rows)
    assert all(row in on_disk for row in others)
    assert store.verify(second.handle).level == "erased"
