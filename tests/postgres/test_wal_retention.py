"""Every forget reaches ``erased`` whatever WAL the server keeps (issue #34 item 3;
src/efface/origin/postgres/walpass.py): a server with 1MB WAL segments (``initdb
--wal-segsize=1``) and a ``min_wal_size`` of 320MB keeps more than 300 recycled segments in
``pg_wal``, more than the 256 rounds the maintenance used to stop at (session 27's 1M run, with
``max_wal_size=8GB``, left one of two forgets at ``unreadable`` that way). The maintenance
switches past every one of them, in slices whose progress is kept in meta and that the
compactor's later rounds take up without a new forget; a replication slot that keeps the
WAL ends the pass at once, named in the note and the verification, instead of an endless
loop."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import efface
from efface.origin.postgres import maintenance, walpass

from pgserver import PgUnavailable, Server, start_primary, unavailable

T = "acme"
TEXT = "Zebulon Quaxworth keeps a vermilion kettle in the north annex"
OTHER = "Ottoline Brackwater collects copper weathervanes"
KEPT = 300
"""Segments (of 1MB) the server is made to keep ahead of its insert position: more than 256."""


@pytest.fixture(scope="module")
def small_wal() -> Iterator[Server]:
    """A primary of its own with 1MB segments that keeps about 320 of them after a checkpoint."""
    base = Path(tempfile.mkdtemp(prefix="efface-pg-wal-"))
    try:
        server = start_primary(
            base,
            settings={"max_wal_size": "400MB", "min_wal_size": "320MB", "wal_keep_size": "0"},
            initdb_args=("--wal-segsize=1",),
        )
    except (PgUnavailable, OSError) as e:
        unavailable(str(e))
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _fill(server: Server) -> int:
    """Write and switch past :data:`KEPT` segments, then checkpoint: PostgreSQL renames the
    old ones ahead for reuse (``min_wal_size``). Returns the segments ``pg_wal`` holds."""
    with server.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS filler(n int)")
        for n in range(KEPT):
            conn.execute("INSERT INTO filler VALUES (%s)", (n,))
            conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
    return len(maintenance.wal_files(str(server.datadir)))


def _open(server: Server, kek, cache):
    """A store in a database of its own on ``server``."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    with server.connect(name) as conn:
        conn.execute("CREATE EXTENSION vector")
    return efface.open(
        server.url(name),
        embedder="hashing",
        kek_file=kek,
        cache_dir=cache,
        data_dir=str(server.datadir),
        background=False,
    )


def _wal_hits(store, handle: str, data_dir: str) -> int:
    blob = store._origin.evidence(handle)["fingerprints"]
    found, _ = store._verifier._scan_fn(blob, [0])(maintenance.wal_files(data_dir), data_dir)
    return sum(sum(k.values()) for k in found.values())


def test_a_forget_is_erased_past_more_wal_segments_than_256_rounds_reach(small_wal, kek, tmp_path):
    held = _fill(small_wal)
    assert held > 256, f"the server keeps {held} segments: the test needs more than 256"
    with _open(small_wal, kek, tmp_path / "a") as s:
        # slices of a quarter second: the pass takes several compactor rounds, its progress in meta
        s._origin._maint.slice_s = 0.25
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        with small_wal.connect() as conn:
            conn.execute("CHECKPOINT")  # the WAL written out (synchronous_commit is off here)
        assert _wal_hits(s, receipt.handle, str(small_wal.datadir)) > 0, "the DELETE's WAL record holds the row"
        st = s.wait(receipt.handle, 300, until="erased")
        assert st.erased
        with s._origin._pool.connection() as conn:
            noted = maintenance.note(conn, "efface")
            assert walpass.load(conn, "efface") is None, "the pass ended"
        assert noted["wal"]["rounds"] > 256 and noted["wal"]["left"] == 0, noted
        assert noted["lacking"] == [], noted
        assert _wal_hits(s, receipt.handle, str(small_wal.datadir)) == 0
        v = s.verify(receipt.handle)
        assert v.level == "erased", [c for c in v.checks if c.outcome != "pass"]
        assert v.copies["postgres.primary.wal"].state == "erased"
        assert s.read("n2", tenant=T, purpose="support").text == OTHER


def test_a_pass_goes_on_in_slices_and_the_verification_says_how_far_it_is(small_wal, kek, tmp_path):
    _fill(small_wal)
    with _open(small_wal, kek, tmp_path / "b") as s:
        s._origin._maint.slice_s = 0.0  # one round a run
        s.write("n1", TEXT, tenant=T, subject="zq2", purpose="support")
        receipt = s.forget(tenant=T, subject="zq2")
        assert s._origin.maintain() is False, "one slice cannot pass 300 segments"
        with s._origin._pool.connection() as conn:
            first = walpass.load(conn, "efface")
        assert first is not None and first.rounds == 1 and first.remaining() > 256
        v = s.verify(receipt.handle)
        assert v.level == "unreadable"
        assert "switching the WAL past its retention" in v.copies["postgres.primary.wal"].reason
        assert s._origin.maintain() is False
        with s._origin._pool.connection() as conn:
            second = walpass.load(conn, "efface")
        assert second is not None and second.rounds == 2, "the second run went on from the first's progress"
        # an erasure while the pass goes on: the pass ends first (covering its own epoch), the
        # next run rewrites for the new one and begins a pass of its own
        s.write("n2", OTHER, tenant=T, subject="ob2", purpose="support")
        later = s.forget(tenant=T, subject="ob2")
        s._origin._maint.slice_s = 60.0
        assert s._origin.maintain() is False, "the run ended the pass under way, not the new erasure's"
        assert receipt.epoch <= s._origin.erased_epoch() < later.epoch
        # (not verified here: the later write, after this pass began, wrote a data_keys row
        # again whose name hash the first erasure had deleted; the next pass covers it)
        with s._origin._pool.connection() as conn:
            assert walpass.load(conn, "efface") is None
            assert maintenance.note(conn, "efface")["wal"]["left"] == 0
        assert s._origin.maintain() is True
        assert s._origin.erased_epoch() >= later.epoch
        for handle in (receipt.handle, later.handle):
            assert s.verify(handle).copies["postgres.primary.wal"].state == "erased"


def test_a_slot_that_keeps_the_wal_ends_the_pass_with_its_name(small_wal, kek, tmp_path):
    with small_wal.connect() as conn:
        conn.execute("SELECT pg_create_physical_replication_slot('efface_wal_held', true)")
    try:
        with _open(small_wal, kek, tmp_path / "c") as s:
            s.write("n1", TEXT, tenant=T, subject="zq3", purpose="support")
            receipt = s.forget(tenant=T, subject="zq3")
            assert s._origin.maintain() is True, "the pass ends at once: more switches cannot help"
            with s._origin._pool.connection() as conn:
                noted = maintenance.note(conn, "efface")
            assert noted["wal"]["rounds"] == 0, "no switch while the slot keeps every segment"
            assert any("'efface_wal_held' (inactive)" in why for why in noted["lacking"]), noted
            v = s.verify(receipt.handle)
            assert v.level == "unreadable"
            wal = v.copies["postgres.primary.wal"]
            assert wal.state == "present" and "efface_wal_held" in wal.reason, wal
            assert v.copies["postgres.replica.slot:efface_wal_held"].state == "cannot_verify"
            assert "a new pass over the WAL is owed" in wal.reason
            assert s._origin.erased_epoch() < receipt.epoch, "the compactor owes the erasure a new pass"
            assert s._origin.maintain() is True  # the slot still holds it: ends at once again
            with small_wal.connect() as conn:
                conn.execute("SELECT pg_drop_replication_slot('efface_wal_held')")
            # the slot gone, a verification finds the WAL still holding the erasure and owes it a
            # pass, which the compactor's rounds run without a new forget
            assert s.verify(receipt.handle).copies["postgres.primary.wal"].state == "present"
            assert s.wait(receipt.handle, 120, until="erased").erased
            with s._origin._pool.connection() as conn:
                noted = maintenance.note(conn, "efface")
            assert noted["retaken"] == receipt.epoch and noted["lacking"] == [], noted
            v = s.verify(receipt.handle)
            assert v.copies["postgres.primary.wal"].state == "erased", v.copies["postgres.primary.wal"]
            assert v.level == "erased", [c for c in v.checks if c.outcome != "pass"]
    finally:
        with small_wal.connect() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                ("efface_wal_held",),
            )
