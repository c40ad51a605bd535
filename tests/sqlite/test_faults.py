"""Fault injection on the SQLite store's files: damaged pages, truncated and missing files,
files of the wrong kind, a read-only directory, a full disk.

Each fault is injected into a *copy* of a populated store, so the original shows that nothing
was lost. The only errors allowed out are efface's own (``StoreDamaged``,
``StoreUnwritable``), never apsw's or the OS's. A page of a given table is found with the
``dbstat`` virtual table and overwritten with random bytes; the read-only directory is a
read-only bind mount (or, for a user other than root, a directory without write permission);
the full disk is a small tmpfs. Mounting needs root: where it is not allowed those tests skip
and say why, and a subprocess under ``RLIMIT_FSIZE`` (allowed to anyone) stands in for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

import efface
from efface.cli import cli
from efface.errors import StoreDamaged, StoreUnwritable

from conftest import mount, unmount

HASHING = {"embedder": "hashing", "background": False}
KEYS = [f"n{i}" for i in range(120)]


def _text(i: int) -> str:
    return f"note {i}: Alice prefers green tea with honey in the afternoon " + "padding " * 30


@pytest.fixture(scope="module")
def populated(tmp_path_factory) -> Path:
    """A closed store with records, claims, a subject, a forget (receipt, evidence, ledger)."""
    root = tmp_path_factory.mktemp("populated") / "store"
    with efface.open(root, **HASHING) as s:
        s.write_many(
            [{"key": k, "text": _text(i)} for i, k in enumerate(KEYS)],
            tenant="acme",
            subject="alice",
            purpose="support",
        )
        s.register_subject("alice", tenant="acme", identifiers=["Alice Smith"])
        receipt = s.forget(tenant="acme", key="n0")
        s.wait(receipt.handle)
    return root


def assert_intact(root: Path) -> None:
    """Every record of the populated store is there, whole; the ledger's chain holds."""
    with efface.open(root, **HASHING) as s:
        for i, k in enumerate(KEYS[1:], 1):
            m = s.read(k, tenant="acme", purpose="support")
            assert m is not None and m.text == _text(i)
        assert s.read("n0", tenant="acme", purpose="support") is None
        assert s.verify_ledger().ok


@pytest.fixture
def copy(populated, tmp_path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(populated, dest)
    return dest


def pages_of(db: Path, name: str) -> tuple[int, list[int]]:
    """The page size and the page numbers (1-based) of one table or index, from dbstat."""
    c = apsw.Connection(os.fspath(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        size = c.execute("PRAGMA page_size").fetchone()[0]
        pages = [p for (p,) in c.execute("SELECT pageno FROM dbstat WHERE name=? ORDER BY pageno", (name,))]
    finally:
        c.close()
    return size, pages


def garble(db: Path, offset: int, length: int, seed: int = 7) -> None:
    with open(db, "r+b") as f:
        f.seek(offset)
        f.write(bytes((seed * 131 + i * 197) % 251 for i in range(length)))


def exercise(root: Path) -> list[BaseException]:
    """Open the store and use every operation once; return what each raised (open first)."""
    raised: list[BaseException] = []
    try:
        s = efface.open(root, **HASHING)
    except Exception as exc:
        return [exc]
    ops = [
        lambda: [s.read(k, tenant="acme", purpose="support") for k in KEYS],
        lambda: s.recall("green tea", tenant="acme", purpose="support"),
        lambda: s.write("new", "a new memory", tenant="acme", subject="bob", purpose="support"),
        lambda: s.forget(tenant="acme", key="n7"),
        lambda: s.register_subject("bob", tenant="acme", identifiers=["Bob Jones"]),
        lambda: s.ledger(),
        lambda: s.verify_ledger(),
        lambda: s.receipts(),
        lambda: [s.verify(r["handle"]) for r in s.receipts()],
        lambda: s.quarantined(tenant="acme"),
        lambda: s.stats(),
        lambda: s.compact(),
        s.close,
    ]
    for op in ops:
        try:
            op()
        except Exception as exc:
            raised.append(exc)
    with contextlib.suppress(Exception):
        s.close()
    return raised


def assert_damage_reported(root: Path) -> StoreDamaged:
    raised = exercise(root)
    assert raised, "the damage went unnoticed by every operation"
    stray = [e for e in raised if not isinstance(e, StoreDamaged)]
    assert not stray, f"raw errors escaped: {[type(e).__module__ + '.' + type(e).__name__ for e in stray]}"
    assert "restore" in str(raised[0]) and "damaged" in str(raised[0])
    return raised[0]


# -- damaged origin.db ---------------------------------------------------------------------------
def test_a_garbled_header_is_store_damaged_at_open(copy, populated):
    garble(copy / "origin.db", 0, 100)
    with pytest.raises(StoreDamaged, match="restore"):
        efface.open(copy, **HASHING)
    assert_intact(populated)


@pytest.mark.parametrize(
    "table",
    [
        "records",
        "claims",
        "sqlite_autoindex_records_1",
        "fts_data",
        "fts_idx",
        "ledger",
        "receipts",
        "evidence",
        "subjects",
        "meta",
        "sqlite_schema",
    ],
)
def test_a_garbled_page_is_store_damaged_where_it_is_met(copy, populated, table):
    size, pages = pages_of(copy / "origin.db", table)
    assert pages, f"{table} has no page of its own to garble"
    page = pages[len(pages) // 2]
    # Keep page 1's first 100 bytes (the file header): that is the garbled-header test.
    start = (page - 1) * size + (100 if page == 1 else 0)
    garble(copy / "origin.db", start, size - (start - (page - 1) * size))
    assert_damage_reported(copy)
    assert_intact(populated)


@pytest.mark.parametrize("keep", [50, 4096, "half"])
def test_a_truncated_origin_is_store_damaged(copy, populated, keep):
    db = copy / "origin.db"
    os.truncate(db, db.stat().st_size // 2 if keep == "half" else keep)
    assert_damage_reported(copy)
    assert_intact(populated)


def test_damage_in_the_cli_is_one_error_also_in_json(copy):
    size, pages = pages_of(copy / "origin.db", "records")
    garble(copy / "origin.db", (pages[0] - 1) * size, size)
    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None})
    base = ["--store", os.fspath(copy), "--embedder", "hashing", "--tenant", "acme"]
    result = runner.invoke(cli, [*base, "--json", "read", "n5", "--purpose", "support"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)  # exactly one document, nothing else on stdout
    assert doc["error"]["type"] == "StoreDamaged" and "restore" in doc["error"]["message"]
    assert result.stderr == ""
    result = runner.invoke(cli, [*base, "recall", "green tea", "--purpose", "support"])
    assert result.exit_code == 1 and "Error: the store is damaged" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "apsw" not in result.stderr


# -- missing files, files of the wrong kind --------------------------------------------------------
@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_missing_origin_beside_its_indexes_is_refused(copy, populated, how):
    db = copy / "origin.db"
    if how == "deleted":
        db.unlink()
    else:
        os.truncate(db, 0)
    before = sorted(os.listdir(copy))
    with pytest.raises(StoreDamaged, match=r"origin\.db is missing or empty"):
        efface.open(copy, **HASHING)
    assert sorted(os.listdir(copy)) == before, "a refused open must not start a new origin"
    assert (db.exists() and db.stat().st_size == 0) or not db.exists()
    assert_intact(populated)


def test_a_missing_origin_with_only_its_wal_left_is_refused(copy):
    (copy / "origin.db").unlink()
    shutil.rmtree(copy / "ann")
    (copy / "origin.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(60))
    with pytest.raises(StoreDamaged, match="missing"):
        efface.open(copy, **HASHING)


def test_a_directory_without_an_origin_or_indexes_is_a_new_store(tmp_path):
    (tmp_path / "s" / "ann").mkdir(parents=True)  # an empty ann/ holds nothing built from an origin
    with efface.open(tmp_path / "s", **HASHING) as s:
        assert s.stats()["records"] == 0


@pytest.mark.parametrize("origin", ["sqlite", "memory"])
def test_ann_being_a_file_is_refused(tmp_path, origin):
    root = tmp_path / "s"
    root.mkdir()
    (root / "ann").write_text("not a directory")
    with pytest.raises(StoreDamaged, match="'ann' entry is a file"):
        efface.open(root, origin=origin, **HASHING)
    assert (root / "ann").read_text() == "not a directory"
    # and the lock is released: once the file is moved away the store opens
    (root / "ann").unlink()
    efface.open(root, origin=origin, **HASHING).close()


def test_origin_db_being_a_directory_is_refused(tmp_path):
    (tmp_path / "s" / "origin.db").mkdir(parents=True)
    with pytest.raises(StoreDamaged, match="not a file"):
        efface.open(tmp_path / "s", **HASHING)


def test_a_garbled_index_file_is_rebuilt_from_the_origin(copy, populated):
    (index,) = list((copy / "ann").iterdir())
    garble(index, 0, index.stat().st_size)
    with efface.open(copy, **HASHING) as s:
        hits = s.recall("green tea honey", tenant="acme", purpose="support", k=5)
        assert hits and all(h.key in KEYS[1:] for h in hits)
        assert s.stats(tenant="acme")["ann_vectors"] == len(KEYS) - 1
    assert_intact(copy)


# -- read-only directory ---------------------------------------------------------------------------
@contextlib.contextmanager
def read_only_view(src: Path, at: Path):
    """``src`` seen read-only at ``at``: a read-only bind mount as root (root ignores
    permission bits), a directory without write permission otherwise."""
    if os.geteuid() != 0:
        os.chmod(src, 0o555)
        try:
            yield src
        finally:
            os.chmod(src, 0o755)
        return
    at.mkdir()
    why = mount("--bind", os.fspath(src), os.fspath(at))
    if why is not None:
        pytest.skip(why)
    try:
        why = mount("-o", "remount,bind,ro", os.fspath(at))
        if why is not None:
            pytest.skip(why)
        yield at
    finally:
        unmount(os.fspath(at))


def test_a_read_only_store_directory_is_store_unwritable(copy, tmp_path):
    with read_only_view(copy, tmp_path / "ro") as ro:
        with pytest.raises(StoreUnwritable, match="cannot be written"):
            efface.open(ro, **HASHING)
        with pytest.raises(StoreUnwritable, match="cannot be written"):
            efface.open(ro / "new-store", **HASHING)
    assert_intact(copy)


def test_an_origin_on_a_read_only_file_system_is_store_unwritable(copy):
    """The directory is writable but origin.db is not (a read-only bind mount of the file):
    SQLite's own ReadOnlyError, translated at the origin's edge; what was stored is served."""
    db = os.fspath(copy / "origin.db")
    why = mount("--bind", db, db)
    if why is not None:
        pytest.skip(why)
    try:
        why = mount("-o", "remount,bind,ro", db)
        if why is not None:
            pytest.skip(why)
        s = efface.open(copy, **HASHING)  # opening writes nothing: reads are served
        assert s.read("n5", tenant="acme", purpose="support").text == _text(5)
        with pytest.raises(StoreUnwritable, match="cannot be written"):
            s.write("new", "a new memory", tenant="acme", subject="bob", purpose="support")
        with pytest.raises(StoreUnwritable, match="cannot be written"):
            s.forget(tenant="acme", key="n5")
        with contextlib.suppress(StoreUnwritable):  # its maintenance cannot write either
            s.close()
        s.close()
    finally:
        unmount(db)
    assert_intact(copy)


# -- a full disk (the small_disk fixture: conftest.py) -------------------------------------------
def _fill(path: Path) -> None:
    """Write ``path`` until the disk is full."""
    with contextlib.suppress(OSError), open(path, "wb", buffering=0) as f:
        while True:
            f.write(b"\0" * 65536)


def test_a_full_disk_refuses_the_write_and_loses_nothing(small_disk):
    root = small_disk / "store"
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (512 << 10))  # freed afterwards, to reopen
    s = efface.open(root, **HASHING)
    acknowledged: dict[str, str] = {}
    with pytest.raises(StoreUnwritable, match="disk holding the store is full"):
        for i in range(100_000):
            text = f"memory {i} " + os.urandom(1500).hex()
            s.write(f"k{i}", text, tenant="t", subject="s", purpose="p")
            acknowledged[f"k{i}"] = text
    assert acknowledged, "the disk was full before the first write"
    failed = f"k{len(acknowledged)}"
    # reads go on; the refused write is not there
    assert s.read("k0", tenant="t", purpose="p").text == acknowledged["k0"]
    assert s.read(failed, tenant="t", purpose="p") is None
    with pytest.raises(StoreUnwritable):  # a forget cannot commit either: no receipt, nothing erased
        s.forget(tenant="t", key="k0")
    with contextlib.suppress(StoreUnwritable):  # may fail to save the index: the store is released anyway
        s.close()
    s.close()  # closed is closed
    ballast.unlink()
    with efface.open(root, **HASHING) as s:
        for key, text in acknowledged.items():
            assert s.read(key, tenant="t", purpose="p").text == text
        assert s.read(failed, tenant="t", purpose="p") is None
        assert s.receipts() == []


def test_close_on_a_full_disk_is_store_unwritable_and_releases_the_store(small_disk):
    root = small_disk / "store"
    s = efface.open(root, **HASHING)
    s.write_many(
        [{"key": f"k{i}", "text": f"memory number {i}"} for i in range(50)], tenant="t", subject="s", purpose="p"
    )
    ballast = small_disk / "ballast"
    _fill(ballast)
    with pytest.raises(StoreUnwritable, match="full"):
        s.close()  # the index file cannot be written
    s.close()
    try:  # SQLite may not even have room for its shared-memory file
        full = efface.open(root, **HASHING)
    except StoreUnwritable as exc:
        assert "disk holding the store is full" in str(exc)
    else:  # else reads go on, and a write is refused
        assert full.read("k3", tenant="t", purpose="p").text == "memory number 3"
        with pytest.raises(StoreUnwritable, match="disk holding the store is full"):
            full.write("big", "x" * 900_000, tenant="t", subject="s", purpose="p")
        with contextlib.suppress(StoreUnwritable):
            full.close()
    ballast.unlink()
    with efface.open(root, **HASHING) as s:  # the lock was released; the index is rebuilt
        assert len(s.recall("memory number 7", tenant="t", purpose="p", k=50)) == 50
        assert s.read("k49", tenant="t", purpose="p").text == "memory number 49"


def test_a_cli_command_whose_close_fails_on_a_full_disk_prints_one_document(small_disk):
    root = small_disk / "store"
    with efface.open(root, **HASHING) as s:
        s.write_many(
            [{"key": f"k{i}", "text": f"green tea {i}"} for i in range(20)], tenant="t", subject="s", purpose="p"
        )
    for index in (root / "ann").iterdir():
        index.unlink()  # recall rebuilds it from the origin, and close must save it again
    # A reader keeps the WAL's shared memory file in place: without it no connection (a
    # reader neither) can open the store on a full disk, and the command would not start.
    holder = apsw.Connection(os.fspath(root / "origin.db"), flags=apsw.SQLITE_OPEN_READONLY)
    holder.execute("SELECT count(*) FROM records").fetchall()
    _fill(small_disk / "ballast")
    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None})
    args = ["--store", os.fspath(root), "--tenant", "t", "--json", "recall", "green tea", "--purpose", "p"]
    result = runner.invoke(cli, args)
    holder.close()
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert len(json.loads(result.stdout)["hits"]) == 10, (result.stdout, result.stderr)  # the one document: the answer
    assert json.loads(result.stderr)["error"]["type"] == "StoreUnwritable"
    (small_disk / "ballast").unlink()
    with efface.open(root, **HASHING) as s:
        assert s.read("k19", tenant="t", purpose="p").text == "green tea 19"


_FSIZE_WORKER = r"""
import os, resource, signal, sys
import efface
from efface.errors import StoreUnwritable
root, limit = sys.argv[1], int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
s = efface.open(root, embedder="hashing", background=False)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
n = 0
try:
    for n in range(100_000):
        s.write(f"k{n}", f"memory {n} " + "x" * 3000, tenant="t", subject="s", purpose="p")
except StoreUnwritable as exc:
    print("refused", n, exc, flush=True)
try:
    s.close()
except StoreUnwritable:
    s.close()
print("closed", flush=True)
"""


def test_a_file_size_limit_in_a_subprocess_is_store_unwritable(tmp_path):
    """Anyone can run this one: RLIMIT_FSIZE makes the kernel refuse writes past a size,
    as a full disk does (EFBIG where a full disk gives ENOSPC)."""
    root = tmp_path / "store"
    efface.open(root, **HASHING).close()
    done = subprocess.run(
        [sys.executable, "-c", _FSIZE_WORKER, os.fspath(root), str(400 << 10)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused ") and lines[-1] == "closed"
    refused_at = int(lines[0].split()[1])
    assert refused_at > 0
    with efface.open(root, **HASHING) as s:
        for n in range(refused_at):
            assert s.read(f"k{n}", tenant="t", purpose="p").text == f"memory {n} " + "x" * 3000
        assert s.read(f"k{refused_at}", tenant="t", purpose="p") is None
