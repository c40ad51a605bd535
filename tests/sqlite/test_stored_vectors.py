"""A record's vector is stored at unit length in half precision (efface.vectors): the form on
disk, reading it back, a store written before (float32 rows) still recalled and erased, and
embeddings no vector can be made of refused before anything is written. Real SQLite files,
the real hashing embedder."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

import efface
from efface import vectors
from efface.errors import InvalidInput

TENANT, PURPOSE = "acme", "assistant"


def test_widen_gives_every_finite_half_exactly_as_numpy_does(scan_kernel):
    """vectors.widen moves a half's bits into a float's place, in numpy's integer passes and
    in its compiled loop: every one of the 63,488 finite halves (subnormals and both zeros
    among them) comes out bit for bit as numpy's own conversion gives it, in any shape, from a
    view that is not contiguous, and past WIDEN_MAX."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = bits[(bits & 0x7C00) != 0x7C00]
    for half in (
        finite.view(np.float16).reshape(-1, 62),
        finite.view(np.float16)[::3],
        np.tile(finite.view(np.float16), 5),
    ):
        got = vectors.widen(half)
        assert got.shape == half.shape and got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), half.astype(np.float32).view(np.uint32))
    assert (vectors._moved.compiled is not None) == (scan_kernel == "compiled")


def test_the_stored_form_is_half_precision_at_unit_length():
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((20, 384)).astype(np.float32) * 7.0  # any length
    blobs = vectors.stored(rows)
    assert all(len(b) == 1 + 2 * 384 and b[:1] == vectors.F16 for b in blobs)
    back = vectors.read_many(blobs)
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    assert back.dtype == np.float32 and back.shape == (20, 384)
    assert np.abs(back - unit).max() < 2e-3  # half precision's rounding of components <= ~0.2
    cos = (back * unit).sum(axis=1) / np.linalg.norm(back, axis=1)
    assert np.all(cos > 1 - 1e-5)
    assert np.array_equal(vectors.read(blobs[3]), back[3])
    assert not vectors.read_many(vectors.stored(np.zeros((2, 8), dtype=np.float32))).any()  # zero stays zero


def test_float32_rows_of_an_older_store_read_as_they_are_and_beside_the_new_form():
    rng = np.random.default_rng(6)
    old = rng.standard_normal((3, 384)).astype(np.float32)
    assert np.array_equal(vectors.read(old[0].tobytes()), old[0])
    mixed = vectors.read_many([old[0].tobytes(), *vectors.stored(old[1:])])
    assert np.array_equal(mixed[0], old[0])
    assert np.abs(mixed[1:] - old[1:] / np.linalg.norm(old[1:], axis=1, keepdims=True)).max() < 2e-3


def _raw_rows(path) -> list[tuple[int, bytes]]:
    with sqlite3.connect(f"file:{path}/origin.db?mode=ro", uri=True) as db:
        return db.execute("SELECT id, embedding FROM records ORDER BY id").fetchall()


ITEMS = [
    {"key": f"m{i}", "subject": f"user-{i % 3}", "text": text}
    for i, text in enumerate(
        [
            "Alice prefers green tea in the morning",
            "Bob is allergic to peanuts and shellfish",
            "Carla moved to Porto last spring",
            "Alice's sister lives in Lyon",
            "Bob runs a bakery on the harbour",
            "Carla's flight to Oslo was cancelled",
            "The office wifi drops every afternoon",
            "Alice plays the cello on Sundays",
            "Bob is learning Portuguese",
        ]
    )
]


def test_a_store_holds_half_precision_rows(tmp_path):
    path = tmp_path / "s"
    with efface.open(str(path), embedder="hashing") as store:
        store.write_many(ITEMS, tenant=TENANT, purpose=PURPOSE)
    rows = _raw_rows(path)
    assert len(rows) == len(ITEMS)
    assert all(len(blob) == 1 + 2 * 384 and blob[:1] == vectors.F16 for _, blob in rows)


def test_a_store_written_with_float32_rows_recalls_and_erases_them(tmp_path):
    """Rows as a store made before this form holds them (plain float32): recall gives the
    same answers, and a forget of their subject still reaches a verify that says erased."""
    path = tmp_path / "s"
    with efface.open(str(path), embedder="hashing") as store:
        store.write_many(ITEMS, tenant=TENANT, purpose=PURPOSE)
        before = [h.key for h in store.recall("who drinks tea", tenant=TENANT, purpose=PURPOSE, k=5)]
    with sqlite3.connect(str(path / "origin.db")) as db:
        for rid, blob in _raw_rows(path):
            db.execute("UPDATE records SET embedding=? WHERE id=?", (vectors.read(blob).tobytes(), rid))
    assert all(len(blob) == 4 * 384 for _, blob in _raw_rows(path))
    with efface.open(str(path), embedder="hashing") as store:
        after = [h.key for h in store.recall("who drinks tea", tenant=TENANT, purpose=PURPOSE, k=5)]
        assert after == before and after[0] == "m0"
        receipt = store.forget(tenant=TENANT, subject="user-0")
        assert store.wait(receipt.handle).erased
        assert store.verify(receipt.handle).level == "erased"
        left = [h.key for h in store.recall("Alice green tea", tenant=TENANT, purpose=PURPOSE, k=9)]
        assert left and not {"m0", "m3", "m6"} & set(left)


@pytest.mark.parametrize(
    "bad",
    [
        [[float("nan")] * 384] * 2,
        [[1e39] * 384] * 2,  # past float32's range
        [["x"] * 384] * 2,
    ],
    ids=["nan", "overflow", "not-numbers"],
)
def test_embeddings_no_vector_can_be_made_of_are_refused_and_nothing_is_written(tmp_path, bad):
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        store.write_many(ITEMS[:1], tenant=TENANT, purpose=PURPOSE)
        with pytest.raises(InvalidInput) as err:
            store.write_many(ITEMS[1:3], tenant=TENANT, purpose=PURPOSE, embeddings=bad)
        assert "embeddings" in str(err.value)
        assert store.read("m1", tenant=TENANT, purpose=PURPOSE) is None
        assert store.read("m0", tenant=TENANT, purpose=PURPOSE) is not None
