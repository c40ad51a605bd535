"""When the maintenance does not rewrite a table online, and what it leaves when an online
rewrite fails: a process of an earlier efface version (its snapshots take no reader lock),
an index whose definition the copy cannot reproduce, and any error inside the rewrite. In
each case the table is rewritten with ``VACUUM FULL``, nothing of the copy is left, and the
erasure reaches ``erased``."""

from __future__ import annotations

import time

import pytest

from efface.origin.postgres import maintenance, online

from .test_ladder import OTHER, TEXT, T
from .test_online_rewrite import _leftovers, _open

EARLIER = "a process of an earlier efface version uses the store (its snapshots do not wait for the swap)"


def _forget_and_erase(s) -> dict:
    s.write("n1", TEXT, tenant=T, subject="zq", purpose="support")
    s.write("n2", OTHER, tenant=T, subject="ob", purpose="support")
    receipt = s.forget(tenant=T, subject="zq")
    assert s.wait(receipt.handle, 60, until="erased").erased
    assert s.verify(receipt.handle).level == "erased"
    assert s.read("n2", tenant=T, purpose="support").text == OTHER
    assert s.read("n1", tenant=T, purpose="support") is None
    return receipt


def test_a_reader_of_an_earlier_version_keeps_the_rewrite_offline(pg_db, kek, tmp_path):
    """A process of an earlier version registered among the change log's readers without the
    reader lock's mark: its snapshot could pass under a swap, so both tables are rewritten
    with VACUUM FULL; once its row is gone, the rewrite is online again."""
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        with pg_db.connect() as conn:
            # what an earlier efface's registration writes: no snapshot_lock (its default)
            conn.execute(
                "INSERT INTO efface.change_readers(reader, upto, seen_at) VALUES ('earlier', 0, %s)", (time.time(),)
            )
            assert online.unsupported(conn, "efface", "records") == EARLIER
        _forget_and_erase(s)
        with pg_db.connect() as conn:
            noted = maintenance.note(conn, "efface")
            assert noted["records_offline"] == EARLIER and noted["claims_offline"] == EARLIER, noted
            assert "online" not in noted and _leftovers(conn) == []
            conn.execute("DELETE FROM efface.change_readers WHERE reader = 'earlier'")
            # this version's own registration carries the mark
            assert conn.execute("SELECT bool_and(snapshot_lock) FROM efface.change_readers").fetchone() == (True,)
            assert online.unsupported(conn, "efface", "records") is None


def test_an_index_the_copy_cannot_reproduce_keeps_the_rewrite_offline(pg_db, kek, tmp_path):
    """An operator's index whose name needs quoting: found before the copy is made (it used to
    fail after it, leaving the copy and its trigger behind)."""
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        with pg_db.connect() as conn:
            conn.execute('CREATE INDEX "ByTenant" ON efface.records(tenant)')
            assert online.unsupported(conn, "efface", "records").startswith("an index of records")
        _forget_and_erase(s)
        with pg_db.connect() as conn:
            noted = maintenance.note(conn, "efface")
            assert noted["records_offline"].startswith("an index of records"), noted
            assert list(noted["online"]) == ["claims"] and _leftovers(conn) == []


@pytest.mark.parametrize("step", ["_catch_up", "_copied"])
def test_any_error_inside_the_rewrite_drops_the_copy_and_falls_back_to_vacuum_full(
    pg_db, kek, tmp_path, monkeypatch, step
):
    """An error the rewrite does not expect (a full disk, a statement timeout, a bug) used to
    leave the copy (every row in the clear) and the trigger, and the erasure never advanced:
    now the copy is dropped and the table rewritten offline."""

    def fail(*_a, **_k):
        raise RuntimeError("a failure inside the rewrite")

    monkeypatch.setattr(online, step, fail)
    with _open(pg_db.url, kek, tmp_path / "a") as s:
        _forget_and_erase(s)
        with pg_db.connect() as conn:
            noted = maintenance.note(conn, "efface")
            assert noted["records_offline"] == "the online rewrite failed (RuntimeError)", noted
            assert noted["claims_offline"] == "the online rewrite failed (RuntimeError)", noted
            assert _leftovers(conn) == []
            assert conn.execute("SELECT to_regclass('efface.claims_online')").fetchone() == (None,)
