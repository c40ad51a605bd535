#!/usr/bin/env python
"""The PostgreSQL server's CPU for recall's vector statement, split by branch and by filter.

    PYTHONPATH=src python bench/experiments/pg_server_share.py postgresql://u@h:port/efface_alt_100000 DIR

The database and DIR are a kept store of ``bench/pg_alternate.py --n N --keep DIR`` (its key
file and cache). First ``--recalls`` recalls of the bench queries run through the store, each
vector statement captured with its arguments as recall sends it; then each captured statement
is run again in every form below on a connection of its own, prepared in a ``REPEATABLE
READ`` snapshot on the generic plan (as recall runs it for a tenant holding most of a large
store), the forms alternated query by query, and the backend's CPU read from
``/proc/<pid>/schedstat`` around each execute (Linux; the server on this machine):

* ``full``: the statement; ``walk`` / ``words``: its HNSW branch / its words' branch alone;
* ``walk_tenant`` / ``words_tenant``: the same with the tenant filter alone (no quarantine
  anti-join, no claim look-up).

Each form's rows are checked equal to the same query's under ``full`` (by branch). One JSON
document on stdout (p50 and mean per form, ms); nothing here asserts a time. Used for
docs/postgres.md, *Recall*, "The server's share".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from pg_speed import open_pg  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus  # noqa: E402


def capture(url: str, keep: Path, n: int, recalls: int) -> list[tuple[str, dict[str, Any]]]:
    """Recall's vector statements and arguments, as the origin sends them (with word candidates)."""
    got: list[tuple[str, dict[str, Any]]] = []
    with open_pg(url, keep) as store:
        cls = type(store._origin)
        real = cls._snapshot_rows

        def spy(self, sql, args, *, generic=False):
            got.append((sql, dict(args)))
            return real(self, sql, args, generic=generic)

        cls._snapshot_rows = spy
        try:
            for _kind, q in Corpus(n).queries(recalls):
                store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        finally:
            cls._snapshot_rows = real
    return [(sql, a) for sql, a in got if "also" in a]


def forms(sql: str) -> dict[str, str]:
    walk, words = sql.split(" UNION ALL ")
    live = walk[walk.index("r.tenant = %(tenant)s") : walk.index(" ORDER BY")]
    return {
        "full": sql,
        "walk": walk,
        "words": words,
        "walk_tenant": walk.replace(live, "r.tenant = %(tenant)s"),
        "words_tenant": words.replace(live, "r.tenant = %(tenant)s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("keep")
    ap.add_argument("--n", type=int, default=100_000, help="the kept store's record count (its queries)")
    ap.add_argument("--recalls", type=int, default=200)
    args = ap.parse_args()
    captured = capture(args.url, Path(args.keep), args.n, args.recalls)
    conn = psycopg.connect(args.url, autocommit=True)
    register_vector(conn)
    conn.execute("SET hnsw.ef_search = 50")  # as the origin sets it (reads.HNSW_SETTINGS)
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    stat = Path(f"/proc/{conn.execute('SELECT pg_backend_pid()').fetchone()[0]}/schedstat")

    def cpu_ns() -> int:
        return int(stat.read_text().split()[0])

    spent: dict[str, list[float]] = {}
    mismatched: dict[str, int] = {}
    for rep in range(2):  # the first pass warms the buffers and the plans
        for i, (sql, a) in enumerate(captured):
            a = {**a, "q": np.asarray(a["q"], dtype=np.float32)}
            fs = forms(sql)
            rows: dict[str, list[int]] = {}
            for name in list(fs) if i % 2 == 0 else list(fs)[::-1]:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
                t0 = cpu_ns()
                got = conn.execute(fs[name], a, prepare=True, binary=True).fetchall()
                t1 = cpu_ns()
                conn.execute("COMMIT")
                rows[name] = sorted(int(r[0]) for r in got)
                if rep:
                    spent.setdefault(name, []).append((t1 - t0) / 1e6)
            if rep:
                for name, same in (
                    ("walk_tenant", rows["walk_tenant"] == rows["walk"]),
                    ("words_tenant", rows["words_tenant"] == rows["words"]),
                    ("full", rows["full"] == sorted(rows["walk"] + rows["words"])),
                ):
                    mismatched[name] = mismatched.get(name, 0) + (not same)
    print(
        json.dumps(
            {
                "statements": len(captured),
                "server_cpu_ms": {
                    k: {"p50": round(statistics.median(v), 3), "mean": round(statistics.mean(v), 3)}
                    for k, v in spent.items()
                },
                "queries_whose_rows_differ": mismatched,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
