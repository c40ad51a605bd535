"""The online rewrite of ``records`` (src/efface/origin/postgres/online.py, issue #34): while
the maintenance copies ``records`` and builds the copy's indexes, another server's reads,
recalls, writes and forgets go on; after the swap every live record is there (those written
during the copy too), every erased one is absent, the table is what it was (its indexes,
constraints, identity, storage and statistics settings), and the next maintenance proves an
erasure made during the copy ``erased`` by byte scan. A ``kill -9`` of the process running it,
at any step, leaves the old table in use; the next run cleans what it left.

The rewrite is paused at a step by wrapping one of its functions (an event, never a timing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import psycopg
import pytest

import efface
from efface.origin.postgres import maintenance, online

from .test_ladder import OTHER, TEXT, T, _scan

GUARD = 120
"""Seconds a step may take before the test calls it hung (a failure guard, not a measure)."""


def _open(url, kek, cache):
    return efface.open(url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False)


def _leftovers(conn) -> list[str]:
    row = conn.execute(
        "SELECT to_regclass('efface.records_online') IS NOT NULL, to_regclass('efface.records_online_log') IS NOT NULL,"
        " EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'efface.records'::regclass AND NOT tgisinternal),"
        " to_regprocedure('efface.records_online_note()') IS NOT NULL"
    ).fetchone()
    return [n for n, there in zip(("copy", "log", "trigger", "function"), row, strict=True) if there]


def _shape(conn) -> dict:
    """What the swap must keep of ``records``: indexes, constraints, storage and statistics."""
    return {
        "indexes": sorted(
            r[0].replace("_online", "")
            for r in conn.execute(
                "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'efface.records'::regclass"
            )
        ),
        "constraints": sorted(
            (r[0], r[1], r[2])
            for r in conn.execute(
                "SELECT conname, contype::text, convalidated FROM pg_constraint"
                " WHERE conrelid = 'efface.records'::regclass OR confrelid = 'efface.records'::regclass"
            )
        ),
        "columns": [
            tuple(r)
            for r in conn.execute(
                "SELECT attname, attstorage::text, coalesce(attstattarget, -1), attidentity::text, attnotnull"
                " FROM pg_attribute WHERE attrelid = 'efface.records'::regclass AND attnum > 0"
                " AND NOT attisdropped ORDER BY attnum"
            )
        ],
    }


class Pause:
    """Wraps ``online._catch_up``: its first call (the copy made, its indexes built) waits
    until released, so the test acts on the database while the rewrite is under way."""

    def __init__(self, monkeypatch):
        self.reached, self.release = threading.Event(), threading.Event()
        real = online._catch_up

        def paused(conn, s, xid=None, **kw):
            if not self.reached.is_set():
                self.reached.set()
                assert self.release.wait(GUARD), "the test never released the rewrite"
            return real(conn, s, xid, **kw)

        monkeypatch.setattr(online, "_catch_up", paused)


def _maintain_in_thread(store, out: dict) -> threading.Thread:
    def run():
        try:
            with psycopg.connect(store._origin._maint.url, autocommit=True) as conn:
                out["report"] = store._origin._maint.run(conn)
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_another_server_reads_recalls_and_writes_while_records_is_rewritten(pg_db, kek, tmp_path, monkeypatch):
    with _open(pg_db.url, kek, tmp_path / "a") as a, _open(pg_db.url, kek, tmp_path / "b") as b:
        for i in range(12):
            a.write(f"k{i}", f"{OTHER} number {i}", tenant=T, subject="ob", purpose="support")
        a.write("z", TEXT, tenant=T, subject="zq", purpose="support")
        for _ in range(6):  # b's statements prepared on the old table (psycopg prepares the fifth on)
            assert b.read("k1", tenant=T, purpose="support").text == f"{OTHER} number 1"
        with pg_db.connect() as conn:
            before = _shape(conn)
            top = conn.execute("SELECT max(id) FROM efface.records").fetchone()[0]
        a.forget(tenant=T, subject="zq")
        pause, out, events = Pause(monkeypatch), {}, []
        t = _maintain_in_thread(a, out)
        assert pause.reached.wait(GUARD), out.get("error")
        with pg_db.connect() as conn:
            assert _leftovers(conn) == ["copy", "log", "trigger", "function"]

        def other_server():
            events.append(("read", b.read("k2", tenant=T, purpose="support").text))
            events.append(("recall", [h.key for h in b.recall("weathervanes", tenant=T, purpose="support", k=3)]))
            b.write("during", "written while records is copied", tenant=T, subject="ob", purpose="support")
            events.append(("write", None))
            b.write("k3", "k3 rewritten during the copy", tenant=T, subject="ob", purpose="support")
            events.append(("rewrite", None))

        w = threading.Thread(target=other_server, daemon=True)
        w.start()
        w.join(GUARD)
        # all four finished while the maintenance was still held inside the rewrite
        assert [e[0] for e in events] == ["read", "recall", "write", "rewrite"]
        assert t.is_alive() and not pause.release.is_set()
        assert events[0][1] == f"{OTHER} number 2" and len(events[1][1]) == 3
        pause.release.set()
        t.join(GUARD)
        assert "error" not in out, out.get("error")
        report = out["report"]
        assert set(report["online"]) == {"records", "claims"} and "records_offline" not in report, report
        assert report["online"]["records"]["caught_up"] >= 2  # the write and the rewrite, applied to the copy
        # after the swap: b's prepared statements replanned on the new table, the rows written
        # during the copy there, the identity resumed past every id given before
        for _ in range(3):
            assert b.read("k1", tenant=T, purpose="support").text == f"{OTHER} number 1"
        assert b.read("during", tenant=T, purpose="support").text == "written while records is copied"
        assert a.read("k3", tenant=T, purpose="support").text == "k3 rewritten during the copy"
        assert b.read("z", tenant=T, purpose="support") is None
        b.write("after", "written after the swap", tenant=T, subject="ob", purpose="support")
        with pg_db.connect() as conn:
            assert _leftovers(conn) == []
            assert _shape(conn) == before
            newest = conn.execute("SELECT max(id) FROM efface.records").fetchone()[0]
            assert newest > top
            assert conn.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 12 + 2
        assert [h.key for h in b.recall("written after the swap", tenant=T, purpose="support", k=1)] == ["after"]


def test_an_erasure_during_the_copy_never_reappears_and_the_next_maintenance_erases_it(
    pg_db, kek, tmp_path, monkeypatch
):
    with _open(pg_db.url, kek, tmp_path / "a") as a, _open(pg_db.url, kek, tmp_path / "b") as b:
        a.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        a.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        a.forget(tenant=T, subject="ob")  # an erasure for the maintenance to cover
        pause, out = Pause(monkeypatch), {}
        t = _maintain_in_thread(a, out)
        assert pause.reached.wait(GUARD), out.get("error")
        with pg_db.connect() as conn:  # the copy holds zq's record
            assert conn.execute("SELECT count(*) FROM efface.records_online").fetchone()[0] == 1
        receipt = b.forget(tenant=T, subject="zq")  # committed during the copy
        pause.release.set()
        t.join(GUARD)
        assert "error" not in out, out.get("error")
        assert "online" in out["report"]
        with pg_db.connect() as conn:
            assert conn.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 0
            assert maintenance.maintained(conn, "efface") < receipt.epoch  # this run covered less
            conn.execute("CHECKPOINT")
        assert b.read("n1", tenant=T, purpose="support") is None
        assert b.recall("vermilion kettle", tenant=T, purpose="support") == []
        data_dir = str(pg_db.server.datadir)
        # the catch-up's delete left the row dead in the new table's pages: not erased yet
        assert _scan(a, receipt.handle, data_dir)[0] > 0
        assert a.verify(receipt.handle).copies["postgres.primary.files"].state == "cannot_verify"
        assert a.wait(receipt.handle, 60, until="erased").erased  # the next maintenance
        assert _scan(a, receipt.handle, data_dir)[:2] == (0, 0)
        v = a.verify(receipt.handle)
        assert v.level == "erased", [c for c in v.checks if c.outcome != "pass"]
        assert v.copies["postgres.primary.files"].state == "erased"


WORKER = textwrap.dedent(
    """
    import os, sys, time
    import efface
    from efface.origin.postgres import online

    step = sys.argv[1]
    s = efface.open(os.environ["EFFACE_ORIGIN"], embedder="hashing", kek_file=sys.argv[2], cache_dir=sys.argv[3],
                    background=False)
    for i in range(8):
        s.write(f"k{i}", f"a kept note {i} about copper weathervanes", tenant="acme", subject="ob", purpose="support")
    s.write("z", "Zebulon Quaxworth keeps a vermilion kettle", tenant="acme", subject="zq", purpose="support")
    receipt = s.forget(tenant="acme", subject="zq")
    print("HANDLE", receipt.handle, flush=True)

    def stop_here(*args, **kwargs):
        print("AT", step, flush=True)
        time.sleep(3600)

    # copy: the copy and its indexes committed, the trigger logging; swap: inside the swap's
    # transaction, its ACCESS EXCLUSIVE locks held, at its last catch-up
    real = online._catch_up

    def hook(conn, schema, xid=None, **kw):
        if step == "copy" or conn.info.transaction_status != 0:  # 0: idle, no transaction open
            stop_here()
        return real(conn, schema, xid, **kw)

    online._catch_up = hook
    s._origin.maintain()
    print("NOT STOPPED", flush=True)
    """
)


@pytest.mark.parametrize("step", ["copy", "swap"])
def test_a_kill_9_during_the_rewrite_leaves_records_in_use_and_the_next_run_cleans_up(pg_db, kek, tmp_path, step):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "EFFACE_ORIGIN": pg_db.url, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), step, str(kek), str(tmp_path / "w")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    handle = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("HANDLE "):
                handle = line.split()[1]
            if line.strip() == f"AT {step}":
                break
        else:
            raise AssertionError(f"the worker never reached the step: {proc.stderr.read() if proc.stderr else ''}")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(GUARD)
    assert proc.returncode == -signal.SIGKILL and handle is not None
    with _open(pg_db.url, kek, tmp_path / "after") as s:
        # the old table, in use: its rows, new writes (the trigger left behind logs them)
        assert s.read("k3", tenant=T, purpose="support").text == "a kept note 3 about copper weathervanes"
        s.write("k9", "written after the crash", tenant=T, subject="ob", purpose="support")
        with pg_db.connect() as conn:
            assert "trigger" in _leftovers(conn)
            assert conn.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 9
        assert s.wait(handle, 60, until="erased").erased  # the next run: leftovers dropped first
        with pg_db.connect() as conn:
            assert _leftovers(conn) == []
            assert conn.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 9
        v = s.verify(handle)
        assert v.level == "erased", [c for c in v.checks if c.outcome != "pass"]
        assert [h.key for h in s.recall("written after the crash", tenant=T, purpose="support", k=1)] == ["k9"]
        assert s.read("z", tenant=T, purpose="support") is None


def test_a_records_table_with_a_trigger_of_the_operators_is_rewritten_with_vacuum_full(pg_db, kek, tmp_path):
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        with pg_db.connect() as conn:
            conn.execute(
                "CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$"
            )
            conn.execute(
                "CREATE TRIGGER audit AFTER DELETE ON efface.records FOR EACH ROW EXECUTE FUNCTION public.audit()"
            )
        receipt = s.forget(tenant=T, subject="zq")
        assert s.wait(receipt.handle, 60, until="erased").erased
        with pg_db.connect() as conn:
            noted = maintenance.note(conn, "efface")
            assert noted["records_offline"] == "records has a trigger efface did not make"
            assert list(noted["online"]) == ["claims"]
        assert s.verify(receipt.handle).level == "erased"


def test_a_transaction_older_than_the_copy_makes_the_run_fall_back_to_vacuum_full(pg_db, kek, tmp_path, monkeypatch):
    """A snapshot taken before the copy would read none of the new table's rows: the swap
    waits for it to end, and past its patience the run rewrites ``records`` with VACUUM FULL."""
    monkeypatch.setattr(online, "PATIENCE", 0.5)
    with _open(pg_db.url, kek, tmp_path / "a") as s, pg_db.connect() as old:
        s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
        s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
        receipt = s.forget(tenant=T, subject="zq")
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT epoch FROM efface.epoch_counter")  # its snapshot, taken now; no lock on records
        assert s._origin.maintain()
        with pg_db.connect() as conn:
            noted = maintenance.note(conn, "efface")
            assert noted["records_offline"].startswith("the online rewrite gave up"), noted
            assert noted["claims_offline"].startswith("the online rewrite gave up"), noted
            assert "online" not in noted and _leftovers(conn) == []
        # the old snapshot still reads the live row (VACUUM FULL keeps each row's visibility;
        # a copy's rows would all be invisible to it)
        assert old.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 1
        old.execute("ROLLBACK")
        assert s.read("n2", tenant=T, purpose="support").text == OTHER
        assert s.read("n1", tenant=T, purpose="support") is None
        assert maintenance.maintained(s._origin._w, "efface") >= receipt.epoch


def test_the_swap_waits_for_a_snapshot_taken_before_the_copy_was_complete(pg_db, kek, tmp_path, monkeypatch):
    """A repeatable-read snapshot open across the swap would read the new table with rows
    it cannot see: the swap happens only after every such snapshot ended."""
    with _open(pg_db.url, kek, tmp_path / "a") as s, pg_db.connect() as old:
        for i in range(5):
            s.write(f"k{i}", f"{OTHER} {i}", tenant=T, subject="ob", purpose="support")
        s.write("z", TEXT, tenant=T, subject="zq", purpose="support")
        s.forget(tenant=T, subject="zq")
        pause, out, waiting = Pause(monkeypatch), {}, threading.Event()
        real = online._no_older_snapshots

        def noted(*args):
            waiting.set()
            return real(*args)

        monkeypatch.setattr(online, "_no_older_snapshots", noted)
        t = _maintain_in_thread(s, out)
        assert pause.reached.wait(GUARD), out.get("error")
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT epoch FROM efface.epoch_counter")  # a snapshot older than the catch-up
        pause.release.set()
        assert waiting.wait(GUARD), out.get("error")
        # the run waits for it: the old table is still records, the copy still apart
        assert old.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 5
        with pg_db.connect() as conn:
            assert _leftovers(conn) == ["copy", "log", "trigger", "function"]
        old.execute("COMMIT")
        t.join(GUARD)
        assert "error" not in out and "online" in out["report"], out
        assert old.execute("SELECT count(*) FROM efface.records").fetchone()[0] == 5
