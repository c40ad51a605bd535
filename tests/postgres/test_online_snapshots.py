"""What a snapshot sees across the online rewrite's swap (src/efface/origin/postgres/online.py).

The swap writes the rows changed since the last catch-up in its own transaction. A
``REPEATABLE READ`` snapshot taken before that transaction committed, whose first read of
``records`` comes after it, reads the new table without them: a record acknowledged before
the snapshot began is missing (the first two tests show it on PostgreSQL with a reader as
efface's was: ``BEGIN``, then a statement not touching ``records`` takes the snapshot). Every
snapshot of efface now locks ``records`` before its snapshot is taken
(:func:`online.reader_lock`): one taken before the swap's lock holds the swap off until it
ends; one begun while the swap holds its lock waits for the swap's commit, then sees it all.
The tests stop the rewrite at its steps by wrapping its functions (events, never timings),
for both ways a snapshot begins (its own round trip; deferred to its first read, recall's).

Also: what the copy is given is the catalog's (a column and an index a migration adds, a
generated column), and a change of ``records`` during the rewrite makes it give up for
``VACUUM FULL``, never lose a column."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

import efface
from efface.origin.postgres import maintenance, online

from .test_ladder import OTHER, TEXT, T
from .test_online_rewrite import GUARD, Pause, _leftovers, _maintain_in_thread, _shape

COUNT = "SELECT count(*) FROM efface.records"


def _open(url, kek, cache):
    return efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False)


class Swap:
    """Stops the rewrite twice: ``ready`` after its wait for older snapshots, holding nothing
    (the test writes a late row, begins a snapshot), until ``go``; ``locked`` inside the
    swap's transaction, its ``ACCESS EXCLUSIVE`` locks held, before its last catch-up, until
    ``go_on``."""

    def __init__(self, monkeypatch):
        self.ready, self.go = threading.Event(), threading.Event()
        self.locked, self.go_on = threading.Event(), threading.Event()
        wait, catch_up = online._no_older_snapshots, online._catch_up

        def waited(*args):
            wait(*args)
            self.ready.set()
            assert self.go.wait(GUARD), "the test never let the swap go"

        def caught(conn, s, xid=None, **kw):
            if conn.info.transaction_status != 0:  # inside the swap's transaction
                self.locked.set()
                assert self.go_on.wait(GUARD), "the test never let the swap commit"
            return catch_up(conn, s, xid, **kw)

        monkeypatch.setattr(online, "_no_older_snapshots", waited)
        monkeypatch.setattr(online, "_catch_up", caught)


def _setup(a):
    for i in range(5):
        a.write(f"k{i}", f"{OTHER} {i}", tenant=T, subject="ob", purpose="support")
    a.write("z", TEXT, tenant=T, subject="zq", purpose="support")
    a.forget(tenant=T, subject="zq")  # an erasure for the maintenance to cover


def _late(b, pg_db) -> int:
    """A record written (acknowledged) after the last catch-up: the swap writes its copy."""
    b.write("late", "acknowledged before the snapshot began", tenant=T, subject="ob", purpose="support")
    with pg_db.connect() as conn:
        return conn.execute("SELECT epoch FROM efface.epoch_counter").fetchone()[0]


def _lock_waiter(pg_db) -> None:
    """Until a session waits for a lock on ``records`` (a failure guard bounds it)."""
    deadline = time.monotonic() + GUARD
    with pg_db.connect() as conn:
        while not conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND mode = 'AccessShareLock'"
            " AND relation = 'efface.records'::regclass)"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "no reader ever waited for the swap's lock"
            time.sleep(0.01)


@contextlib.contextmanager
def _at_the_swap(pg_db, kek, tmp_path, monkeypatch):
    """Two stores on one database: ``a``'s maintenance (in a thread, ``t``, its outcome in
    ``out``) paused before its swap (``swap``), after ``b`` wrote a late row acknowledged at
    epoch ``acked``. Yields ``(a, b, swap, out, t, acked)``."""
    with _open(pg_db.url, kek, tmp_path / "a") as a, _open(pg_db.url, kek, tmp_path / "b") as b:
        _setup(a)
        swap, out = Swap(monkeypatch), {}
        t = _maintain_in_thread(a, out)
        assert swap.ready.wait(GUARD), out.get("error")
        yield a, b, swap, out, t, _late(b, pg_db)


@pytest.mark.parametrize("when", ["before_the_lock", "inside_the_swap"])
def test_a_snapshot_whose_first_read_of_records_follows_the_swap_misses_a_late_row(
    pg_db, kek, tmp_path, monkeypatch, when
):
    """The gap, on PostgreSQL, for a reader that takes its snapshot without locking
    ``records`` first (efface's before :func:`online.reader_lock`)."""
    with _at_the_swap(pg_db, kek, tmp_path, monkeypatch) as (_a, b, swap, out, t, acked):
        with pg_db.connect() as reader:
            if when == "inside_the_swap":
                swap.go.set()
                assert swap.locked.wait(GUARD), out.get("error")
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            epoch = reader.execute("SELECT epoch FROM efface.epoch_counter").fetchone()[0]  # the snapshot
            assert epoch >= acked  # it holds the late write's epoch
            swap.go.set()
            swap.go_on.set()
            t.join(GUARD)
            assert "error" not in out and "online" in out["report"], repr(out)
            assert out["report"]["online"]["records"]["late_rows"] == 1
            # the new table, read in the old snapshot: the late row is the swap's, unseen
            assert reader.execute(COUNT).fetchone()[0] == 5
            reader.execute("COMMIT")
            assert reader.execute(COUNT).fetchone()[0] == 6  # a new snapshot sees it
        assert b.read("late", tenant=T, purpose="support") is not None


def _read_in_snapshot(b, deferred: bool, out: dict) -> None:
    """b's snapshot, begun its own way (a round trip of its own, or with its first read):
    the records it reads, and its epoch."""
    o = b._origin
    try:
        with o.snapshot_deferred() if deferred else o.snapshot():
            out["count"] = o._snapshot_rows(COUNT + " WHERE id > %s", (0,))[0][0]
            out["epoch"] = o.snapshot_epoch()
            late = b.read("late", tenant=T, purpose="support")
            out["late"] = None if late is None else late.text
    except BaseException as e:
        out["error"] = e


@pytest.mark.parametrize("deferred", [False, True], ids=["snapshot", "deferred"])
def test_a_snapshot_begun_while_the_swap_holds_its_lock_waits_for_it_and_sees_the_late_row(
    pg_db, kek, tmp_path, monkeypatch, deferred
):
    with _at_the_swap(pg_db, kek, tmp_path, monkeypatch) as (_a, b, swap, out, t, acked):
        seen: dict = {}
        swap.go.set()
        assert swap.locked.wait(GUARD), out.get("error")
        r = threading.Thread(target=_read_in_snapshot, args=(b, deferred, seen), daemon=True)
        r.start()
        _lock_waiter(pg_db)  # b's snapshot waits at its lock on records, its snapshot not taken
        assert r.is_alive() and not seen
        swap.go_on.set()
        r.join(GUARD)
        t.join(GUARD)
        assert "error" not in seen, seen.get("error")
        assert "error" not in out and out["report"]["online"]["records"]["late_rows"] == 1, out
        assert seen["epoch"] >= acked
        assert seen["count"] == 6 and seen["late"] == "acknowledged before the snapshot began"


@pytest.mark.parametrize("first", ["epoch", "records", "deferred"])
def test_a_snapshot_begun_before_the_swap_holds_it_off_and_reads_the_old_table_whole(
    pg_db, kek, tmp_path, monkeypatch, first
):
    """``first``: what the snapshot reads before the swap is let go: only its epoch (its
    first read of ``records`` comes after: the gap, were ``records`` not locked first), a
    count of ``records``, or a count that begins it (a deferred snapshot)."""
    with _at_the_swap(pg_db, kek, tmp_path, monkeypatch) as (_a, b, swap, out, t, acked):
        o = b._origin
        with o.snapshot_deferred() if first == "deferred" else o.snapshot():
            counts = [] if first == "epoch" else [o._snapshot_rows(COUNT + " WHERE id > %s", (0,))[0][0]]
            assert o.snapshot_epoch() >= acked
            swap.go.set()
            _swap_waits_or_locked(pg_db, swap)
            counts.append(o._snapshot_rows(COUNT + " WHERE id > %s", (0,))[0][0])
            late = b.read("late", tenant=T, purpose="support")
            assert not swap.locked.is_set() and t.is_alive()  # the swap waits for this snapshot
            assert set(counts) == {6} and late is not None
        swap.go_on.set()
        t.join(GUARD)
        assert "error" not in out and "online" in out["report"], out
        assert out["report"]["online"]["records"]["late_rows"] == 1
        assert b.read("late", tenant=T, purpose="support") is not None
        with pg_db.connect() as conn:
            assert conn.execute(COUNT).fetchone()[0] == 6


def _swap_waits_or_locked(pg_db, swap: Swap) -> None:
    """Until the swap waits for its ``ACCESS EXCLUSIVE`` lock on ``records`` or holds it (a
    guard bounds it; each of its attempts lasts 250 ms, so a waiter is seen within one)."""
    deadline = time.monotonic() + GUARD
    with pg_db.connect() as conn:
        while (
            not swap.locked.is_set()
            and not conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'"
                " AND relation = 'efface.records'::regclass)"
            ).fetchone()[0]
        ):
            assert time.monotonic() < deadline, "the swap neither waited nor took its lock"
            time.sleep(0.005)


def test_a_column_index_and_generated_column_added_to_records_are_carried_by_the_rewrite(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        with pg_db.connect() as conn:  # as a migration would
            conn.execute("ALTER TABLE efface.records ADD COLUMN digest bytea")
            conn.execute("CREATE INDEX records_digest ON efface.records(digest)")
            conn.execute(
                "ALTER TABLE efface.records ADD COLUMN size int GENERATED ALWAYS AS (octet_length(text)) STORED"
            )
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        with pg_db.connect() as conn:
            conn.execute("UPDATE efface.records SET digest = '\\xabcd'")
            before = _shape(conn)
            rows = conn.execute("SELECT id, digest, size FROM efface.records ORDER BY id").fetchall()
        receipt = s.forget(tenant=T, subject="zq")
        assert s.wait(receipt.handle, 60, until="erased").erased
        s.write("n3", "written after the swap", tenant=T, subject="ob", purpose="support")
        with pg_db.connect() as conn:
            noted = maintenance.note(conn, "efface")
            assert set(noted["online"]) == {"records", "claims"} and "records_offline" not in noted, noted
            assert _shape(conn) == before
            assert (
                conn.execute(
                    "SELECT id, digest, size FROM efface.records WHERE id <= %s ORDER BY id", (rows[-1][0],)
                ).fetchall()
                == rows[1:]
            )
            size = conn.execute(
                "SELECT size, octet_length(text) FROM efface.records ORDER BY id DESC LIMIT 1"
            ).fetchone()
            assert size[0] is not None and size[0] == size[1]  # still generated
            # analysed before the swap: statements planned on the new table have statistics
            assert (
                conn.execute(
                    "SELECT count(*) FROM pg_stats WHERE schemaname = 'efface' AND tablename = 'records'"
                    " AND attname = 'tenant'"
                ).fetchone()[0]
                == 1
            )
        assert s.verify(receipt.handle).level == "erased"


def test_records_changed_during_the_rewrite_make_it_give_up_for_vacuum_full(pg_db, kek, tmp_path, monkeypatch):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        s.forget(tenant=T, subject="zq")
        pause, out = Pause(monkeypatch), {}
        t = _maintain_in_thread(s, out)
        assert pause.reached.wait(GUARD), out.get("error")
        with pg_db.connect() as conn:  # a migration of a newer server, during the copy
            conn.execute("ALTER TABLE efface.records ADD COLUMN digest bytea")
            conn.execute("UPDATE efface.records SET digest = '\\x01'")
        pause.release.set()
        t.join(GUARD)
        assert "error" not in out, out.get("error")
        assert list(out["report"]["online"]) == ["claims"]
        assert out["report"]["records_offline"].startswith("the online rewrite gave up: records changed shape")
        with pg_db.connect() as conn:
            assert _leftovers(conn) == []
            assert conn.execute("SELECT digest FROM efface.records").fetchall() == [(b"\x01",)]
        assert s.read("n2", tenant=T, purpose="support").text == OTHER


def test_claims_written_and_erased_during_their_copy_are_as_committed_after_the_swap(pg_db, kek, tmp_path, monkeypatch):
    """``claims`` is rewritten online too: a record written (its claim) and a subject forgotten
    (its claims deleted) while ``claims`` is copied are as committed after its swap."""
    with _open(pg_db.url, kek, tmp_path / "a") as a, _open(pg_db.url, kek, tmp_path / "b") as b:
        _setup(a)
        a.write("zz", TEXT, tenant=T, subject="zr", purpose="support")
        reached, release, real = threading.Event(), threading.Event(), online._catch_up

        def paused(conn, s, xid=None, **kw):
            if kw.get("table") == "claims" and not reached.is_set():
                reached.set()
                assert release.wait(GUARD), "the test never released the rewrite"
            return real(conn, s, xid, **kw)

        monkeypatch.setattr(online, "_catch_up", paused)
        out: dict = {}
        t = _maintain_in_thread(a, out)
        assert reached.wait(GUARD), out.get("error")
        with pg_db.connect() as conn:  # the copy of claims holds zr's claim
            assert conn.execute("SELECT count(*) FROM efface.claims_online").fetchone()[0] == 6
        b.write("during", "written while claims is copied", tenant=T, subject="ob", purpose="support")
        b.forget(tenant=T, subject="zr")
        release.set()
        t.join(GUARD)
        assert "error" not in out, out.get("error")
        assert set(out["report"]["online"]) == {"records", "claims"}, out["report"]
        assert out["report"]["online"]["claims"]["caught_up"] >= 2
        assert b.read("during", tenant=T, purpose="support").text == "written while claims is copied"
        assert b.read("zz", tenant=T, purpose="support") is None
        with pg_db.connect() as conn:
            assert conn.execute("SELECT count(*) FROM efface.claims").fetchone()[0] == 6
            assert (
                conn.execute(
                    "SELECT count(*) FROM pg_constraint WHERE conrelid = 'efface.claims'::regclass AND contype = 'f'"
                    " AND convalidated"
                ).fetchone()[0]
                == 1
            )
            assert _leftovers(conn) == []
            assert conn.execute("SELECT to_regclass('efface.claims_online')").fetchone()[0] is None


def test_a_statement_outside_a_snapshot_that_waits_for_the_swap_sees_the_late_row(pg_db, kek, tmp_path, monkeypatch):
    """An autocommit statement (``READ COMMITTED``: its snapshot taken after its locks) whose
    lock wait ends with the swap's commit reads the new table whole."""
    with _at_the_swap(pg_db, kek, tmp_path, monkeypatch) as (_a, _b, swap, out, t, _acked):
        seen: dict = {}
        swap.go.set()
        assert swap.locked.wait(GUARD), out.get("error")

        def count():
            with pg_db.connect() as conn:
                seen["count"] = conn.execute(COUNT).fetchone()[0]

        r = threading.Thread(target=count, daemon=True)
        r.start()
        _lock_waiter(pg_db)
        swap.go_on.set()
        r.join(GUARD)
        t.join(GUARD)
        assert "error" not in out and out["report"]["online"]["records"]["late_rows"] == 1, out
        assert seen["count"] == 6
