"""The index of ``records`` by a digest of each vector's bytes (schema migration 8, issue #34).

An erasure must know which vectors it deleted no live record still holds (an identical vector
a live record holds is that record's, not residue): before, one statement compared every
record's vector (``embedding = ANY``, a scan of the table, 165 ms of a 271 ms forget at 100k
records); now the digest index gives the candidates and their bytes are compared. A live copy
missed would be counted as residue (the forget never reaches ``erased``); a copy wrongly
assumed would leave residue unchecked. Both are tested here, and the lookup against the exact
scan."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgvector import Vector

import efface
from efface.erasure.fingerprint import Fingerprints
from efface.origin.postgres import schema
from efface.origin.postgres.schema import VECTOR_DIGEST_INDEX, migrate
from efface.origin.postgres.txmore import HELD_NAMES, HELD_VECTORS, NAME_HOLDERS

T, P = "acme", "assistant"
DIM = 384


def _open(pg_db, kek, cache):
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False)


def _vectors(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, DIM)).astype("float32")
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _index_state(conn) -> tuple[bool, int, int]:
    """The digest index: valid, its column's statistics target, its rows in ``pg_statistic``."""
    row = conn.execute(
        "SELECT x.indisvalid, a.attstattarget, (SELECT count(*) FROM pg_statistic s WHERE s.starelid = x.indexrelid)"
        " FROM pg_index x JOIN pg_attribute a ON a.attrelid = x.indexrelid AND a.attnum = 1"
        " WHERE x.indexrelid = to_regclass('efface.' || %s)",
        (VECTOR_DIGEST_INDEX,),
    ).fetchone()
    return (bool(row[0]), int(row[1]), int(row[2])) if row else (False, -1, -1)


def _scanned_vectors(store, handle) -> int:
    """How many erased vectors the erasure's evidence has the byte scan look for."""
    fp = Fingerprints.from_blob(store._origin.evidence(handle)["fingerprints"])
    return int(fp.items.get("pgvector", 0))


def test_a_forgotten_vector_a_live_record_holds_too_reaches_erased_and_the_live_one_serves(pg_db, kek, tmp_path):
    vecs = _vectors(6, 1)
    with _open(pg_db, kek, tmp_path / "c") as s:
        s.write_many(
            [{"key": f"gone{i}", "text": f"a note of the leaver, number {i}", "subject": "leaver"} for i in range(3)],
            tenant=T,
            purpose=P,
            embeddings=vecs[:3],
        )
        # the stayer's first record holds the very vector of the leaver's first (a copy, a
        # duplicate text embedded twice); its second, one of its own
        s.write_many(
            [
                {"key": "kept0", "text": "the stayer's copy of the note", "subject": "stayer"},
                {"key": "kept1", "text": "the stayer's own note", "subject": "stayer"},
            ],
            tenant=T,
            purpose=P,
            embeddings=np.stack([vecs[0], vecs[4]]),
        )
        r = s.forget(tenant=T, subject="leaver")
        assert len(r.erased) == 3
        # the vector the stayer holds is its record's: only the other two are looked for
        assert _scanned_vectors(s, r.handle) == 2
        assert s.wait(r.handle, 120, until="erased").erased
        v = s.verify(r.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
        assert s.read("kept0", tenant=T, purpose=P).text == "the stayer's copy of the note"
        with pg_db.connect() as conn:  # the maintenance's rewrite of records kept the index as it was
            conn.execute("ANALYZE efface.records")
            assert _index_state(conn) == (True, 0, 0)
        hits = s.recall("the stayer's copy of the note", tenant=T, purpose=P, k=2)
        assert "kept0" in [h.key for h in hits]


def test_vectors_no_live_record_holds_are_looked_for_by_the_byte_scan(pg_db, kek, tmp_path):
    vecs = _vectors(5, 2)
    with _open(pg_db, kek, tmp_path / "c") as s:
        items = [{"key": f"k{i}", "text": f"note {i} of its own", "subject": f"s{i % 2}"} for i in range(5)]
        s.write_many(items, tenant=T, purpose=P, embeddings=vecs)
        r = s.forget(tenant=T, subject="s0")
        assert len(r.erased) == 3
        assert _scanned_vectors(s, r.handle) == 3  # not one skipped


def test_a_replaced_vector_held_by_another_record_is_not_residue(pg_db, kek, tmp_path):
    """A write over a record replaces its vector: the old one is noted, and skipped only when
    another live record holds it (here one does, then none does)."""
    vecs = _vectors(3, 3)
    with _open(pg_db, kek, tmp_path / "c") as s:

        def put(key, text, subject, v):
            s.write_many([{"key": key, "text": text, "subject": subject}], tenant=T, purpose=P, embeddings=v[None])

        put("a", "first text", "x", vecs[0])
        put("b", "same vector", "y", vecs[0])
        put("a", "second text", "x", vecs[1])
        r = s.forget(tenant=T, subject="x")
        # the forget deletes a's second vector; its first (replaced) is b's and b lives
        assert _scanned_vectors(s, r.handle) == 1
        r = s.forget(tenant=T, subject="y")
        assert _scanned_vectors(s, r.handle) == 1


class _RolledBack(Exception):
    pass


_f32 = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 2.0**-24]),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
)


@st.composite
def _cases(draw):
    """Live vectors, and deleted ones: copies of live ones, copies with a zero's sign turned
    (an equal vector, other bytes), and vectors of their own."""
    live = draw(st.lists(st.lists(_f32, min_size=4, max_size=4), min_size=1, max_size=8))
    gone = []
    for v in live:
        how = draw(st.sampled_from(["copy", "signed zero", "skip"]))
        if how == "copy":
            gone.append(list(v))
        elif how == "signed zero":
            gone.append([(-x if x == 0 else x) for x in v])
    gone += draw(st.lists(st.lists(_f32, min_size=4, max_size=4), max_size=4))
    return live, gone or [live[0]]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # 3.4e38 has no half
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_cases())
def test_the_digest_lookup_agrees_with_the_exact_scan(pg_db, kek, tmp_path, case):
    """Any float32 vectors pgvector holds (signed zeros, subnormals, the extremes: an older
    store's float32 rows as well as half precision): the vectors :meth:`TxMore.stored_forms`
    keeps as residue are exactly those no live record holds byte for byte, as an exact
    comparison of every record (the statement this lookup replaced) finds them."""
    from efface.embed.hashing import HashingEmbedder

    live, gone = case
    with efface.open(
        pg_db.url, embedder=HashingEmbedder(dim=4), kek_file=kek, cache_dir=tmp_path / "c", background=False
    ) as s:
        try:
            with s._origin.transaction("test", None, time.time()) as tx:
                for i, v in enumerate(live):  # rows of their own, rolled back after the example
                    tx._c.execute(
                        "INSERT INTO efface.records(tenant, key, text, metadata, sources, sealed_by, embedding,"
                        " created_at, updated_at) VALUES ('t', %s, '', '', '', '', %s, 0, 0)",
                        (f"k{i}", Vector(np.asarray(v, dtype="float32"))),
                    )
                for v in gone:
                    tx.note_vector(Vector(np.asarray(v, dtype="float32")))
                kept = dict(tx.stored_forms())["pgvector"]
                # the exact scan: every record's vector, compared by the server, then by bytes
                rows = tx._c.execute("SELECT embedding FROM efface.records").fetchall()
                held = {np.asarray(r[0].to_numpy(), dtype="<f4").tobytes() for r in rows}
                want = [b for b in dict.fromkeys(np.asarray(v, dtype="<f4").tobytes() for v in gone) if b not in held]
                assert kept == want
                raise _RolledBack
        except _RolledBack:
            pass


def test_the_lookup_takes_the_digest_index(pg_db):
    """At 20,000 records (rows as wide as a sealed note's), the plan of the lookup reads the
    digest index, never every record (the planner has no statistics on the digests)."""
    with pg_db.connect() as conn:
        migrate(conn, dim=DIM)
        conn.execute("DROP INDEX efface.records_embedding")  # the HNSW graph: not this test's, and slow to fill
        conn.execute(
            "INSERT INTO efface.records(tenant, key, text, metadata, sources, sealed_by, embedding, created_at,"
            " updated_at) SELECT 't', 'k' || g, decode(repeat('ab', 300), 'hex'), '\\x00', '\\x00', '\\x00',"
            " (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, %s) WHERE g > 0), 0, 0"
            " FROM generate_series(1, 20000) AS g",
            (DIM,),
        )
        conn.execute("ANALYZE efface.records")
        probe = [r[0] for r in conn.execute("SELECT embedding FROM efface.records WHERE id % 200 = 0").fetchall()]
        assert len(probe) == 100
        sql = "EXPLAIN " + HELD_VECTORS.format(s="efface")
        plan = "\n".join(r[0] for r in conn.execute(sql, (probe,)).fetchall())
        assert VECTOR_DIGEST_INDEX in plan and "Seq Scan on records" not in plan, plan
        # no planner statistics sampled from the digests (migration 5's rule)
        n = conn.execute(
            "SELECT count(*) FROM pg_statistic WHERE starelid = to_regclass('efface.' || %s)", (VECTOR_DIGEST_INDEX,)
        ).fetchone()[0]
        assert n == 0


def test_the_name_hash_lookup_reads_an_index_of_each_table_in_a_store_of_many_tenants(pg_db):
    """The same check for the name hashes an erasure deleted: by the hash alone, each table
    through an index led by it, not one led by the tenant (2,000 tenants, 20,000 rows each)."""
    with pg_db.connect() as conn:
        migrate(conn, dim=DIM)
        conn.execute("INSERT INTO efface.keks(kek_id, state, created_at) VALUES ('k', 'current', 0)")
        conn.execute(
            "INSERT INTO efface.records(tenant, key, text, metadata, sources, sealed_by, created_at, updated_at)"
            " VALUES ('t', 'k', '', '', '', '', 0, 0)"
        )
        rows = "FROM generate_series(1, 20000) AS g"
        conn.execute(
            "INSERT INTO efface.mentions(record_id, tenant, subject)"
            f" SELECT g, md5('t' || g % 2000), md5('m' || g) {rows}"
        )
        conn.execute(
            "INSERT INTO efface.subjects(tenant, subject, identifiers, updated_at)"
            f" SELECT md5('t' || g % 2000), md5('s' || g), '', 0 {rows}"
        )
        conn.execute(
            "INSERT INTO efface.data_keys(kid, tenant, subject_h, subject, wrapped, kek_id, created_at)"
            f" SELECT decode(md5('d' || g), 'hex'), md5('t' || g % 2000), md5('h' || g), md5('d' || g), '', 'k', 0"
            f" {rows}"
        )
        conn.execute(
            "INSERT INTO efface.claims(record_id, subject, purpose, basis, created_at)"
            f" SELECT (SELECT min(id) FROM efface.records), md5('c' || g), 'p', 'b', 0 {rows}"
        )
        conn.execute("ANALYZE efface.mentions, efface.subjects, efface.data_keys, efface.claims")
        names = [f"{i:032x}" for i in range(40)]
        plan = "\n".join(
            r[0] for r in conn.execute("EXPLAIN " + HELD_NAMES.format(s="efface"), [names] * len(NAME_HOLDERS))
        )
        assert "Seq Scan" not in plan, plan
        for index in ("claims_subject", "mentions_by_subject", "subjects_by_subject", "data_keys_by_subject"):
            assert index in plan, plan


def test_a_store_made_before_the_index_gets_it_for_its_records(pg_db, kek, tmp_path, monkeypatch):
    """A store at schema 7 (migrations 1-7, as efface made them before this one) with records,
    some holding the same vector; opened by this efface, migration 8 indexes every record, and
    a forget then finds the live copy through the index."""
    vecs = _vectors(4, 4)
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:7])
        m.setattr(schema, "SCHEMA_VERSION", 7)
        with pg_db.connect() as conn:
            schema.migrate(conn, dim=DIM)
            # this efface registers among the log's readers with migration 9's column
            conn.execute("ALTER TABLE efface.change_readers ADD COLUMN snapshot_lock boolean NOT NULL DEFAULT false")
        with _open(pg_db, kek, tmp_path / "c") as s:
            items = [{"key": f"k{i}", "text": f"an old note {i}", "subject": f"s{i % 2}"} for i in range(4)]
            s.write_many(items, tenant=T, purpose=P, embeddings=np.stack([vecs[0], vecs[0], vecs[1], vecs[2]]))
    with pg_db.connect() as conn:
        assert schema.schema_version(conn) == 7
        assert conn.execute("SELECT to_regclass('efface.' || %s)", (VECTOR_DIGEST_INDEX,)).fetchone() == (None,)
    with _open(pg_db, kek, tmp_path / "c") as s:
        with pg_db.connect() as conn:
            assert schema.schema_version(conn) == schema.SCHEMA_VERSION
            conn.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            # every row of the heap has its entry in the index (amcheck's heapallindexed)
            conn.execute(
                "SELECT bt_index_check(to_regclass('efface.' || %s), heapallindexed => true)", (VECTOR_DIGEST_INDEX,)
            )
            conn.execute("ANALYZE efface.records")
            assert _index_state(conn) == (True, 0, 0)
        r = s.forget(tenant=T, subject="s0")  # k0 (vecs[0], held by k1 of s1) and k2 (vecs[1])
        assert sorted(r.erased) and _scanned_vectors(s, r.handle) == 1
        assert s.wait(r.handle, 120, until="erased").erased
