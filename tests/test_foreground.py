"""Background work gives way to recalls in flight (efface.foreground), and the SQLite origin's
savepoints commit like apsw's own context manager (efface.origin.sqlite.edge.savepoint)."""

from __future__ import annotations

import threading

import apsw
import pytest

import efface
from efface import foreground
from efface.origin.sqlite.edge import savepoint


def test_give_way_returns_at_once_with_no_recall_in_flight():
    assert foreground.in_flight() == 0
    foreground.give_way(max_s=60)  # would hang the test if it waited


def test_give_way_waits_for_the_recall_in_flight_to_end():
    inside, release, order = threading.Event(), threading.Event(), []

    def recall() -> None:
        with foreground.reading():
            inside.set()
            release.wait(10)
            order.append("recall ended")

    t = threading.Thread(target=recall)
    t.start()
    inside.wait(10)
    assert foreground.in_flight() == 1
    waiter = threading.Thread(target=lambda: (foreground.give_way(max_s=30), order.append("background went on")))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and order == []  # still giving way
    release.set()
    t.join(10)
    waiter.join(10)
    assert order == ["recall ended", "background went on"]
    assert foreground.in_flight() == 0


def test_give_way_goes_on_after_its_bound_under_endless_recalls():
    release = threading.Event()
    with foreground.reading():
        foreground.give_way(max_s=0.01)  # returns although the recall has not ended
        assert foreground.in_flight() == 1
    release.set()
    assert foreground.in_flight() == 0


def test_a_recall_is_in_flight_while_it_runs(tmp_path, monkeypatch):
    seen: list[int] = []
    s = efface.open(tmp_path / "s", embedder="hashing", background=False)
    try:
        s.write("k", "Alice prefers green tea", tenant="acme", subject="alice", purpose="support")
        real = s._origin.snapshot

        def spying(*a, **kw):
            seen.append(foreground.in_flight())
            return real(*a, **kw)

        monkeypatch.setattr(s._origin, "snapshot", spying)
        assert [h.key for h in s.recall("green tea", tenant="acme", purpose="support")] == ["k"]
    finally:
        s.close()
    assert seen and all(n >= 1 for n in seen)
    assert foreground.in_flight() == 0


def _conn(tmp_path):
    c = apsw.Connection(str(tmp_path / "x.db"))
    c.execute("CREATE TABLE t(x)")
    return c


def test_savepoint_commits_on_success(tmp_path):
    c = _conn(tmp_path)
    with savepoint(c):
        c.execute("INSERT INTO t VALUES(1)")
    assert not c.in_transaction
    assert c.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_savepoint_rolls_back_its_own_writes_on_error_only(tmp_path):
    c = _conn(tmp_path)
    c.execute("BEGIN")
    c.execute("INSERT INTO t VALUES(1)")
    with pytest.raises(RuntimeError), savepoint(c):
        c.execute("INSERT INTO t VALUES(2)")
        raise RuntimeError("boom")
    assert c.in_transaction  # the outer transaction goes on
    c.execute("COMMIT")
    assert c.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_savepoint_after_sqlite_rolled_everything_back_raises_the_cause(tmp_path):
    c = _conn(tmp_path)
    with pytest.raises(apsw.SQLError), savepoint(c):
        c.execute("INSERT INTO t VALUES(1)")
        c.execute("ROLLBACK")  # what SQLite does on its own after some errors (a full disk)
        c.execute("SELECT * FROM no_such_table")
    assert not c.in_transaction
    assert c.execute("SELECT count(*) FROM t").fetchall() == [(0,)]
