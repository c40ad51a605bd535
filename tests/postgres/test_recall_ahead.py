"""Recall's final rows read ahead with its vector statement on PostgreSQL (efface.origin.postgres.rows):
the records recall expects to return come back, sealed, in the statement's first round trip of
the snapshot, and its closing read asks the database only for the chosen ones not read then.
Either way every row served was live in the recall's own snapshot."""

from __future__ import annotations

import time

import pytest

import efface
from efface.origin.postgres import origin as pg_origin
from efface.paths.base import Query
from efface.paths.indexed import OriginVectors

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


def test_a_recall_whose_rows_were_read_ahead_reads_none_at_its_close(pg_db, kek, tmp_path, opened_calls):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.compact()
        opened_calls.clear()
        hits = s.recall("vermilion kettle zebra stove", tenant=T, purpose="p", k=2)
        assert [h.key for h in hits] == ["n1", "n2"]
        assert hits[0].text == "a vermilion kettle whistles on the zebra stove" and "fts" in hits[0].via
        # one opening, of the two rows read ahead; the closing read's statement sent nothing but COMMIT
        assert opened_calls == [2]


def test_a_record_not_read_ahead_is_read_at_the_close(pg_db, kek, tmp_path, opened_calls):
    """One record read ahead, four chosen: the closing statement reads the three others, in
    the same snapshot; the rows are those a snapshot that reads nothing ahead reads."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s)
        s.compact()
        tenant = s._tenant(T)
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        vec = s.embedder.embed(["stove"])[0]
        q = Query(tenant, "stove", vec, "p", None, time.time())
        ids = {rid for rid, _ in s._origin.records_of_tenant(tenant)}
        with s._origin.snapshot_deferred():
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
    ahead, but the statement's live check leaves it out, and recall serves the next one, read
    at the close. And a record read ahead in a snapshot, forgotten after, is still what that
    snapshot saw (one consistent state); the next recall never serves it."""
    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        _write(a)
        a.compact()
        assert [h.key for h in b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=1)] == ["n1"]
        a.forget(tenant=T, subject="alice")  # n1, committed by the other store
        opened_calls.clear()
        hits = b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=1)
        assert [h.key for h in hits] == ["n2"]
        assert sum(opened_calls) == 1  # n2 only, read ahead or at the close
        assert all(h.key != "n1" for h in b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=4))

        # read ahead in a snapshot, then forgotten by the other store: the snapshot's own state
        a.write("n5", "a vermilion kettle zebra", tenant=T, subject="carol", purpose="p")
        tenant = b._tenant(T)
        ann = {p.name: p for p in b._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        vec = b.embedder.embed(["vermilion kettle zebra"])[0]
        q = Query(tenant, "vermilion kettle zebra", vec, "p", None, time.time())
        with b._origin.snapshot_deferred():
            ids = {rid for rid, _ in b._origin.records_of_tenant(tenant)}
            _near, others = ann.live_scored(q, 10, sorted(ids), sorted(ids))
            a.forget(tenant=T, subject="carol")
            rows = b._origin.records_by_id_closing(sorted(others))
        assert "n5" in {r.key for r in rows.values()}  # what the snapshot saw: live when it began
        assert all(h.key != "n5" for h in b.recall("vermilion kettle zebra", tenant=T, purpose="p", k=4))
        assert all(h.key != "n5" for h in a.recall("vermilion kettle zebra", tenant=T, purpose="p", k=4))
