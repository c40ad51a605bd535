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
            # the slot still keeps it: no pass is owed (it would end at once, its end would clear
            # what is owed and the next verification owe it again, round after round)
            assert "efface_wal_held" in wal.reason and "no new pass is owed" in wal.reason, wal
            assert "a new pass over the WAL is owed" not in wal.reason
            assert s._origin.erased_epoch_for(receipt.epoch) >= receipt.epoch
            assert not s._origin.owes()
            with s._origin._pool.connection() as conn:
                assert walpass.owed(conn, "efface") == []
            assert s.verify(receipt.handle).copies["postgres.primary.wal"].state == "present"
            assert not s._origin.owes(), "a second verification owes nothing either"
            with small_wal.connect() as conn:
                conn.execute("SELECT pg_drop_replication_slot('efface_wal_held')")
            # the slot gone, a verification finds the WAL still holding the erasure and owes it a
            # pass, which the compactor's rounds run without a new forget
            wal = s.verify(receipt.handle).copies["postgres.primary.wal"]
            assert wal.state == "present" and "a new pass over the WAL is owed" in wal.reason, wal
            assert s._origin.erased_epoch_for(receipt.epoch) < receipt.epoch, "the compactor owes it a new pass"
            assert s._origin.owes()
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


def _name(server: Server, n: int) -> str:
    """The file name of segment number ``n`` on ``server``'s timeline (1MB segments)."""
    per = 2**32 // 2**20
    return f"{1:08X}{n // per:08X}{n % per:08X}"


def _insert(s) -> int:
    with s._origin._pool.connection() as conn:
        return walpass._insert_segment(conn, walpass._segsize(conn))


def test_a_pass_owed_to_one_erasure_leaves_the_later_ones_erased(small_wal, kek, tmp_path):
    """A pass owed to the erasure a verification found in the WAL lowers that erasure's status
    alone: later receipts, proven erased, stay erased and raise no alarm; the compactor runs the
    pass and the owed erasure is erased again."""
    with _open(small_wal, kek, tmp_path / "d") as s:
        s.write("n1", TEXT, tenant=T, subject="zq4", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob4", purpose="support")
        first = s.forget(tenant=T, subject="zq4")
        later = s.forget(tenant=T, subject="ob4")
        assert s.wait(later.handle, 120, until="erased").erased
        assert s.verify(later.handle).level == "erased"
        # the first erasure found in a segment the server kept for reuse (numbered past the one
        # written now, so it holds old bytes): what a verification after a held pass finds
        ahead = _name(small_wal, _insert(s) + 3)
        with s._origin._pool.connection() as conn:
            why = walpass.owe(conn, "efface", str(small_wal.datadir), first.epoch, [f"pg_wal/{ahead}"])
            assert walpass.owed(conn, "efface") == [first.epoch]
        assert why == "a new pass over the WAL is owed to the maintenance"
        assert s._origin.erased_epoch() >= later.epoch, "the epoch the maintenance covered stays"
        st = s.status(later.handle)
        assert st.erased and st.level == "erased" and st.alarms == (), st
        assert not s.status(first.handle).erased, "the erasure owed a pass waits for it"
        assert s._origin.owes()
        assert s.wait(first.handle, 120, until="erased").erased
        with s._origin._pool.connection() as conn:
            noted = maintenance.note(conn, "efface")
            assert walpass.owed(conn, "efface") == []
        assert noted["retaken"] == first.epoch and noted["wal"]["left"] == 0, noted
        assert s.status(later.handle).erased and not s._origin.owes()


def test_a_find_no_pass_can_help_owes_none(small_wal, kek, tmp_path):
    """Bounded: the same find is not owed a pass again until new WAL is written past it; a find
    only in WAL written after the last pass began (a later write put the bytes back) and one
    only in a promotion's .partial segments owe none."""
    with _open(small_wal, kek, tmp_path / "e") as s:
        s.write("n1", TEXT, tenant=T, subject="zq5", purpose="support")
        receipt = s.forget(tenant=T, subject="zq5")
        assert s.wait(receipt.handle, 120, until="erased").erased
        data_dir = str(small_wal.datadir)
        found = [f"pg_wal/{_name(small_wal, _insert(s) + 1000)}"]  # far ahead: a recycled name
        with s._origin._pool.connection() as conn:
            assert walpass.owe(conn, "efface", data_dir, receipt.epoch, found).startswith("a new pass")
        assert s._origin.maintain() is True  # the owed pass, run
        with s._origin._pool.connection() as conn:
            assert walpass.owed(conn, "efface") == []
            start = maintenance.note(conn, "efface")["wal"]["start"]
            again = walpass.owe(conn, "efface", data_dir, receipt.epoch, found)
            assert "already ran" in again and walpass.owed(conn, "efface") == [], again
            # written since the last pass began: not the erasure's old records
            later = walpass.owe(conn, "efface", data_dir, receipt.epoch, [f"pg_wal/{_name(small_wal, start + 1)}"])
            assert "a later write put these bytes there again" in later, later
            partial = walpass.owe(conn, "efface", data_dir, receipt.epoch, ["pg_wal/" + found[0][7:] + ".partial"])
            assert ".partial" in partial and walpass.owed(conn, "efface") == [], partial
            conn.execute(
                "INSERT INTO efface.meta(k, v) VALUES ('test.tick', '1') ON CONFLICT (k) DO UPDATE SET v = '2'"
            )
            conn.execute("SELECT pg_switch_wal()")
            conn.execute(
                "INSERT INTO efface.meta(k, v) VALUES ('test.tick', '3') ON CONFLICT (k) DO UPDATE SET v = '4'"
            )
            # new WAL written past the last pass's end: the same find is owed once more
            assert walpass.owe(conn, "efface", data_dir, receipt.epoch, found).startswith("a new pass")
            assert walpass.owed(conn, "efface") == [receipt.epoch]


def test_a_retake_without_the_rights_keeps_what_the_last_note_said(small_wal, kek, tmp_path, monkeypatch):
    """A run owed a pass by a role that cannot switch the WAL keeps the last note's reasons (a
    slot that held the pass) and its own, and the pass stays owed (for that erasure alone, and
    not retried by the compactor) until a run with the rights runs it."""
    with small_wal.connect() as conn:
        conn.execute("SELECT pg_create_physical_replication_slot('efface_wal_held2', true)")
    try:
        with _open(small_wal, kek, tmp_path / "f") as s:
            s.write("n1", TEXT, tenant=T, subject="zq6", purpose="support")
            receipt = s.forget(tenant=T, subject="zq6")
            assert s._origin.maintain() is True
            with s._origin._pool.connection() as conn:
                held = maintenance.note(conn, "efface")["lacking"]
            assert any("efface_wal_held2" in x for x in held), held
            with small_wal.connect() as conn:
                conn.execute("SELECT pg_drop_replication_slot('efface_wal_held2')")
            assert "a new pass over the WAL is owed" in s.verify(receipt.handle).copies["postgres.primary.wal"].reason
            real = maintenance.rights

            def without(conn, data_dir, schema):
                r = real(conn, data_dir, schema)
                return maintenance.Rights(False, False, r.data_dir, r.db_dir, ("no pg_checkpoint (test)",))

            monkeypatch.setattr(maintenance, "rights", without)
            s._origin.maintain()
            with s._origin._pool.connection() as conn:
                noted = maintenance.note(conn, "efface")
                assert walpass.owed(conn, "efface") == [receipt.epoch], "not run: still owed"
            assert noted["lacking"] == [*held, "no pg_checkpoint (test)"], noted
            assert "wal" not in noted
            assert not s._origin.owes(), "blocked: the compactor does not retry it round after round"
            assert s._origin.erased_epoch_for(receipt.epoch) < receipt.epoch
            monkeypatch.setattr(maintenance, "rights", real)
            s.write("n2", OTHER, tenant=T, subject="ob6", purpose="support")
            later = s.forget(tenant=T, subject="ob6")
            assert s.wait(later.handle, 120, until="erased").erased
            assert s.status(receipt.handle).erased, "the next run with the rights ran the pass owed"
    finally:
        with small_wal.connect() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                ("efface_wal_held2",),
            )


def test_a_promotions_partial_segment_is_not_waited_for(small_wal, kek, tmp_path):
    """A ``.partial`` segment (a promotion's) is never written over: the pass leaves it out (the
    note says so) instead of waiting for it, round after round, and a verification that finds an
    erasure only there owes no pass (test above). Here it bears a number ahead of the insert
    position, where the server keeps it (measured: one behind the checkpoint's cutoff is removed
    when nothing archives it)."""
    wal = Path(small_wal.datadir) / "pg_wal"
    some = sorted(p for p in wal.iterdir() if walpass.SEGMENT.match(p.name))[0]
    with _open(small_wal, kek, tmp_path / "g") as s:
        partial = wal / f"{_name(small_wal, _insert(s) + 1000).replace('00000001', '00000009', 1)}.partial"
        shutil.copy2(some, partial)
        shutil.chown(partial, some.owner(), some.group())
        try:
            s.write("n1", TEXT, tenant=T, subject="zq7", purpose="support")
            receipt = s.forget(tenant=T, subject="zq7")
            assert s.wait(receipt.handle, 120, until="erased").erased
            with s._origin._pool.connection() as conn:
                noted = maintenance.note(conn, "efface")
            assert noted["lacking"] == [] and noted["wal"]["left"] == 0, noted
            assert noted["wal"]["rounds"] < 1000, "the pass did not wait for the .partial segment"
            assert ".partial" in noted.get("wal_partial", ""), noted
            assert partial.exists()
        finally:
            partial.unlink(missing_ok=True)


def test_a_pass_owed_while_a_run_settles_is_never_lost(small_wal, kek, tmp_path):
    """A verification owes a pass (:func:`walpass.owe`, under its lock) while a maintenance run
    settles what was owed in its own transaction: the run waits for that lock, so it reads the
    new entry too (and records it covered) instead of deleting it unread with the rest."""
    import threading

    with _open(small_wal, kek, tmp_path / "r") as s:
        pool = s._origin._pool
        with pool.connection() as conn:
            walpass._put(conn, "efface", walpass.OWED, {5: {"find": ["a"]}})
        with pool.connection() as owing, pool.connection() as running:
            owing.execute("BEGIN")
            walpass._lock_owed(owing, "efface")  # a verification owing epoch 9, not committed yet
            walpass._put(owing, "efface", walpass.OWED, {5: {"find": ["a"]}, 9: {"find": ["b"]}})
            done = threading.Event()

            def run() -> None:
                with running.transaction():
                    walpass.settle(running, "efface", passed=True)
                done.set()

            t = threading.Thread(target=run)
            t.start()
            assert not done.wait(1.0), "settle went on while a pass was being owed"
            owing.execute("COMMIT")
            t.join(30)
            assert done.is_set()
        with pool.connection() as conn:
            assert walpass.owed(conn, "efface") == []
            assert sorted(walpass._json(conn, "efface", walpass.RETAKEN)) == [5, 9], "the pass owed meanwhile was lost"
