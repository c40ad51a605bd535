"""A subject's name shares its first bytes with every other subject's ("user-000123",
"user-000456"): its window is met once per other name in the store. Those hits are strays
(the name is not whole there); they are decided with array operations
(efface.erasure.residue.strays), which must agree with the judge that takes them one by one,
and must never excuse the name itself, whole, at any alignment. Real fingerprints, real
files, a real store."""

from __future__ import annotations

import os
import random

import pytest

import efface
from efface.erasure.fingerprint import Fingerprinter, Fingerprints
from efface.erasure.residue import STRAYS_AT_ONCE, Judge, Reader, strays

TENANT, PURPOSE = "acme", "assistant"


def _file_of_names(tmp_path, erased: bytes, copies_at: list[int], others: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    data = bytearray()
    for i in range(others):
        data += rng.randbytes(rng.randrange(0, 13))  # any alignment
        data += f"user-{rng.randrange(0, 1000):06d}".encode()  # "user-000..." as the erased name
        if i in copies_at:
            data += rng.randbytes(rng.randrange(0, 8)) + erased
    path = tmp_path / "names.bin"
    path.write_bytes(bytes(data))
    return str(path)


@pytest.mark.parametrize("copies", [[], [5], [3, 400, 999]])
def test_strays_agree_with_the_judge_and_never_excuse_the_name_itself(tmp_path, copies):
    fpr = Fingerprinter(os.urandom(32))
    fp = Fingerprints()
    erased = b"user-000123"
    fpr.add_many(fp, "identifier", [erased], uniform=True)  # as evidence.py adds names
    fp = Fingerprints.from_blob(fp.to_blob())  # as verify reads them back
    path = _file_of_names(tmp_path, erased, copies, others=1200)
    hits, _ = fpr.scan_arrays([path], fp, str(tmp_path))
    assert len(hits) >= STRAYS_AT_ONCE  # the shared prefix is met once per name
    reader = Reader(str(tmp_path), {})
    mask = strays(fpr, fp, hits, reader)
    one_by_one = Judge(fpr, fp, reader, None, None, list)
    for i, h in enumerate(hits.objects()):
        verdict = one_by_one.judge([h])
        assert mask[i] == (verdict.stray == 1), (h, verdict)
    kept = hits.take(~mask).objects()
    with open(path, "rb") as f:
        data = f.read()
    assert {data[h.offset : h.offset + len(erased)] for h in kept} <= {erased}
    assert len(kept) >= len(copies)  # every copy of the name is left to be judged
    if copies:
        assert Judge(fpr, fp, reader, None, None, list).judge(kept).residue  # and is residue
    reader.close()


def test_a_window_changed_since_the_scan_is_not_a_stray(tmp_path):
    fpr = Fingerprinter(os.urandom(32))
    fp = Fingerprints()
    fpr.add_many(fp, "identifier", [b"user-000123"], uniform=True)
    fp = Fingerprints.from_blob(fp.to_blob())
    path = _file_of_names(tmp_path, b"", [], others=300)
    hits, _ = fpr.scan_arrays([path], fp, str(tmp_path))
    with open(path, "r+b") as f:  # the file changes under the verifier
        f.write(b"\x00" * os.path.getsize(path))
    mask = strays(fpr, fp, hits, Reader(str(tmp_path), {}))
    assert len(hits) and not mask.any()


def test_forgetting_one_of_many_similarly_named_subjects_is_erased(tmp_path):
    """Every subject's name starts with the same eight bytes; forget one and wait: erased,
    and verify agrees (the other names are strays, the forgotten one is gone)."""
    items = [
        {"key": f"n{i}", "subject": f"user-{i % 400:06d}", "text": f"note {i} for the harbour office"}
        for i in range(2000)
    ]
    with efface.open(str(tmp_path / "s"), embedder="hashing") as store:
        for s in range(0, len(items), 500):
            store.write_many(items[s : s + 500], tenant=TENANT, purpose=PURPOSE)
        receipt = store.forget(tenant=TENANT, subject="user-000123")
        assert store.wait(receipt.handle, timeout=60).erased
        v = store.verify(receipt.handle)
        assert v.level == "erased", v
    raw = b""
    for root, _d, files in os.walk(tmp_path / "s"):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                raw += f.read()
    assert b"user-000123" not in raw and b"user-000124" in raw
