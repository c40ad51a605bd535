"""Regression tests for bugs found by the benchmarks (the repro scripts in ``bench/repro/``).

Each test rebuilds the situation of one repro at a small size, on a real SQLite file and a
real usearch index with the hashing embedder, through the public API only, and reads the
raw files in the store directory where bytes matter. A test here fails if its bug returns:

* ``bench/repro/repro_ann_scrub.py``: from the second erasure on, erased vectors stayed in
  the saved ANN file (usearch reuses the oldest freed slots first, which were the previous
  scrub's noise). Fixed in e402c11.
* ``bench/repro/repro_index_gap_residue.py``: fragments of erased keys and subject names
  stayed in the unallocated gap of live index b-tree pages despite ``secure_delete``.
  Fixed in aff3b03 (the compactor rebuilds those indexes after an erasure). The same gap in
  live *table* pages (stale copies of cells that stayed on a rebuilt page) is found by
  ``wait``'s scan of the origin's files and rewritten away (VACUUM).
* ``bench/repro/repro_verify_false_positives.py``: subject names sharing their first bytes
  (``user-000000``, ``user-000001``) made verify refuse ``erased`` although every erased
  byte was gone. Fixed in 7953774.
* ``bench/repro/repro_verify_blocks_reads.py``: reads wait for a running verify (and for
  compaction and backups), because they held the store lock. Fixed in #9 (reads run on their
  own WAL snapshots and take no store lock).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import random
import sys
import threading
import time
from pathlib import Path

import ahocorasick
import numpy as np
import pytest
from usearch.index import Index

import efface
from efface.vectors import read_many, stored

TENANT = "acme"
PURPOSE = "assistant"

NAMES = [
    "Alice",
    "Bob",
    "Carla",
    "Dmitri",
    "Elena",
    "Farid",
    "Grace",
    "Hiroshi",
    "Ines",
    "Jamal",
    "Katya",
    "Liam",
    "Mei",
    "Nadia",
    "Oscar",
    "Priya",
]
DRINKS = ["oolong tea", "black coffee", "oat flat white", "chai latte", "mint tea", "kombucha"]
FOODS = ["vegetarian ramen", "sushi", "tacos al pastor", "falafel wraps", "pho", "lentil soup"]
CITIES = ["Lisbon", "Berlin", "Nairobi", "Osaka", "Toronto", "Melbourne", "Oslo", "Seoul"]
TEMPLATES = [
    "{name} prefers {drink} in the morning and dislikes {drink2}.",
    "{name} is allergic to peanuts; avoid ordering {food} for team lunches.",
    "{name} moved to {city} last spring and now works remotely.",
    "{name}'s favourite lunch is {food}; they usually order it on Fridays.",
    "When travelling to {city}, {name} books an aisle seat and drinks {drink}.",
]


def sentence(rng: random.Random, name: str) -> str:
    drink, drink2 = rng.sample(DRINKS, 2)
    return rng.choice(TEMPLATES).format(
        name=name, drink=drink, drink2=drink2, food=rng.choice(FOODS), city=rng.choice(CITIES)
    )


def token(*parts: object, n: int = 12) -> str:
    """A deterministic random string over the letters g-z: never part of a hex digest (the
    ledger, receipts and evidence hold hex), nor of a word in the texts above."""
    raw = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=n).digest()
    return "".join("ghijklmnopqrstuvwxyz"[b % 20] for b in raw)


def raw_files(root: str | os.PathLike) -> dict[str, bytes]:
    """Every file under the store directory, as bytes on disk."""
    out = {}
    for base, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(base, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def write_all(store: efface.Store, items: list[dict]) -> None:
    for start in range(0, len(items), 1000):
        store.write_many(items[start : start + 1000], tenant=TENANT, purpose=PURPOSE)


@pytest.fixture
def open_raw(tmp_path):
    """efface.open on a fresh directory, no background compactor (the test drives it), closed
    at teardown."""
    opened: list[efface.Store] = []

    def _open(**options) -> efface.Store:
        options.setdefault("background", False)
        s = efface.open(tmp_path / f"store{len(opened)}", embedder="hashing", **options)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


# -- bench/repro/repro_ann_scrub.py ---------------------------------------------------------


def usearch_i8(vectors: np.ndarray) -> list[bytes]:
    """The i8 bytes usearch stores for these vectors (its own quantisation, cos metric), as
    the store hands them over: read back from their stored, half-precision form."""
    vectors = read_many(stored(vectors))
    idx = Index(ndim=vectors.shape[1], metric="cos", dtype="i8")
    idx.add(np.arange(len(vectors), dtype=np.uint64), vectors)
    return [np.asarray(idx.get(i, dtype=np.int8), dtype=np.int8).tobytes() for i in range(len(vectors))]


def test_every_erasure_leaves_none_of_its_vectors_in_the_ann_files(open_raw):
    """Four erasures in a row, each followed by wait(): none may leave an erased vector's i8
    bytes in any file. The bug kept them from the second erasure on (100 of 100 in the repro)."""
    store = open_raw()
    rounds, per, kept = 4, 40, 300
    rng = random.Random(3)
    items = [
        {
            "key": f"r{i // per}/{i:04d}",
            "subject": f"round-{i // per}",
            "text": f"{sentence(rng, NAMES[i % len(NAMES)])} Note {i:04d}.",
        }
        for i in range(rounds * per)
    ]
    items += [
        {"key": f"keep/{i:04d}", "subject": "keeper", "text": f"{sentence(rng, 'Zoltan')} Kept {i:04d}."}
        for i in range(kept)
    ]
    write_all(store, items)
    store.compact()
    vectors = usearch_i8(store.embedder.embed([it["text"] for it in items]))
    ann = b"".join(data for name, data in raw_files(store.path).items() if name.startswith("ann"))
    # The check can see what it looks for: every vector is in the ANN file before any forget.
    assert sum(v in ann for v in vectors) == len(vectors)
    for r in range(rounds):
        receipt = store.forget(tenant=TENANT, subject=f"round-{r}")
        assert store.wait(receipt.handle).erased
        files = raw_files(store.path)
        left = [i for i in range(r * per, (r + 1) * per) if any(vectors[i] in data for data in files.values())]
        assert not left, f"erasure {r + 1}: {len(left)} of {per} erased vectors still in a file"
        # and the vectors of live records are all still there (the scrub did not eat them)
        ann = b"".join(data for name, data in files.items() if name.startswith("ann"))
        assert all(v in ann for v in vectors[rounds * per :])
    assert store.verify(receipt.handle).level == "erased"


# -- bench/repro/repro_index_gap_residue.py ---------------------------------------------------


def test_no_fragment_of_an_erased_key_or_subject_stays_in_the_index_pages(open_raw):
    """48 subjects forgotten four at a time, wait() after each group; then no 8-byte window of
    an erased key or subject name may be anywhere in the store's files. On the code before
    the index rebuild (aff3b03 reverted), group 5 of 12 left a fragment in the unallocated gap
    of a live index page (SQLite 3.54.1; which group does depends on the page layout, so
    another SQLite may need other sizes). 12 groups take ~4-7 s here."""
    store = open_raw()
    n_subjects, per, group, groups, width = 50, 40, 4, 12, 8
    subjects = [f"subj-{token('subject', s, n=10)}" for s in range(n_subjects)]
    rng = random.Random(1)
    items = [
        {
            "key": f"k-{token('key', j, n=24)}",
            "subject": subjects[j % n_subjects],
            "text": sentence(rng, NAMES[j % len(NAMES)]),
        }
        for j in range(n_subjects * per)
    ]
    write_all(store, items)
    store.compact()
    for g in range(groups):
        gone = subjects[g * group : (g + 1) * group]
        # the random part of each erased key and subject name, every window of it
        secrets = [it["key"][2:] for it in items if it["subject"] in gone] + [s[5:] for s in gone]
        automaton = ahocorasick.Automaton()
        for s in secrets:
            for o in range(len(s) - width + 1):
                automaton.add_word(s[o : o + width], s)
        automaton.make_automaton()
        for s in gone:
            receipt = store.forget(tenant=TENANT, subject=s)
        assert store.wait(receipt.handle).erased
        hits = {
            (name, w)
            for name, data in raw_files(store.path).items()
            for _end, w in automaton.iter(data.decode("latin-1"))
        }
        assert not hits, (
            f"group {g}: fragments of {len({w for _n, w in hits})} erased keys or subject names "
            f"left in {sorted({n for n, _w in hits})}"
        )
        assert store.verify(receipt.handle).level == "erased"


# -- bench/repro/repro_verify_false_positives.py ----------------------------------------------


def test_subject_names_sharing_their_first_bytes_do_not_block_erased(open_raw):
    """Realistic data: subjects 'user-000000' ... 'user-000019', template sentences. Once
    wait() says erased, verify must say so too: the first 8 bytes of 'user-000000' are also
    those of every live subject's name, which the claims and subjects pages rightly hold."""
    store = open_raw()
    n_subjects, per = 20, 25
    rng = random.Random(7)
    people = [f"{rng.choice(NAMES)} {rng.choice(CITIES)}son" for _ in range(n_subjects)]
    items = [
        {
            "key": f"mem/user-{j % n_subjects:06d}/{j:08d}",
            "subject": f"user-{j % n_subjects:06d}",
            "text": sentence(rng, people[j % n_subjects]),
        }
        for j in range(n_subjects * per)
    ]
    write_all(store, items)
    for s in range(n_subjects):
        store.register_subject(f"user-{s:06d}", tenant=TENANT, identifiers=[f"user-{s:06d}@example.org"])
    store.compact()
    for s in (0, 1):
        receipt = store.forget(tenant=TENANT, subject=f"user-{s:06d}")
        assert store.wait(receipt.handle).erased
        v = store.verify(receipt.handle)
        assert v.level == "erased", [c.detail for c in v.checks if c.outcome != "pass"]
    # the live subjects' records are all still there
    assert store.read(f"mem/user-000002/{2:08d}", tenant=TENANT, purpose=PURPOSE) is not None


# -- bench/repro/repro_verify_blocks_reads.py ---------------------------------------------------

EFFACE_DIR = os.path.dirname(os.path.abspath(efface.__file__))


def at_work(thread: threading.Thread, method) -> bool:
    """Whether ``thread`` is running code of efface called from ``method`` (a public Store
    method), not just sitting in the method itself. ``method`` takes the store lock in its
    first statement, so on a store with one lock this means: it holds the lock. Read from
    the thread's stack (no timing, no private attribute)."""
    code = inspect.unwrap(method).__code__
    frame = sys._current_frames().get(thread.ident)
    inner = []
    while frame is not None:
        if frame.f_code is code:
            return any(c.co_filename.startswith(EFFACE_DIR) for c in inner)
        inner.append(frame.f_code)
        frame = frame.f_back
    return False


def maintenance(store: efface.Store, kind: str, tmp_path: Path, round_: int):
    """(method, callable) for one long maintenance call on ``store``; verify and compact
    each forget a subject of their own first (0-9 and 20-29)."""
    if kind == "verify":
        receipt = store.forget(tenant=TENANT, subject=f"s{round_:03d}")
        store.wait(receipt.handle)
        return efface.Store.verify, lambda: store.verify(receipt.handle)
    if kind == "compact":
        store.forget(tenant=TENANT, subject=f"s{20 + round_:03d}")  # so compact() has an erasure to make physical
        return efface.Store.compact, store.compact
    return efface.Store.backup, lambda: store.backup(tmp_path / f"backup-{round_}.efb")


def reads_during(store: efface.Store, kind: str, tmp_path: Path, rounds: int = 5) -> tuple[int, int]:
    """Run ``kind`` in a thread ``rounds`` times; each time, once it is at work, do a read and
    a recall from this thread and count the rounds where both returned while it was still at
    work. Returns (rounds where it was seen at work, rounds where the reads got through)."""
    seen = through = 0
    for r in range(rounds):
        method, call = maintenance(store, kind, tmp_path, r)
        t = threading.Thread(target=call, daemon=True)
        t.start()
        while t.is_alive() and not at_work(t, method):
            time.sleep(0.0005)
        if t.is_alive():
            seen += 1
            got = store.read("k/s039/0", tenant=TENANT, purpose=PURPOSE)
            hits = store.recall("prefers oolong tea in the morning", tenant=TENANT, purpose=PURPOSE)
            assert got is not None and hits
            through += at_work(t, method)
        t.join(timeout=120)
        assert not t.is_alive()
    return seen, through


@pytest.fixture
def busy_store(open_raw):
    """4,000 records over 40 subjects, ANN absorbed and saved."""
    store = open_raw()
    rng = random.Random(11)
    items = [
        {"key": f"k/s{j % 40:03d}/{j // 40}", "subject": f"s{j % 40:03d}", "text": sentence(rng, NAMES[j % len(NAMES)])}
        for j in range(4000)
    ]
    write_all(store, items)
    store.recall("warm up", tenant=TENANT, purpose=PURPOSE)
    store.compact()
    return store


def test_the_probe_sees_verify_backup_and_compaction_at_work(busy_store, tmp_path):
    """The test below is only meaningful if ``at_work`` does see a running verify,
    backup and compaction (so that its failure now means 'the read waited')."""
    for kind in ("verify", "backup", "compact"):
        seen, _ = reads_during(busy_store, kind, tmp_path, rounds=2)
        assert seen >= 1, f"{kind} was never seen at work: make the store bigger"


@pytest.mark.parametrize("kind", ["verify", "backup", "compact"])
def test_reads_do_not_wait_for_maintenance(busy_store, tmp_path, kind):
    """A read and a recall started while a verify (backup, compaction) is at work must return
    before it ends. With the old single store lock they could not (the repro measured a read waiting 2 s
    for verify at 100k). Nothing is timed: the thread's stack says whether it is still at work."""
    seen, through = reads_during(busy_store, kind, tmp_path)
    assert seen >= 1, f"{kind} was never seen at work"
    assert through >= 1, f"in {seen} of {seen} rounds the read and recall waited for {kind} to finish"


def test_a_live_copy_in_the_wal_is_not_residue(tmp_path):
    """An erased text that a live record also holds, with that record's page in the WAL (it
    was written after the erasure's checkpoint), is a live copy, not residue: verify reaches
    'erased' (it stopped at 'unreadable', found by the Hypothesis state machine). The copy is
    excused because the whole live text lies in a WAL frame of a live records page, not
    window by window (see efface.erasure.residue)."""
    text = "the quarterly plan for the lighthouse restoration, second draft"
    with efface.open(tmp_path / "s", embedder="hashing", background=False) as store:
        store.write("a", text, tenant="t", subject="alice", purpose="p")
        store.write("other", "an unrelated note about ferries", tenant="t", subject="bob", purpose="p")
        receipt = store.forget(tenant="t", subject="alice")
        assert store.wait(receipt.handle).erased
        store.write("b", text, tenant="t", subject="bob", purpose="p")  # the same text, live
        wal = tmp_path / "s" / "origin.db-wal"
        assert text.encode() in wal.read_bytes()  # its page image sits in the WAL
        v = store.verify(receipt.handle)
        assert v.level == "erased", [c.to_dict() for c in v.failed]
        assert "held by live records" in next(c.detail for c in v.checks if c.name == "bytes")


# -- stale cells in the unallocated gap of a live table page ------------------------------------


def _gap_of_a_records_leaf(db: Path, need: int) -> tuple[int, int]:
    """(offset in the file, length) of the unallocated gap of a leaf page of ``records``
    with room for ``need`` bytes: between the cell pointer array and the cell content area,
    where SQLite's rebuild of a page in a rebalance leaves the page's old cell bytes."""
    import apsw

    c = apsw.Connection(os.fspath(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (page_size,) = c.execute("PRAGMA page_size").fetchone()
        pages = [p for (p,) in c.execute("SELECT pageno FROM dbstat WHERE name='records' AND pagetype='leaf'")]
    finally:
        c.close()
    data = db.read_bytes()
    for pno in pages:
        base = (pno - 1) * page_size + (100 if pno == 1 else 0)
        cells = int.from_bytes(data[base + 3 : base + 5], "big")
        content = int.from_bytes(data[base + 5 : base + 7], "big") or 65536
        start, end = base + 8 + 2 * cells, (pno - 1) * page_size + content
        if end - start >= need + 16:
            return start + 8, end - start - 16
    raise AssertionError("no records leaf page with a gap that large")


def test_a_stale_copy_in_a_live_table_page_is_erased_by_wait(open_raw):
    """SQLite, rebuilding a table page in a rebalance (its rebuildPage), leaves the page's old
    cells in the unallocated gap: a record that stays on the page leaves a stale copy there,
    and once that record is erased (its cell zeroed by secure_delete) the copy remains, where
    no index rebuild or checkpoint reaches it. Raw SQLite with secure_delete=ON shows it in
    6 of 10 runs of 5,000 random upserts and deletes over 200 keys; the state machine in
    about 1 of 150 runs; verify then rightly refused 'erased' but wait() never got there.
    A natural reproduction takes thousands of operations, so this test puts the same bytes
    where SQLite leaves them: an erased text's copy in the gap of a live records leaf page.
    wait() must find it (the origin's files scanned for the erasure's fingerprints), have the
    origin rewrite its file, and verify then say 'erased' with no byte of it left."""
    store = open_raw()
    path = Path(store.path)
    secret = f"the parcel code is {token('parcel', n=16)} for the Lisbon flat"
    items = [
        {"key": f"keep/{i:03d}", "subject": "keeper", "text": f"{sentence(random.Random(i), 'Zoltan')} {i}"}
        for i in range(40)
    ]
    items.append({"key": "gone/1", "subject": "leaver", "text": secret})
    write_all(store, items)
    store.compact()
    receipt = store.forget(tenant=TENANT, subject="leaver")
    assert store.wait(receipt.handle).erased
    assert not any(secret.encode() in data for data in raw_files(path).values())
    store.close()
    wal = path / "origin.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    at, _room = _gap_of_a_records_leaf(path / "origin.db", len(secret))
    with open(path / "origin.db", "r+b") as f:  # what rebuildPage leaves behind
        f.seek(at)
        f.write(secret.encode())
    store = efface.open(path, embedder="hashing", background=False)
    try:
        assert all(store.read(it["key"], tenant=TENANT, purpose=PURPOSE) for it in items[:-1])
        assert store.wait(receipt.handle).erased
        v = store.verify(receipt.handle)
        assert v.level == "erased", [c.to_dict() for c in v.failed]
        assert not any(secret.encode() in data for data in raw_files(path).values())
        # nothing else was lost by the rewrite
        assert [store.read(it["key"], tenant=TENANT, purpose=PURPOSE).text for it in items[:-1]] == [
            it["text"] for it in items[:-1]
        ]
        assert store.verify_ledger().ok
    finally:
        store.close()
