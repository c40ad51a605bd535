"""Several efface processes on one PostgreSQL database (issue #34 item 4): the locks they share,
and the change log's pruning, which none may run twice at once nor undo for another.

* ``shared_lock`` (:class:`efface.origin.base.SharedByProcesses`) is a PostgreSQL advisory
  lock: one holder at a time across processes, and a process killed with SIGKILL lets go of it;
* the compactor's shared physical work runs under ``maintenance``: skipped (and owed to the
  next round) while another process holds it;
* pruning never drops what another live process still replays, never says it pruned further
  than it did, writes no meta key another process also writes, and a dead process's place
  stops holding the log back after the bound;
* a process whose place went stale while the log was pruned past its files rebuilds them
  (regressions: its vector index kept an erased vector and missed a write; its word index
  missed a write when the log was pruned between its check and its read).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import efface
from efface.erasure import changelog
from efface.origin.base import CHANGES_PRUNED
from efface.origin.capabilities import SharedByProcesses
from efface.origin.postgres import locks
from efface.origin.postgres import origin as pg_origin

T = "acme"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _log_epochs(pg_db) -> list[int]:
    with pg_db.connect() as conn:
        return [r[0] for r in conn.execute("SELECT DISTINCT epoch FROM efface.changes ORDER BY 1")]


def _meta(pg_db, key: str) -> str | None:
    with pg_db.connect() as conn:
        row = conn.execute("SELECT v FROM efface.meta WHERE k = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def _age(pg_db, instance: str) -> None:
    """Make a reader's place older than the bound, as if its process had gone silent long ago."""
    with pg_db.connect() as conn:
        conn.execute(
            "UPDATE efface.change_readers SET seen_at = seen_at - %s WHERE reader = %s",
            (pg_origin.READER_TTL_S + 60, instance),
        )


def test_a_shared_lock_has_one_holder_across_stores(pg_db, kek, tmp_path):
    a, b = _open(pg_db, kek, tmp_path / "a"), _open(pg_db, kek, tmp_path / "b")
    try:
        assert isinstance(a._origin, SharedByProcesses) and a._origin.instance != b._origin.instance
        with a._origin.shared_lock("changes") as mine:
            assert mine
            with b._origin.shared_lock("changes") as theirs:
                assert not theirs  # not waited for: the other holds it
            with b._origin.shared_lock("maintenance") as other:
                assert other  # another name is another lock
        with b._origin.shared_lock("changes") as theirs:
            assert theirs  # let go at the end of the block
        with pytest.raises(ValueError, match="no shared lock"), a._origin.shared_lock("vacuum"):
            pass
    finally:
        a.close()
        b.close()


HOLDER = textwrap.dedent(
    """
    import sys, efface
    store = efface.open(sys.argv[1], embedder="hashing", background=False, kek_file=sys.argv[2], cache_dir=sys.argv[3])
    with store._origin.shared_lock("maintenance", wait=True) as held:
        print("held" if held else "not held", flush=True)
        sys.stdin.read()  # until killed
    """
)


def test_a_process_killed_holding_a_lock_lets_go_of_it(pg_db, kek, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_db.url, str(kek), str(tmp_path / "holder")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        with _open(pg_db, kek, tmp_path / "a") as a:
            with a._origin.shared_lock("maintenance") as mine:
                assert not mine
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # The server ends the dead client's session when it sees the socket close; wait for it.
            taken = False
            for _ in range(300):
                with a._origin.shared_lock("maintenance") as held:
                    taken = held
                if taken:
                    break
                time.sleep(0.1)
            assert taken, "the lock of a process killed with SIGKILL was never let go"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Recorder:
    """Stands in for an origin's physical side in this unit test: records what the compactor
    asks of it (the PostgreSQL origin has none yet; the maintenance that removes erased bytes
    comes with the byte ladder)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def rebuild_indexes(self) -> None:
        self.calls.append("rebuild")

    def checkpoint(self) -> bool:
        self.calls.append("checkpoint")
        return True

    def merge_segments(self, *args, **kwargs) -> bool:
        self.calls.append("merge")
        return True


def test_the_compactors_physical_work_runs_under_the_maintenance_lock(pg_db, kek, tmp_path):
    a, b = _open(pg_db, kek, tmp_path / "a"), _open(pg_db, kek, tmp_path / "b")
    try:
        physical = Recorder()
        a._origin.physical = physical  # type: ignore[misc]
        a.write("n1", "a note about tea", tenant=T, subject="s", purpose="p")
        with b._origin.shared_lock("maintenance") as theirs:
            assert theirs
            a._compactor.run(persist=True)
            assert physical.calls == []  # another process does it now: skipped, and owed
            assert a._compactor._checkpoint_owed
        a._compactor.run(persist=True)
        assert physical.calls == ["rebuild", "checkpoint"]
        assert not a._compactor._checkpoint_owed
    finally:
        a._origin.physical = None  # type: ignore[misc]
        a.close()
        b.close()


def test_pruning_keeps_what_another_live_store_replays_and_says_only_what_it_did(pg_db, kek, tmp_path):
    a = _open(pg_db, kek, tmp_path / "a")
    try:
        for i in range(3):
            a.write(f"n{i}", f"note {i} about quill{i}", tenant=T, subject="zq", purpose="support")
        b = _open(pg_db, kek, tmp_path / "b")  # replays from epoch 3 on
        try:
            for i in range(3, 6):
                a.write(f"n{i}", f"note {i} about quill{i}", tenant=T, subject="zq", purpose="support")
            a.compact()
            assert _log_epochs(pg_db) == [4, 5, 6]  # b still replays them
            # The pruned floor is what was pruned (b's place), not what a alone needs (6): a
            # floor said too high would make every other process rebuild its files for nothing.
            assert _meta(pg_db, CHANGES_PRUNED) == "3"
            with pg_db.connect() as conn:
                shared = conn.execute("SELECT k FROM efface.meta WHERE k LIKE 'changes.consumer.%'").fetchall()
            assert shared == []  # each process's place is its own row, never one meta key they all write
            b.compact()
            a.compact()
            assert _log_epochs(pg_db) == []
        finally:
            b.close()
    finally:
        a.close()


def test_a_dead_process_holds_the_log_back_only_within_the_bound(pg_db, kek, tmp_path):
    a = _open(pg_db, kek, tmp_path / "a")
    try:
        a.write("n0", "note about quill", tenant=T, subject="zq", purpose="support")
        code = (
            "import sys, efface\n"
            "efface.open(sys.argv[1], embedder='hashing', background=False, kek_file=sys.argv[2],"
            " cache_dir=sys.argv[3])\nprint('open', flush=True)\nsys.stdin.read()\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, pg_db.url, str(kek), str(tmp_path / "dead")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"open"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with pg_db.connect() as conn:
            (dead,) = [
                r[0]
                for r in conn.execute(
                    "SELECT reader FROM efface.change_readers WHERE reader <> %s", (a._origin.instance,)
                )
            ]
        for i in range(1, 4):
            a.write(f"n{i}", f"note {i} about quill", tenant=T, subject="zq", purpose="support")
        a.compact()
        assert _log_epochs(pg_db) == [2, 3, 4]  # the dead one registered at epoch 1: kept for it
        _age(pg_db, dead)
        a.compact()
        assert _log_epochs(pg_db) == []  # silent past the bound: it holds nothing back
        with pg_db.connect() as conn:
            readers = [r[0] for r in conn.execute("SELECT reader FROM efface.change_readers")]
        assert readers == [a._origin.instance]
    finally:
        a.close()


def test_a_live_process_says_it_is_alive_well_within_the_bound():
    """Each compactor round calls ``alive``; on a shared origin it registers again once
    ``SHARED_REFRESH_S`` has passed, a tenth of the bound a silent reader is dropped after."""
    assert changelog.SHARED_REFRESH_S * 5 <= pg_origin.READER_TTL_S

    class Shared:
        instance = "me"

        def __init__(self) -> None:
            self.pruned: list[int] = []

        def shared_lock(self, name, wait=False):  # pragma: no cover - not called here
            raise AssertionError

        def meta_get(self, key):
            return None

        def prune_changes(self, upto):
            self.pruned.append(upto)

    now = [1000.0]
    shared = Shared()
    log = changelog.ChangeLog(shared, "ann", clock=lambda: now[0])  # type: ignore[arg-type]
    log.alive(5)
    log.alive(6)
    assert shared.pruned == [5]  # said once; not again at once
    now[0] += changelog.SHARED_REFRESH_S + 1
    log.alive(7)
    assert shared.pruned == [5, 7]


def test_a_store_whose_place_went_stale_serves_the_new_and_never_the_erased(pg_db, kek, tmp_path):
    """A store that had not said it was alive for longer than the bound (no compactor running)
    lost its place; another pruned the log past it. (With per-process ANN files its vector
    index then replayed a log with a hole, kept an erased record's vector and missed a new one;
    vectors are now searched in the database, and its word index rebuilds when the log was
    pruned past it.) Its recall finds the other store's new record and never the erased one."""
    a, b = _open(pg_db, kek, tmp_path / "a"), _open(pg_db, kek, tmp_path / "b")
    try:
        a.write("gone", "a note about amber tea", tenant=T, subject="alice", purpose="p")
        b.recall("amber tea", tenant=T, purpose="p")  # b's vector index takes it in
        tid = b._tenant(T)
        gone = next(rid for rid, _ in b._origin.records_of_tenant(tid))
        assert gone in {rid for rid, _ in b._origin.records_of_tenant(tid)}
        _age(pg_db, b._origin.instance)
        a.forget(tenant=T, subject="alice")
        a.write("new", "a note about birch bark", tenant=T, subject="bob", purpose="p")
        a.compact()
        assert _log_epochs(pg_db) == []  # pruned past b
        b.compact()  # its next absorption (a background compactor's round, or this)
        hits = b.recall("birch bark", tenant=T, purpose="p")
        assert [h.key for h in hits][:1] == ["new"] and "ann" in hits[0].via
        assert "gone" not in {h.key for h in b.recall("amber tea", tenant=T, purpose="p")}
        assert b._ann.size(tid) == 1
    finally:
        a.close()
        b.close()


def test_the_word_index_sees_a_prune_that_lands_between_its_check_and_its_read(pg_db, kek, tmp_path):
    """Regression: the word index checked how far the log was pruned, then read it; a prune
    by another process in between left it with a hole (a write by the other process never
    found by its words). It now checks after reading, and rebuilds."""
    a, b = _open(pg_db, kek, tmp_path / "a"), _open(pg_db, kek, tmp_path / "b")
    try:
        a.write("n1", "a note about amber", tenant=T, subject="s", purpose="p")
        b.recall("amber", tenant=T, purpose="p")
        a.write("n2", "a note about juniper", tenant=T, subject="s", purpose="p")
        origin = b._origin
        read = origin.changes_since

        def pruned_meanwhile(*args, **kwargs):
            origin.changes_since = read  # once
            with pg_db.connect() as conn:  # another process prunes everything, right now
                conn.execute("DELETE FROM efface.changes")
                conn.execute(
                    "INSERT INTO efface.meta(k, v) VALUES (%s, (SELECT epoch FROM efface.epoch_counter)::text)"
                    " ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                    (CHANGES_PRUNED,),
                )
            return read(*args, **kwargs)

        origin.changes_since = pruned_meanwhile
        origin.text.refresh()
        hits = b.recall("juniper", tenant=T, purpose="p")
        assert [h.key for h in hits][:1] == ["n2"] and "fts" in hits[0].via
    finally:
        a.close()
        b.close()


def test_lock_keys_are_efface_s_and_distinct():
    keys = list(locks.LOCKS.values())
    assert len(set(keys)) == len(keys)
    assert all(k >> 32 == 0x65666661 for k in keys)
