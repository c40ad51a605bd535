"""verify must reach ``erased`` once an erased text's bytes are truly gone, and never earlier
(issue 12, item 9).

Each test runs on a real SQLite file through the public API and scans the raw files of the
store directory itself, so that it can say whether verify's answer agrees with the disk:

* short texts (8-22 bytes) whose 8-byte windows also occur in a purpose, a tenant name, a
  schema word or a full-text term were never proven erased; only a text under 8 bytes may
  end in ``cannot_verify``, and the check says why;
* an erased text that a live record holds in its metadata is a live copy, not residue;
* an older erasure was blocked by windows of a newer erasure whose pages are still only in
  the WAL (after a kill -9, ``wait`` said erased and ``verify`` did not);
* and the other side: the whole text left in the unallocated gap of a live records page,
  in a stray file, or in a newer erasure's pending WAL pages is residue, even when live
  records share every window of it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import efface

pytestmark = pytest.mark.sqlite_only("raw bytes of the store's files")


def raw_files(root: str | os.PathLike) -> dict[str, bytes]:
    out = {}
    for base, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(base, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def left_over(root: str | os.PathLike, text: str, live: list[str] = ()) -> list[tuple[str, int]]:
    """Every place in the store's files where ``text`` lies, except inside a whole copy of
    one of the ``live`` strings (values live records hold) at that place."""
    needle = text.encode()
    allowed = [s.encode() for s in live if text in s]
    found = []
    for name, data in raw_files(root).items():
        at = data.find(needle)
        while at != -1:
            inside = any(
                data[at - j : at - j + len(a)] == a
                for a in allowed
                for j in range(len(a) - len(needle) + 1)
                if a[j : j + len(needle)] == needle and at - j >= 0
            )
            if not inside:
                found.append((name, at))
            at = data.find(needle, at + 1)
    return found


def failed(v) -> list[dict]:
    return [c.to_dict() for c in v.failed]


def bytes_detail(v) -> str:
    return next(c.detail for c in v.checks if c.name == "bytes")


# -- short texts ------------------------------------------------------------------------------

SHORT = [
    # (erased text, tenant, purpose, a live text): each short text's first 8-byte window also
    # lies where no live record holds it (a purpose, a tenant name, the schema, a FTS term)
    ("customer support call", "customer-care", "customer_support", "the customer asked for a refund"),
    ("metadata updated", "acme", "support", "an unrelated note about ferries"),
    ("reschedule me", "acme", "support", "please reschedule the meeting"),
    ("customer", "customer-care", "customer_support", "an unrelated note about ferries"),
    ("ha ha ha ha ha", "acme", "support", "an unrelated note about ferries"),
    ("zzzzzzzzzzzzzzzzzzzzzzzz", "acme", "support", "an unrelated note about ferries"),
]


@pytest.mark.parametrize("text, tenant, purpose, other", SHORT, ids=[t for t, *_ in SHORT])
def test_a_short_text_reaches_erased_once_it_is_gone(open_raw, text, tenant, purpose, other):
    store = open_raw()
    store.write("a", text, tenant=tenant, subject="alice", purpose=purpose)
    store.write("b", other, tenant=tenant, subject="bob", purpose=purpose)
    receipt = store.forget(tenant=tenant, subject="alice")
    assert store.wait(receipt.handle).erased
    # the disk: the erased text is nowhere but inside values live rows hold (a purpose)
    assert left_over(store.path, text, [purpose, tenant, other]) == []
    v = store.verify(receipt.handle)
    assert v.level == "erased", failed(v)


def test_a_whole_short_text_left_in_a_file_is_still_residue(open_raw):
    """The other side of the short-text rule: its windows alone do not count, the whole
    text does, at any offset of any file."""
    text = "customer support call"
    store = open_raw()
    store.write("a", text, tenant="customer-care", subject="alice", purpose="customer_support")
    store.write("b", "the customer support calls are recorded", tenant="customer-care", subject="bob", purpose="p")
    receipt = store.forget(tenant="customer-care", subject="alice")
    assert store.wait(receipt.handle).erased
    cache = Path(store.path) / "ann" / "chunk-cache.bin"
    for offset in (0, 3, 4097):
        cache.write_bytes(os.urandom(offset) + text.encode() + os.urandom(50))
        v = store.verify(receipt.handle)
        assert v.level == "unreadable", offset
        assert "chunk-cache.bin (text)" in bytes_detail(v) and text not in bytes_detail(v)
    cache.unlink()
    v = store.verify(receipt.handle)
    assert v.level == "erased", failed(v)


def test_only_a_text_under_8_bytes_is_cannot_verify_and_the_check_says_why(open_raw):
    store = open_raw()
    store.write("a", "ok tea", tenant="acme", subject="alice", purpose="support")
    store.write("b", "an unrelated note about ferries", tenant="acme", subject="bob", purpose="support")
    receipt = store.forget(tenant="acme", subject="alice")
    assert store.wait(receipt.handle).erased
    v = store.verify(receipt.handle)
    check = next(c for c in v.checks if c.name == "bytes")
    assert (v.level, check.outcome) == ("unreadable", "cannot_verify")
    assert "shorter than 8 bytes" in check.detail and "ok tea" not in check.detail


# -- live copies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["the quarterly plan for the lighthouse restoration, second draft", "customer support call"]
)
def test_a_copy_in_a_live_records_metadata_is_a_live_copy(open_raw, text):
    store = open_raw()
    store.write("a", text, tenant="t", subject="alice", purpose="p")
    store.write("b", "a note about the plan", tenant="t", subject="bob", purpose="p", metadata={"copy": text})
    receipt = store.forget(tenant="t", subject="alice")
    assert store.wait(receipt.handle).erased
    # the text lies only where the live record's metadata holds it
    assert left_over(store.path, text, [json.dumps(text)]) == []
    assert left_over(store.path, text) != []
    v = store.verify(receipt.handle)
    assert v.level == "erased", failed(v)
    assert "held by live records" in bytes_detail(v)


def _gap(db: str, table: str = "records") -> tuple[int, int]:
    """(start, end) of the unallocated gap of a leaf page of ``table`` in the database file."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        size = c.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in c.execute("SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf'", (table,))]
    data = Path(db).read_bytes()
    best = (0, 0)
    for page in pages:
        base = (page - 1) * size
        head = base + (100 if page == 1 else 0)
        cells = int.from_bytes(data[head + 3 : head + 5], "big")
        content = int.from_bytes(data[head + 5 : head + 7], "big") or 65536
        gap = (head + 8 + 2 * cells, base + content)
        if gap[1] - gap[0] > best[1] - best[0]:
            best = gap
    return best


@pytest.mark.parametrize(
    "text, live",
    [
        # every window verify samples of the erased text is also in a live record's text
        ("Alice prefers green tea in the morning", ["Alice prefers green tea in the afternoon"]),
        ("customer support call", ["customer support calls are recorded", "a customer support call, recorded"]),
    ],
)
def test_the_whole_text_in_the_gap_of_a_live_records_page_is_residue(open_raw, text, live):
    """A live records page's unallocated gap keeps old cell bytes (SQLite does not zero it
    when it rebuilds a page). The old window-by-window excuse passed the whole erased text
    there because live records shared each of its windows; only a live value that lies
    whole at that place may excuse a hit."""
    store = open_raw()
    store.write("a", text, tenant="t", subject="alice", purpose="p")
    for n, other in enumerate(live):
        store.write(f"live{n}", other, tenant="t", subject="bob", purpose="p")
    receipt = store.forget(tenant="t", subject="alice")
    assert store.wait(receipt.handle).erased
    path = store.path
    store.close()
    db = os.path.join(path, "origin.db")
    start, end = _gap(db)
    assert end - start > len(text) + 16, "no gap to plant in"
    at = start + (end - start) // 2
    with open(db, "r+b") as f:
        f.seek(at)
        f.write(text.encode())
    assert left_over(path, text, live) == [(("origin.db"), at)]
    store = open_raw("s")
    v = store.verify(receipt.handle)
    assert v.level == "unreadable", "verify said erased with the whole text in a page's gap"
    assert "origin.db (text)" in bytes_detail(v)
    store.close()
    with open(db, "r+b") as f:
        f.seek(at)
        f.write(bytes(len(text)))
    store = open_raw("s")
    v = store.verify(receipt.handle)
    assert v.level == "erased", failed(v)
    for other in live:
        assert store.recall(other, tenant="t", purpose="p")[0].text == other


# -- an older erasure and a newer one's WAL pages ----------------------------------------------


def orchard(r: int, i: int) -> str:
    """Texts of successive rounds share their first 16 bytes ("gone seed3 round")."""
    return f"gone seed3 round{r} item{i}: a distinctive memory about the orchard by the river"


def two_erasures(store: efface.Store) -> tuple[str, str]:
    """An erasure, compacted; then a newer one whose records' pages are only in the WAL."""
    store.write_many(
        [{"key": f"g/0/{k}", "text": orchard(0, k)} for k in range(60)], tenant="t", subject="gone0", purpose="p"
    )
    store.write("keep", "a kept memory about the lighthouse keeper", tenant="t", subject="keeper", purpose="p")
    first = store.forget(tenant="t", subject="gone0")
    assert store.wait(first.handle).erased
    store.write_many(
        [{"key": f"g/1/{k}", "text": orchard(1, k)} for k in range(60)], tenant="t", subject="gone1", purpose="p"
    )
    second = store.forget(tenant="t", subject="gone1")
    return first.handle, second.handle


def check_two_erasures(store: efface.Store, first: str, second: str) -> None:
    wal = Path(store.path) / "origin.db-wal"
    # the newer erasure's records are still in the WAL's page images; the older one's are gone
    assert any(orchard(1, k).encode() in wal.read_bytes() for k in range(60))
    assert not any(left_over(store.path, orchard(0, k)) for k in range(60))
    assert store.wait(first, timeout=0).erased
    v = store.verify(first)
    assert v.level == "erased", failed(v)  # wait and verify agree
    assert "other erasures whose bytes wait for the compactor" in bytes_detail(v)
    v = store.verify(second)
    assert v.level == "unreadable"  # never earlier: its own bytes are in the WAL
    assert store.wait(second).erased
    assert not any(left_over(store.path, orchard(1, k)) for k in range(60))
    v = store.verify(second)
    assert v.level == "erased", failed(v)


def test_an_older_erasure_is_not_blocked_by_a_newer_ones_pages_in_the_wal(open_raw):
    store = open_raw()
    first, second = two_erasures(store)
    check_two_erasures(store, first, second)


WORKER = """
import sys, time
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import efface
from test_verify_short import two_erasures
store = efface.open(sys.argv[1], embedder="hashing", background=False)
print(*two_erasures(store), flush=True)
time.sleep(600)
"""


def test_after_a_kill_wait_and_verify_agree_on_the_older_erasure(tmp_path):
    """kill -9 with the newer erasure's pages only in the WAL: on reopen, ``wait`` says the
    older erasure is erased (its checkpoint marker is past it), and ``verify`` must agree."""
    path = str(tmp_path / "s")
    src = os.path.dirname(os.path.dirname(efface.__file__))
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, path, src, os.path.dirname(os.path.abspath(__file__))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = proc.stdout.readline().decode()
        assert line, proc.stderr.read().decode()
        first, second = line.split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    with efface.open(path, embedder="hashing", background=False) as store:
        check_two_erasures(store, first, second)
        assert store.read("keep", tenant="t", purpose="p") is not None
        assert store.verify_ledger().ok


def test_the_whole_text_of_an_older_erasure_in_a_newer_ones_pages_is_residue(open_raw):
    """The other side: a live record took the erased text again, then went in a newer
    erasure whose pages are only in the WAL. The older erasure's whole text lies in the WAL:
    not erased until the compactor takes it."""
    text = "the quarterly plan for the lighthouse restoration, second draft"
    store = open_raw()
    store.write("a", text, tenant="t", subject="alice", purpose="p")
    store.write("other", "an unrelated note about ferries", tenant="t", subject="bob", purpose="p")
    first = store.forget(tenant="t", subject="alice")
    assert store.wait(first.handle).erased
    store.write("b", text, tenant="t", subject="carol", purpose="p")
    second = store.forget(tenant="t", subject="carol")
    assert left_over(store.path, text) != []
    v = store.verify(first.handle)
    assert v.level == "unreadable", "verify said erased with the whole text in the WAL"
    assert "origin.db-wal (text)" in bytes_detail(v)
    assert store.wait(second.handle).erased
    assert left_over(store.path, text) == []
    assert store.verify(first.handle).level == "erased"
    assert store.verify(second.handle).level == "erased"


def test_an_erased_records_metadata_is_proven_gone(open_raw):
    """Metadata can hold personal data ({"email": ...}): it is fingerprinted with the record,
    so a copy left anywhere in the store's files keeps verify from 'erased'."""
    store = open_raw()
    meta = {"email": "zora.quillfeather@example.org", "tier": "gold"}
    store.write("a", "a note about the harbour", tenant="t", subject="zora", purpose="p", metadata=meta)
    store.write("b", "bob's note", tenant="t", subject="bob", purpose="p", metadata={"x": 1})
    stored = next(v for v in raw_files(store.path).values() if b"zora.quillfeather" in v)
    at = stored.find(b"zora.quillfeather")
    start = stored.rfind(b"{", 0, at)
    copy = stored[start : stored.find(b"}", at) + 1]  # the metadata as the origin stored it
    receipt = store.forget(tenant="t", subject="zora")
    assert store.wait(receipt.handle).erased
    assert left_over(store.path, "zora.quillfeather") == []
    Path(store.path, "cache.bin").write_bytes(b"\0" * 13 + copy + b"\0" * 29)
    v = store.verify(receipt.handle)
    assert v.level != "erased" and "cache.bin" in bytes_detail(v), failed(v)
    os.remove(os.path.join(store.path, "cache.bin"))
    assert store.verify(receipt.handle).level == "erased"
