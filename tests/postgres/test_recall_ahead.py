"""Recall's final rows read ahead with its vector statement on PostgreSQL (efface.origin.postgres.rows):
the records recall expects to return come back, sealed, in the statement's first round trip of
the snapshot, and its closing read asks the database only for the chosen ones not read then.
Either way every row served was live in the recall's own snapshot."""

from __future__ import annotations

import time

import numpy as np
import psycopg
import pytest

import efface
from efface.origin.capabilities import SnapshotEnded
from efface.origin.postgres import origin as pg_origin
from efface.paths import recall as recall_module
from efface.paths.base import Query
from efface.paths.indexed import OriginVectors

from .test_recall import _round_trips

T = "acme"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


@pytest.fixture
def opened_calls(monkeypatch):
    """How many rows each call of the closing read's opening opened: first those read ahead,
    then, if any chosen record was not, those its own statement read."""
    calls: list[int] = []
    real = pg_origin.opened

    def spy(sealer, keys, conn, rows):
        rows = list(rows)
        calls.append(len(rows))
        return real(sealer, keys, conn, rows)

    monkeypatch.setattr(pg_origin, "opened", spy)
    return calls


def _write(s) -> None:
    s.write("n1", "a vermilion kettle whistles on the zebra stove", tenant=T, subject="alice", purpose="p")
    s.write("n2", "a vermilion kettle on the stove", tenant=T, subject="bob", purpose="p")
    s.write("n3", "the stove is cold", tenant=T, subject="bob", purpose="p")
    s.write("n4", "the weekly report goes out on fridays", tenant=T, subject="bob", purpose="p")


def test_a_recall_whose_rows_were_read_ahead_ends_in_one_round_trip(pg_db, kek, tmp_path, opened_calls, monkeypatch):
    """The words' first k, read ahead with the vector statement, are the k returned: the
    snapshot ended with that statement (its COMMIT in the same round trip), and the closing
    read opened the rows held, asking the database nothing."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.compact()
        s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)  # the statement prepared
        opened_calls.clear()
        sent, trips = _round_trips(monkeypatch, psycopg.Connection)
        hits = s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)
        monkeypatch.undo()
        assert [w for w, _ in sent] == ["BEGIN", "LOCK", "SELECT", "(SELECT", "COMMIT"], sent
        assert len(trips) == 1  # one round trip in all
        assert [h.key for h in hits] == ["n1", "n2"]
        assert hits[0].text == "a vermilion kettle whistles on the zebra stove" and "fts" in hits[0].via
        assert opened_calls == [2]  # one opening, of the two rows read ahead
        assert (s._origin._early.left, s._origin._early.after) == (0, 0)  # no snapshot had to be read again
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        tenant = s._tenant(T)
        ids = sorted(rid for rid, _ in s._origin.records_of_tenant(tenant))
        q = Query(tenant, "stove", s.embedder.embed(["stove"])[0], "p", None, time.time())
        with s._origin.snapshot_deferred():
            ann.live_scored(q, 10, ids, ids[:1])
            with pytest.raises(SnapshotEnded):  # a read it needs beyond what it read ahead
                s._origin.records_by_id_closing(ids)
        assert (s._origin._early.left, s._origin._early.after) == (1, 1)  # the next snapshot does not end early
        with s._origin.snapshot_deferred():
            ann.live_scored(q, 10, ids, ids[:1])
            assert s._origin.snapshot_epoch() is not None
            assert len(s._origin.records_by_id_closing(ids)) == 4
        assert (s._origin._early.left, s._origin._early.after) == (0, 1)


def test_a_record_not_read_ahead_is_read_at_the_close(pg_db, kek, tmp_path, opened_calls):
    """In a snapshot begun before the statement that reads ahead (so not ended by it), one
    record read ahead, four chosen: the closing statement reads the three others, in the
    same snapshot; the rows are those a snapshot that reads nothing ahead reads."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.compact()
        tenant = s._tenant(T)
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        vec = s.embedder.embed(["stove"])[0]
        q = Query(tenant, "stove", vec, "p", None, time.time())
        ids = {rid for rid, _ in s._origin.records_of_tenant(tenant)}
        with s._origin.snapshot():
            ann.live_scored(q, 10, sorted(ids), [min(ids)])  # one record read ahead
            opened_calls.clear()
            rows = s._origin.records_by_id_closing(sorted(ids))
        assert sorted(r.key for r in rows.values()) == ["n1", "n2", "n3", "n4"]
        assert opened_calls == [1, 3]  # one held, three read at the close
        with s._origin.snapshot():
            plain = s._origin.records_by_id(sorted(ids))
        assert rows == plain


def test_a_forget_committed_just_before_a_recall_is_never_served(pg_db, kek, tmp_path, opened_calls):
    """Another store forgets the words' best record just before this one recalls: its word
    index still ranks it first (it has not read the change log yet), so it is named to be read
    ahead, but the statement's live check leaves it out; the snapshot began past the index's
    epoch, so the words are ranked again, a read past the snapshot's early end: the recall runs
    again, in a new snapshot, and serves the next record. And a record read ahead in a
    snapshot, forgotten after, is still what that snapshot saw (one consistent state); the
    next recall never serves it."""
    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        _write(a)
        a.compact()
        assert [h.key for h in b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=1)] == ["n1"]
        assert (b._origin._early.left, b._origin._early.after) == (0, 0)
        a.forget(tenant=T, subject="alice")  # n1, committed by the other store
        hits = b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=1)
        assert [h.key for h in hits] == ["n2"]
        assert b._origin._early.after == 1  # it ran again
        assert all(h.key != "n1" for h in b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=4))

        # read ahead in a snapshot, then forgotten by the other store: the snapshot's own state
        a.write("n5", "a vermilion kettle zebra", tenant=T, subject="carol", purpose="p")
        tenant = b._tenant(T)
        ann = {p.name: p for p in b._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        vec = b.embedder.embed(["vermilion kettle zebra"])[0]
        q = Query(tenant, "vermilion kettle zebra", vec, "p", None, time.time())
        ids = sorted(rid for rid, _ in b._origin.records_of_tenant(tenant))
        b._origin._early.left = b._origin._early.after = 0
        with b._origin.snapshot_deferred():
            _near, others = ann.live_scored(q, 10, ids, ids)
            a.forget(tenant=T, subject="carol")
            rows = b._origin.records_by_id_closing(sorted(others))
        assert "n5" in {r.key for r in rows.values()}  # what the snapshot saw: live when it began
        assert all(h.key != "n5" for h in b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=4))
        assert all(h.key != "n5" for h in a.recall("vermilion kettle zebra", tenant=T, purpose="p", k=4))


def test_a_statement_failing_in_the_first_round_trip_raises_and_leaves_the_store_usable(pg_db, kek, tmp_path):
    """The first round trip goes through libpq's pipeline directly (efface.origin.postgres.pipeline):
    a statement of it that fails raises psycopg's error for it, as psycopg's pipeline did, the
    snapshot's transaction is rolled back, and the connection goes back to the pool usable."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.compact()
        tenant = s._tenant(T)
        o = s._origin
        wrong = np.ones(s.embedder.dim + 1, dtype=np.float32)  # not the column's dimension
        for _ in range(2):  # the statement prepared by the first, failing, or not
            with pytest.raises(psycopg.errors.DataException), o.snapshot_deferred():
                o.nearest_scored(wrong, 10, tenant, "p", None, time.time(), [1, 2], [1])
            assert o._local.conn is None
        with o._pool.connection() as conn:  # back in the pool idle, out of pipeline mode
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        assert [h.key for h in s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)] == ["n1", "n2"]


def test_a_recall_whose_prepared_statements_were_deallocated_sends_its_round_trip_again(
    pg_db, kek, tmp_path, monkeypatch
):
    """psycopg deallocates every prepared statement of a connection that rolls back while it
    holds some of its own: the first round trip, sent through libpq with statements prepared
    under names of its own, finds them gone (nothing read yet), rolls back and is sent once
    more on the same connection, preparing them under new names; the recall runs once and its
    answer is the same."""
    import contextlib

    from efface.origin.postgres import pipeline as libpq_pipeline

    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.compact()
        pool = s._origin._pool
        c = pool.getconn()
        try:
            with monkeypatch.context() as m:
                m.setattr(pool, "connection", lambda *a, **kw: contextlib.nullcontext(c))  # every read on c
                want = [h.key for h in s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)]
                assert want == ["n1", "n2"]
                names = libpq_pipeline._prepared[c].names.copy()
                assert len(names) == 2  # the epoch's statement and the vector statement
                c.execute("DEALLOCATE ALL")  # as psycopg does after a rollback
                runs: list[bool] = []
                hybrid = recall_module._hybrid

                def counted(*args, **kwargs):
                    runs.append(kwargs.get("ahead", True))
                    return hybrid(*args, **kwargs)

                sends: list[object] = []
                exchange = libpq_pipeline._exchange

                def sent(conn, *args, **kwargs):
                    sends.append(conn)
                    return exchange(conn, *args, **kwargs)

                m.setattr(recall_module, "_hybrid", counted)
                m.setattr(libpq_pipeline, "_exchange", sent)
                assert [h.key for h in s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)] == want
                assert runs == [True]  # not run again: no signal left the origin
                assert sends == [c, c]  # found gone, then sent again on the same connection
                assert [h.key for h in s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)] == want
                held = {r[0] for r in c.execute("SELECT name FROM pg_prepared_statements")}
                now = libpq_pipeline._prepared[c].names
                assert len(now) == 2 and not now & names  # under new names
                assert {n.decode() for n in now} == held
        finally:
            pool.putconn(c)
