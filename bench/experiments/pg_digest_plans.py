#!/usr/bin/env python
"""Forms of the check "which of these 100 vectors does a live row hold, byte for byte", on a bare
table of ``N`` random 384-dimension vectors (a 600-byte payload beside each, as a sealed note
stands beside a record's vector) with a btree index on the digest of each vector's binary form
(``md5(vector_send(e))::uuid``, efface's schema migration 8), no planner statistics on it.

    PYTHONPATH=src python bench/experiments/pg_digest_plans.py 1000000 > /tmp/pg-digest-plans.json

* ``main``: ``e = ANY(vectors)``, what efface ran before migration 8 (every row compared);
* ``any_array``: ``digest(e) = ANY(ARRAY(SELECT digest(v) ...))``, the index through one array;
* ``lateral``: for each vector, ``LATERAL (SELECT 1 ... WHERE digest(e) = digest(v) AND
  vector_send(e) = vector_send(v) LIMIT 1)``: what efface runs (txmore.HELD_VECTORS).

Each timed 6 times, the forms alternating, wall time from this process (binary results), and
the plan of the last two with ``EXPLAIN ANALYZE``. (A third index form, ``EXISTS``, is left
out: planned as a hash semi-join over every row, 17.7 s at 1M.) One JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from pgvector.psycopg import register_vector

import pg_local

DIGEST = "(md5(vector_send({})))::uuid"
FORMS = {
    "main": "SELECT DISTINCT e FROM t WHERE e = ANY(%s)",
    "any_array": f"SELECT DISTINCT e FROM t WHERE {DIGEST.format('e')}"
    f" = ANY(ARRAY(SELECT {DIGEST.format('u.v')} FROM unnest(%s::vector[]) AS u(v)))",
    "lateral": "SELECT u.i FROM unnest(%s::vector[]) WITH ORDINALITY AS u(v, i) CROSS JOIN LATERAL"
    f" (SELECT 1 FROM t r WHERE {DIGEST.format('r.e')} = {DIGEST.format('u.v')}"
    " AND vector_send(r.e) = vector_send(u.v) LIMIT 1) AS held",
}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    out: dict = {"n": n, "load_before": [round(x, 2) for x in os.getloadavg()]}
    with pg_local.cluster("start") as cl:
        c = psycopg.connect(cl.fresh(), autocommit=True)
        register_vector(c)
        c.execute("CREATE TABLE t(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload bytea, e vector(384))")
        c.execute("ALTER TABLE t ALTER COLUMN e SET STORAGE MAIN")
        t0 = time.time()
        for a in range(0, n, 100000):
            c.execute(
                "INSERT INTO t(payload, e) SELECT decode(repeat('ab', 600), 'hex'),"
                " (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 384) WHERE g > 0)"
                " FROM generate_series(1, %s) AS g",
                (min(100000, n - a),),
            )
        out["load_s"] = round(time.time() - t0, 1)
        t0 = time.time()
        c.execute(f"CREATE INDEX t_h ON t (({DIGEST.format('e')}))")
        c.execute("ALTER INDEX t_h ALTER COLUMN 1 SET STATISTICS 0")
        out["create_index_s"] = round(time.time() - t0, 2)
        c.execute("ANALYZE t")
        probe = [r[0] for r in c.execute("SELECT e FROM t WHERE id %% %s = 0", (n // 100,)).fetchall()]
        res: dict = {k: [] for k in FORMS}
        for i in range(6):
            for way in list(FORMS) if i % 2 == 0 else list(FORMS)[::-1]:
                t0 = time.perf_counter()
                got = len(c.execute(FORMS[way], (probe,), binary=True).fetchall())
                res[way].append(round((time.perf_counter() - t0) * 1000, 1))
                assert got == len(probe), (way, got)
        out["wall_ms"] = res
        out["plans"] = {
            k: [r[0] for r in c.execute("EXPLAIN (ANALYZE, BUFFERS) " + FORMS[k], (probe,)).fetchall()]
            for k in ("any_array", "lateral")
        }
        out["table_mb"], out["index_mb"] = c.execute(
            "SELECT pg_total_relation_size('t') / 1048576, pg_relation_size('t_h') / 1048576"
        ).fetchone()
        c.close()
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
