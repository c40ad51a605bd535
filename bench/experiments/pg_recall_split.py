#!/usr/bin/env python
"""Where a PostgreSQL recall's time goes on a store ``bench/pg_alternate.py --keep DIR`` built:
the client's profile (cProfile, 100 recalls), the vector statement's ``EXPLAIN (ANALYZE,
BUFFERS)`` with each recall's own arguments (captured from ``_snapshot_rows``), the plan's
shapes with their buffer hits and reads, the relations' sizes and the server's settings; with
``--words``, the word index's share of the client's CPU (``PgText._ranking``) instead.

    PYTHONPATH=src python bench/experiments/pg_recall_split.py 300000 \
        postgresql://postgres@127.0.0.1:PORT/efface_alt_300000 /tmp/alt-300000 [100] [--words]

One JSON document on stdout (session 29: bench/results/session29/pg-recall-split-*.json); it
asserts nothing."""

import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pg_speed import open_pg

from bench_store import PURPOSE, TENANT, Corpus, pct

argv = [a for a in sys.argv[1:] if a != "--words"]
n, url, keep = int(argv[0]), argv[1], Path(argv[2])
nq = int(argv[3]) if len(argv) > 3 else 100


def words_share() -> None:
    """The word index's CPU (``PgText._ranking``) and the client's, each recall."""
    qs = [q for _k, q in Corpus(n).queries(400)]
    with open_pg(url, keep) as pg:
        t = pg._origin.text
        for q in qs[:20]:
            pg.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        orig, spent, tot = t._ranking, [], []

        def timed(*a, **k):
            c = time.process_time()
            r = orig(*a, **k)
            spent.append((time.process_time() - c) * 1000)
            return r

        t._ranking = timed
        for q in qs:
            c = time.process_time()
            pg.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
            tot.append((time.process_time() - c) * 1000)
    print(json.dumps({"n": n, "words_ms": pct(spent), "client_recall_ms": pct(tot), "load": os.getloadavg()}))


if "--words" in sys.argv:
    words_share()
    sys.exit(0)
corpus = Corpus(n)
queries = [q for _k, q in corpus.queries(400)][:nq]
out = {"n": n, "load_before": os.getloadavg()}
with open_pg(url, keep) as pg:
    o = pg._origin
    captured = []
    orig = o._snapshot_rows

    def wrap(sql, args, *, generic=False):
        captured.append((sql, dict(args) if isinstance(args, dict) else args, generic))
        return orig(sql, args, generic=generic)

    for q in queries[:20]:
        pg.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
    o._snapshot_rows = wrap
    prof = cProfile.Profile()
    prof.enable()
    t0 = time.process_time()
    for q in queries:
        pg.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
    client = (time.process_time() - t0) / len(queries) * 1000
    prof.disable()
    o._snapshot_rows = orig
    out["client_cpu_ms_mean_profiled"] = round(client, 3)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    out["profile_tottime"] = buf.getvalue()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumtime").print_stats(30)
    out["profile_cumtime"] = buf.getvalue()
    vec = [c for c in captured if "embedding <=>" in c[0]]
    out["statements_captured"] = len(captured)
    out["vector_statements"] = len(vec)
    exe, plan, hit, read, also_n, shapes = [], [], [], [], [], {}
    with o._pool.connection() as conn:
        for sql, args, _generic in vec:
            also_n.append(len(str(args.get("also", "")).split(",")) if "also" in args else 0)
            with conn.transaction():
                conn.execute("SET LOCAL hnsw.ef_search = 50")
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, args).fetchone()
            doc = row[0][0] if isinstance(row[0], list) else json.loads(row[0])[0]
            exe.append(doc["Execution Time"])
            plan.append(doc["Planning Time"])
            p = doc["Plan"]
            hit.append(p.get("Shared Hit Blocks", 0))
            read.append(p.get("Shared Read Blocks", 0))

            def walk(node, depth=0, acc=None):
                acc = [] if acc is None else acc
                g = node.get
                acc.append(
                    "  " * depth
                    + f"{node['Node Type']} {g('Index Name', '')} rows={g('Actual Rows')} loops={g('Actual Loops')}"
                    + f" t={g('Actual Total Time')} removed={g('Rows Removed by Filter', 0)}"
                    + f" hit={g('Shared Hit Blocks')} read={g('Shared Read Blocks')}"
                )
                for c in node.get("Plans", []):
                    walk(c, depth + 1, acc)
                return acc

            lines = walk(p)
            key = "\n".join(line.split(" rows=")[0] for line in lines)
            shapes.setdefault(key, []).append("\n".join(lines))
    out["explain"] = {
        "execution_ms": pct(exe),
        "planning_ms": pct(plan),
        "shared_hit": pct(hit),
        "shared_read": pct(read),
        "also_ids": pct(also_n),
    }
    out["plan_shapes"] = {k: {"count": len(v), "example": v[len(v) // 2]} for k, v in shapes.items()}
    with o._pool.connection() as conn:
        out["sizes"] = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'efface' AND c.relkind IN ('r', 'i')"
                " ORDER BY 2 DESC LIMIT 8"
            ).fetchall()
        }
        out["settings"] = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN"
                " ('shared_buffers', 'work_mem', 'effective_cache_size', 'max_wal_size', 'random_page_cost', 'jit')"
            ).fetchall()
        }
    out["text_index"] = {"docs": o.text.doc_count()}
out["load_after"] = os.getloadavg()
print(json.dumps(out, indent=1, default=str))
