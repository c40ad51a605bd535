"""Erased vectors on PostgreSQL, judged by the byte scan (efface.erasure.verify): a vector left
in a page or in the WAL is found, while the hashing embedder's sparse vectors, which share a
16-byte window with some live vector by chance, are not mistaken for one (before this rule a
store of 3,000 hashing-embedded records said ``present`` after the maintenance, and at 100k
every forget stayed ``unreadable``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import efface
from efface.origin.postgres import maintenance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_store import Corpus

T, P = "acme", "assistant"


def _open(pg_db, kek, cache):
    return efface.open(pg_db.url, embedder="hashing", kek_file=kek, cache_dir=cache, background=False)


def _vector_hits(store, handle, pg_db) -> int:
    """Windows of the erasure's vectors the verifier counts in the database's files and WAL."""
    scan = store._verifier._scan_fn(store._origin.evidence(handle)["fingerprints"], [0])
    with pg_db.connect() as conn:
        conn.execute("CHECKPOINT")
        dboid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    data_dir = str(pg_db.server.datadir)
    n = 0
    for files in (maintenance.db_files(f"{data_dir}/base/{dboid}"), maintenance.wal_files(data_dir)):
        found, _ = scan(files, data_dir, ())
        n += sum(per.get("pgvector", 0) for per in found.values())
    return n


def test_an_erased_dense_vector_is_found_until_the_maintenance(pg_db, kek, tmp_path):
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((40, 384)).astype("float32")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    with _open(pg_db, kek, tmp_path / "c") as s:
        items = [
            {"key": f"k{i}", "text": f"a note about topic number {i:04d}", "subject": f"s{i % 4}"} for i in range(40)
        ]
        s.write_many(items, tenant=T, purpose=P, embeddings=vecs)
        r = s.forget(tenant=T, subject="s1")
        assert len(r.erased) == 10
        assert _vector_hits(s, r.handle, pg_db) > 0, "the deleted rows' vectors are still in the pages"
        assert s.wait(r.handle, 60, until="erased").erased
        assert _vector_hits(s, r.handle, pg_db) == 0
        v = s.verify(r.handle)
        assert v.level == "erased", [(c.name, c.detail) for c in v.failed]


def test_sparse_vectors_that_share_windows_with_live_ones_reach_erased(pg_db, kek, tmp_path):
    """bench/bench_store.py's synthetic memories (3,000, 100 a subject), the hashing embedder's
    vectors: three subjects forgotten while a second store reads and recalls; each verifies
    ``erased`` (before the rule, the third said ``present`` for 2 windows in ``records``)."""
    corpus = Corpus(3000, seed=1234)
    with _open(pg_db, kek, tmp_path / "a") as s, _open(pg_db, kek, tmp_path / "b") as other:
        for a in range(0, corpus.n, 1000):
            s.write_many([corpus.item(i) for i in range(a, a + 1000)], tenant=T, purpose=P)
        other.recall(corpus.texts[5], tenant=T, purpose=P, k=10)
        receipts = []
        for j in range(3, 6):
            receipts.append(s.forget(tenant=T, subject=corpus.subject(j)))
            assert other.read(corpus.key(j), tenant=T, purpose=P) is None
            other.recall(corpus.texts[j], tenant=T, purpose=P, k=10)
        for r in receipts:
            assert s.wait(r.handle, 120, until="erased").erased
            v = s.verify(r.handle)
            assert v.level == "erased", [(c.name, c.detail) for c in v.failed]
