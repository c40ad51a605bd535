"""Recall on PostgreSQL (issue #34 item 2): vectors searched in pgvector's HNSW index, filtered
live in the recall's own snapshot, in the same statement; words in each process's index,
stemmed as the SQLite origin's. No copy of the vectors outside the database but the few of recall's sample
(tests/postgres/test_sample.py)."""

from __future__ import annotations

import time

import numpy as np

import efface
from efface.origin.capabilities import NearestVectors
from efface.origin.postgres.reads import NEAR_SHARE
from efface.paths.base import LiveVectorSearch, Seeing, VectorSearch
from efface.paths.indexed import OriginVectors

T = "acme"


def _open(pg_db, kek, cache, **options):
    options.setdefault("background", False)
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, **options)


def test_the_vector_path_is_the_databases_index_and_keeps_no_copy(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(s._origin, NearestVectors)
        assert isinstance(ann, OriginVectors) and ann.synchronous
        assert isinstance(ann, VectorSearch) and isinstance(ann, LiveVectorSearch) and not isinstance(ann, Seeing)
        s.write("n1", "Zebulon keeps a vermilion kettle on the stove", tenant=T, subject="zq", purpose="support")
        s.write("n2", "the weekly report goes out on fridays", tenant=T, subject="zq", purpose="support")
        s.compact()
        hits = s.recall("vermilion kettle", tenant=T, purpose="support", k=1)
        assert [h.key for h in hits] == ["n1"] and "ann" in hits[0].via
        assert not list((tmp_path / "a").rglob("*.usearch"))  # no ANN file: the vectors stay in the database
        with pg_db.connect() as conn:
            plan = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = 'efface' AND indexname = 'records_embedding'"
            ).fetchone()
        assert plan is not None and "hnsw" in plan[0]


def test_candidates_are_live_in_the_recalls_own_snapshot(pg_db, kek, tmp_path):
    """What the vector search proposes inside a snapshot is what was live when it was taken: a
    forget committed by another store after it is not seen there (the read is consistent),
    and the next snapshot never proposes the forgotten record."""
    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        a.write("n1", "Alice prefers green tea in the morning", tenant=T, subject="alice", purpose="p")
        a.write("n2", "Bob prefers black coffee in the morning", tenant=T, subject="bob", purpose="p")
        tenant = b._tenant(T)
        vec = b.embedder.embed(["green tea in the morning"])[0]
        ann = {p.name: p for p in b._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        from efface.paths.base import Query

        q = Query(tenant, "green tea", vec, "p", None, time.time())
        with b._origin.snapshot():
            before = ann.live_candidates(q, 10)
            a.forget(tenant=T, subject="alice")  # committed by the other store meanwhile
            during = ann.live_candidates(q, 10)
        after = ann.live_candidates(q, 10)
        ids = {rid for rid, _ in b._origin.records_of_tenant(tenant)}
        assert len(before) == 2 and during.keys() == before.keys()
        assert set(after) == ids and len(after) == 1
        assert all(blob for blob in after.values())  # each with its stored vector
        assert [h.key for h in b.recall("green tea", tenant=T, purpose="p")] == ["n2"]


def test_a_filtered_search_still_finds_k_live_records(pg_db, kek, tmp_path):
    """Many records nearer the query under another purpose do not crowd out the few under
    the purpose asked (pgvector's iterative scan goes on past the filtered rows)."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        dim = s.embedder.dim
        rng = np.random.default_rng(7)
        query = rng.standard_normal(dim).astype(np.float32)
        query /= np.linalg.norm(query)

        def near(scale: float, n: int) -> np.ndarray:
            v = query + scale * rng.standard_normal((n, dim)).astype(np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

        crowd = [{"key": f"c{i}", "text": f"crowd note {i}", "subject": "x"} for i in range(600)]
        s.write_many(crowd, tenant=T, purpose="other", embeddings=near(0.05, 600))
        few = [{"key": f"f{i}", "text": f"rare memo {i}", "subject": "y"} for i in range(12)]
        s.write_many(few, tenant=T, purpose="asked", embeddings=near(0.6, 12))
        with pg_db.connect() as conn:
            conn.execute("ANALYZE efface.records, efface.claims")
        tenant = s._tenant(T)
        o = s._origin
        with o.snapshot():
            conn = o._local.conn  # the snapshot's: plan this query through the HNSW index, as a large table would
            for off in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
                conn.execute(f"SET LOCAL {off} = off")
            sql = "EXPLAIN SELECT id FROM efface.records ORDER BY embedding <=> %s LIMIT 10"
            assert "records_embedding" in " ".join(r[0] for r in conn.execute(sql, (query,)))
            got = o.nearest(query, 10, tenant, "asked", None, time.time())
        assert len(got) == 10 and set(got) <= {rid for rid, _ in o.records_of_tenant(tenant)}
        keys = {h.key for h in s.recall("zzz", tenant=T, purpose="asked", k=10)}
        assert len(keys) == 10 and all(k.startswith("f") for k in keys)


def test_the_word_index_stems_as_the_sqlite_one(pg_db, kek, tmp_path):
    with _open(pg_db, kek, tmp_path / "a") as s:
        s.write("n1", "She was running along the rivers", tenant=T, subject="zq", purpose="support")
        s.write("n2", "a note about kettles", tenant=T, subject="zq", purpose="support")
        text = s._origin.text
        assert text.index_terms(["running", "runs", "rivers"]) == ["run", "run", "river"]
        hits = s.recall("runs river", tenant=T, purpose="support", k=1)
        assert [h.key for h in hits] == ["n1"] and "fts" in hits[0].via


def test_the_vector_search_checks_the_words_candidates_in_its_statement(pg_db, kek, tmp_path):
    """``live_scored``: the nearest live records and which of another leg's candidates are
    live, read in one statement of the snapshot, each with its cosine to the query as the
    server computes it (the dot product of the stored vector: what recall computes from it)."""
    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        a.write("n1", "Alice prefers green tea in the morning", tenant=T, subject="alice", purpose="p")
        a.write("n2", "Bob prefers black coffee in the morning", tenant=T, subject="bob", purpose="p")
        a.write("n3", "Carol takes the night train", tenant=T, subject="carol", purpose="other")
        tenant = b._tenant(T)
        ids = {}
        for key, purpose in (("n1", "p"), ("n2", "p"), ("n3", "other")):
            got = b._origin.read(tenant, key, purpose, time.time())
            assert got is not None
            ids[key] = got[0].id
        vec = b.embedder.embed(["green tea in the morning"])[0]
        ann = {p.name: p for p in b._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        from efface.paths.base import Query

        q = Query(tenant, "green tea", vec, "p", None, time.time())
        stored = b._origin.embeddings(list(ids.values()))
        with b._origin.snapshot():
            near, others = ann.live_scored(q, 1, [ids["n2"], ids["n3"]])
            a.forget(tenant=T, subject="bob")  # committed by the other store meanwhile
            during = ann.live_scored(q, 10, [ids["n2"]])
        after = ann.live_scored(q, 10, [ids["n1"], ids["n2"], ids["n3"]])
        assert list(near) == [ids["n1"]] and list(others) == [ids["n2"]]  # n3: another purpose
        assert set(during[0]) == {ids["n1"], ids["n2"]} and list(during[1]) == [ids["n2"]]
        assert set(after[0]) == {ids["n1"]} and list(after[1]) == [ids["n1"]]
        from efface.vectors import read_many

        m = read_many([stored[ids["n1"]], stored[ids["n2"]]])
        want = m @ np.asarray(vec, dtype=np.float32)
        assert np.allclose([near[ids["n1"]], others[ids["n2"]]], want, atol=1e-6)
        assert [h.key for h in b.recall("green tea", tenant=T, purpose="p")] == ["n1"]
        a.write("n4", "Alice drinks green tea at night", tenant=T, subject="dora", purpose="p")
        by_subject = Query(tenant, "green tea", vec, "p", "alice", time.time())
        near, others = ann.live_scored(by_subject, 10, [ids["n1"], ids["n3"]])
        assert list(near) == [ids["n1"]] and list(others) == [ids["n1"]]  # dora's n4 is not alice's
        hits = b.recall("green tea", tenant=T, purpose="p", subject="alice")
        assert [h.key for h in hits] == ["n1"]


def test_the_closing_read_ends_the_snapshot_with_its_rows(pg_db, kek, tmp_path):
    """Recall's final rows and the snapshot's COMMIT go in one round trip
    (:class:`~efface.origin.capabilities.ClosingRead`): the rows come from the snapshot (a
    forget committed by another store meanwhile does not take them away), their data keys
    with them (none cached: nothing is fetched after the commit), and a read after it in the
    same snapshot block raises instead of reading outside the snapshot."""
    import pytest

    from efface.origin.capabilities import ClosingRead

    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        a.write("n1", "Alice prefers green tea in the morning", tenant=T, subject="alice", purpose="p")
        a.write("n2", "Bob prefers black coffee in the morning", tenant=T, subject="bob", purpose="p")
        origin = b._origin
        assert isinstance(origin, ClosingRead)
        ids = sorted(origin.records_by_id_closing([1, 2, 3]))  # outside a snapshot: an ordinary read
        assert len(ids) == 2
        origin._sealer.forget_all()  # no data key cached: they must come with the rows
        with origin.snapshot():
            assert sorted(origin.records_by_id(ids)) == ids
            a.forget(tenant=T, subject="alice")  # committed by the other store meanwhile
            rows = origin.records_by_id_closing(ids)
            assert sorted(r.text for r in rows.values()) == [
                "Alice prefers green tea in the morning",
                "Bob prefers black coffee in the morning",
            ]
            with pytest.raises(RuntimeError, match="closing read"):
                origin.records_by_id(ids)
        with origin.snapshot():  # the next snapshot is an ordinary one, after the forget
            assert [r.text for r in origin.records_by_id(ids).values()] == ["Bob prefers black coffee in the morning"]
        hits = b.recall("green tea in the morning", tenant=T, purpose="p", k=5)
        assert [h.key for h in hits] == ["n2"]


def test_the_vector_statement_is_prepared_in_a_snapshot_and_never_planned_generically(pg_db, kek, tmp_path):
    """Inside a snapshot recall's vector statement is a prepared statement (parsed once per
    connection), and the snapshot's transaction has every prepared statement planned for its
    own arguments (``plan_cache_mode``, ``PLANNED_IN_SNAPSHOT``): a generic plan, made without
    the tenant and the limit, is never used, however often it runs. The setting ends with the
    snapshot."""
    with _open(pg_db, kek, tmp_path / "a") as s:
        for i in range(12):
            s.write(f"n{i}", f"note {i} about green tea and kettles", tenant=T, subject=f"s{i % 3}", purpose="p")
        tenant = s._tenant(T)
        vec = s.embedder.embed(["green tea"])[0]
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        from efface.paths.base import Query

        q = Query(tenant, "green tea", vec, "p", None, time.time())
        origin = s._origin
        with origin.snapshot():
            for _ in range(8):
                near, _others = ann.live_scored(q, 10, [1, 2, 3])
                assert len(near) == 10 // NEAR_SHARE
            conn = origin._local.conn
            mode = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()
            plans = conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
                ("%ORDER BY r.embedding <=>%",),
            ).fetchall()
        assert mode == ("force_custom_plan",)
        assert len(plans) == 1 and plans[0][0] == 0 and plans[0][1] >= 8
        with origin._pool.connection() as other:  # the setting went with the snapshot's transaction
            assert other.execute("SELECT current_setting('plan_cache_mode')").fetchone() == ("auto",)
        assert [h.key for h in s.recall("green tea", tenant=T, purpose="p", k=3)]  # and outside a snapshot too
        near, _others = ann.live_scored(q, 10, [1])
        assert len(near) == 10 // NEAR_SHARE


def test_a_tenant_holding_most_of_a_large_store_recalls_on_a_generic_plan(pg_db, kek, tmp_path, monkeypatch):
    """Recall's vector statement, beginning its snapshot for a tenant that holds at least half
    of a store of ``GENERIC_FROM`` records or more (as the word index counts them), runs on a
    generic plan (``PLANNED_GENERIC``: no planning a recall), with the rows a plan made for its
    own arguments gives; any other tenant's is planned for its own arguments
    (``PLANNED_IN_SNAPSHOT``). The setting ends with the snapshot."""
    from efface.origin.postgres import origin as pg_origin
    from efface.paths.base import Query

    monkeypatch.setattr(pg_origin, "GENERIC_FROM", 20)
    with _open(pg_db, kek, tmp_path / "a") as s:
        for i in range(24):
            s.write(f"n{i}", f"note {i} about green tea and kettles", tenant="big", subject=f"s{i % 3}", purpose="p")
        for i in range(3):
            s.write(f"m{i}", f"memo {i} about green tea", tenant="small", subject="s", purpose="p")
        o = s._origin
        big, small = s._tenant("big"), s._tenant("small")
        assert o._dominant(big) and not o._dominant(small)
        vec = s.embedder.embed(["green tea"])[0]
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        sql = "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s"
        for tenant, mode, plan in ((big, "force_generic_plan", 0), (small, "force_custom_plan", 1)):
            for _ in range(3):
                now = time.time()
                with o.snapshot_deferred():
                    near, _others = ann.live_scored(Query(tenant, "green tea", vec, "p", None, now), 10, [])
                    conn = o._local.conn
                    got = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()
                    before = conn.execute(sql, ("%ORDER BY r.embedding <=>%",)).fetchall()
                assert got == (mode,)
                assert len(before) == 1 and before[0][plan] >= 1
                exact = o.nearest(vec, 10 // NEAR_SHARE, tenant, "p", None, now)  # planned for its own arguments
                assert set(near) == set(exact) and len(near) == min(10 // NEAR_SHARE, 24 if tenant == big else 3)
        with o._pool.connection() as other:  # the setting went with the snapshot's transaction
            assert other.execute("SELECT current_setting('plan_cache_mode')").fetchone() == ("auto",)
        assert [h.key for h in s.recall("green tea", tenant="big", purpose="p", k=3)]


def _round_trips(monkeypatch, conn_cls):
    """Record each statement sent and the round trips made (a pipeline block is one; a
    statement outside one is one)."""
    sent: list[tuple[str, bool]] = []
    trips: list[int] = []
    execute, pipeline = conn_cls.execute, conn_cls.pipeline

    def spy_execute(self, query, params=None, **kw):
        inside = self._pipeline is not None
        sent.append((str(query).split()[0], inside))
        if not inside:
            trips.append(1)
        return execute(self, query, params, **kw)

    def spy_pipeline(self):
        trips.append(1)
        return pipeline(self)

    from efface.origin.postgres import pipeline as libpq_pipeline

    begin = libpq_pipeline.begin

    def spy_begin(conn, begin_sql, epoch_sql, then, *, last):
        """The first round trip, sent through libpq's pipeline (efface.origin.postgres.pipeline)."""
        trips.append(1)
        for sql in [*begin_sql, epoch_sql, then[0], *(["COMMIT"] if last else [])]:
            sent.append((sql.split()[0], True))
        return begin(conn, begin_sql, epoch_sql, then, last=last)

    monkeypatch.setattr(conn_cls, "execute", spy_execute)
    monkeypatch.setattr(conn_cls, "pipeline", spy_pipeline)
    monkeypatch.setattr(libpq_pipeline, "begin", spy_begin)
    return sent, trips


def test_a_recall_begins_its_snapshot_with_the_vector_statement(pg_db, kek, tmp_path, monkeypatch):
    """Recall's snapshot begins with its first statement (DeferredSnapshot): BEGIN, the lock
    on records and claims (taken before the snapshot: online.reader_lock), the snapshot's
    epoch and the vector statement in one round trip, the final rows and COMMIT
    in the other; nothing else is sent. The words were ranked before it began, at the index's
    own epoch: nothing was committed since, so they are not ranked again."""
    import psycopg

    from efface.origin.capabilities import DeferredSnapshot

    with _open(pg_db, kek, tmp_path / "a") as s:
        for i in range(6):
            s.write(f"n{i}", f"note {i} about green tea and kettles", tenant=T, subject="s", purpose="p")
        s.write("x", "the weekly report goes out on fridays", tenant=T, subject="s", purpose="p")
        assert isinstance(s._origin, DeferredSnapshot)
        s.recall("green tea", tenant=T, purpose="p", k=3)  # the purpose known, the statement prepared
        sent, trips = _round_trips(monkeypatch, psycopg.Connection)
        hits = s.recall("weekly report", tenant=T, purpose="p", k=3)
        monkeypatch.undo()
        assert hits[0].key == "x" and "fts" in hits[0].via
        assert [w for w, _ in sent] == ["BEGIN", "LOCK", "SELECT", "(SELECT", "SELECT", "COMMIT"], sent
        assert all(inside for _, inside in sent) and len(trips) == 2


def test_words_ranked_before_the_snapshot_are_ranked_again_when_another_store_wrote(pg_db, kek, tmp_path):
    """A deferred snapshot that begins past the epoch the word index answered at (another
    store committed since this one last read the change log) has recall rank the words again
    in it: the other store's record is found by its words (``fts`` in ``via``) from this
    store's next recall, and a record it forgot meanwhile is not served."""
    with _open(pg_db, kek, tmp_path / "a") as a, _open(pg_db, kek, tmp_path / "b") as b:
        a.write("n1", "Alice prefers green tea in the morning", tenant=T, subject="alice", purpose="p")
        a.write("n2", "Bob keeps a vermilion kettle", tenant=T, subject="bob", purpose="p")
        assert [h.key for h in b.recall("vermilion kettle", tenant=T, purpose="p", k=1)] == ["n2"]
        applied = b._origin.text.applied()
        far = np.zeros(b.embedder.dim, dtype=np.float32)
        far[-1] = 1.0  # a vector no query of these words is near: found by its words or not at all
        a.write_many(
            [{"key": "n3", "text": "Zebulon polishes the vermilion kettle"}],
            tenant=T,
            subject="zeb",
            purpose="p",
            embeddings=[far],
        )
        a.forget(tenant=T, subject="bob")
        assert b._origin.text.applied() == applied  # b has not read the change log since
        hits = b.recall("vermilion kettle", tenant=T, purpose="p", k=5)
        assert [h.key for h in hits][:1] == ["n3"] and "fts" in hits[0].via
        assert "n2" not in [h.key for h in hits]
        assert b._origin.text.applied() > applied


def test_a_deferred_snapshot_whose_first_statement_fails_leaves_no_transaction_open(pg_db, kek, tmp_path):
    """The deferred snapshot's BEGIN goes with its first statement: when that statement fails
    (here a vector of the wrong dimension), the block's end rolls the transaction back, and
    the pooled connection serves the next recall in a snapshot of its own."""
    import psycopg
    import pytest

    from efface.paths.base import Query

    with _open(pg_db, kek, tmp_path / "a") as s:
        s.write("n1", "Alice prefers green tea in the morning", tenant=T, subject="alice", purpose="p")
        ann = {p.name: p for p in s._paths}["ann"]
        assert isinstance(ann, OriginVectors)
        origin = s._origin
        q = Query(s._tenant(T), "green tea", np.ones(3, dtype=np.float32), "p", None, time.time())
        with pytest.raises(psycopg.Error), origin.snapshot_deferred():
            ann.live_scored(q, 5, [1])
        with origin._pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert [h.key for h in s.recall("green tea", tenant=T, purpose="p", k=1)] == ["n1"]
