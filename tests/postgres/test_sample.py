"""The PostgreSQL origin's sample of a tenant's vectors (:mod:`efface.origin.postgres.sample`):
recall's vector leg is judged against it as on SQLite; the draw is kept in the process until
the tenant changes, and a kept draw never holds an erased record's vector once this process
has seen the erasure in the change log."""

from __future__ import annotations

import time

import numpy as np

import efface
from efface.origin.capabilities import VectorSample
from efface.origin.postgres import sample as sample_mod
from efface.paths.base import Query
from efface.paths.scores import SAMPLE, _background

T = "acme"
P = "support"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def _write(store, n: int, start: int = 0, subject: str = "s") -> None:
    store.write_many(
        [{"key": f"k{i}", "text": f"note {i} about topic {i % 13} and the weather"} for i in range(start, start + n)],
        tenant=T,
        purpose=P,
        subject=subject,
    )


def _ids_of(store, keys: list[str]) -> set[int]:
    tid = store._tenant(T)
    with store._origin._reading() as conn:
        rows = conn.execute(
            "SELECT id FROM efface.records WHERE tenant = %s AND key = ANY(%s)",
            (tid, [store._origin._sealer.key_h(tid, k) for k in keys]),
        ).fetchall()
    return {int(r[0]) for r in rows}


def test_recall_on_postgres_judges_the_vector_leg_against_the_sample(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s, 300)
        origin = s._origin
        assert isinstance(origin, VectorSample)
        vec = s.embedder.embed(["the weather"])[0]
        q = Query(s._tenant(T), "the weather", vec, P, None, time.time())
        got = _background(origin, q)
        assert got is not None and got.shape == (SAMPLE,)
        # the same draw for the next recall (kept); recall runs beside it (the hashing embedder is
        # lexical: its vector leg breaks ties only, so only a MiniLM recall asks for the sample)
        assert np.array_equal(
            origin.vector_sample(q.tenant, P, q.now, SAMPLE), origin.vector_sample(q.tenant, P, q.now, SAMPLE)
        )
        assert s.recall("topic 7 weather", tenant=T, purpose=P, k=3)


def test_postgres_draws_the_sample_sqlite_draws_for_the_same_records(pg_db, kek, tmp_path):
    """Seeded alike (numpy's generator, by the tenant's size): the same records under the same
    ids give the same sample on both origins, so their fused results can be compared."""
    with _open(pg_db, kek, tmp_path / "a") as pg, efface.open(str(tmp_path / "lite"), embedder="hashing") as lite:
        for store in (pg, lite):
            _write(store, 400)
        now = time.time()
        a = pg._origin.vector_sample(pg._tenant(T), P, now, SAMPLE)
        b = lite._origin.vector_sample(lite._tenant(T), P, now, SAMPLE)
        assert a.shape == b.shape == (SAMPLE, a.shape[1])
        assert np.allclose(a, b, atol=1e-6)


def test_a_small_tenants_draw_is_redrawn_after_a_write_and_a_large_ones_kept(pg_db, kek, tmp_path, monkeypatch):
    with _open(pg_db, kek, tmp_path / "a") as s:
        _write(s, 20)
        origin, tid, now = s._origin, s._tenant(T), time.time()
        assert len(origin.vector_sample(tid, P, now, SAMPLE)) == 20
        _write(s, 1, start=20)  # the whole tenant was drawn: its size matters, drawn again
        assert len(origin.vector_sample(tid, P, now, SAMPLE)) == 21
        _write(s, 300, start=21)
        first = origin.vector_sample(tid, P, now, SAMPLE)
        assert len(first) == SAMPLE
        _write(s, 3, start=321)  # a few changes to a large tenant: kept
        assert np.array_equal(origin.vector_sample(tid, P, now, SAMPLE), first)
        monkeypatch.setattr(sample_mod, "REDRAW_CHANGES", 2)
        _write(s, 2, start=324)
        again = origin.vector_sample(tid, P, now, SAMPLE)
        assert len(again) == SAMPLE and not np.array_equal(again, first)  # 326 records: another seed


def test_an_erased_records_vector_leaves_the_kept_draw(pg_db, kek, tmp_path):
    """A forget in this process, or by another store on the same database (seen when this
    one replays the change log, as its word index does): the kept draw's rows of the erased
    records are zeroed and removed, and later draws are of live records only."""
    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        _write(a, 30, subject="keep")
        _write(a, 10, start=30, subject="alice")
        _write(a, 10, start=40, subject="bob")
        alice, bob = _ids_of(a, [f"k{i}" for i in range(30, 40)]), _ids_of(a, [f"k{i}" for i in range(40, 50)])
        tid, now = a._tenant(T), time.time()
        kept = a._origin._sample
        assert len(a._origin.vector_sample(tid, P, now, SAMPLE)) == 50
        assert kept.held(alice | bob) == sorted(alice | bob)
        draw = next(iter(kept._kept.values()))
        rows = draw.vectors  # the array the draw holds: its erased rows are zeroed, not only dropped
        at = np.flatnonzero(np.isin(draw.ids, sorted(alice)))
        a.forget(tenant=T, subject="alice")
        assert kept.held(alice) == [] and kept.held(bob) == sorted(bob)
        assert not rows[at].any()
        assert len(a._origin.vector_sample(tid, P, now, SAMPLE)) == 40

        b.forget(tenant=T, subject="bob")  # another store: seen here at the next replay
        a._origin.text.refresh()
        assert kept.held(bob) == []
        assert len(a._origin.vector_sample(tid, P, time.time(), SAMPLE)) == 30


def test_a_draw_in_a_snapshot_older_than_an_applied_erasure_takes_none_of_its_records(pg_db, kek, tmp_path):
    """A recall's snapshot taken before a forget that this process has since replayed still
    sees the erased records, but the draw takes its ids from the word index, which dropped
    them: neither the recall's sample nor the kept draw holds their vectors."""
    import threading

    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        _write(a, 30, subject="keep")
        _write(a, 10, start=30, subject="alice")
        alice = _ids_of(a, [f"k{i}" for i in range(30, 40)])
        tid, kept = a._tenant(T), a._origin._sample
        with a._origin.snapshot():
            assert a._origin.live_ids(sorted(alice), tid, P, None, time.time()) == alice
            b.forget(tenant=T, subject="alice")
            replay = threading.Thread(target=a._origin.text.refresh)  # another thread replays the log
            replay.start()
            replay.join()
            assert a._origin.live_ids(sorted(alice), tid, P, None, time.time()) == alice  # the snapshot's view
            assert len(a._origin.vector_sample(tid, P, time.time(), SAMPLE)) == 30
            assert kept.held(alice) == [] and kept._kept
        assert len(a._origin.vector_sample(tid, P, time.time(), SAMPLE)) == 30
