#!/usr/bin/env python
"""The client's CPU for a recall's first round trip on PostgreSQL, through psycopg's pipeline
(as ``PostgresOrigin._begin`` sends it) and through libpq's pipeline directly (``conn.pgconn``:
the four statements flushed once, the rows loaded without a cursor each).

    PYTHONPATH=src python bench/experiments/pg_pipeline_cost.py postgresql://u@h:port/db

The database is any with an efface store in schema ``efface`` (``bench/pg_alternate.py
--keep`` leaves one). The four statements are recall's: ``BEGIN``, the reader lock, the
epoch's ``SELECT``, then one returning 149 rows of (id, float8, bool) like the vector
statement's; each way checked to return the same rows. One JSON document on stdout; nothing
here asserts a time.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer

S = "efface"
LOCK = f"LOCK TABLE {S}.records, {S}.claims IN ACCESS SHARE MODE"
EPOCH = f"SELECT set_config('plan_cache_mode', 'force_custom_plan', true), epoch FROM {S}.epoch_counter"
ROWS = "SELECT r.id, 1.0::float8, true FROM {s}.records r WHERE r.id = ANY({p}::bigint[])"
IDS = "{" + ",".join(str(i) for i in range(1, 150)) + "}"


def cpu_us(fn, n: int = 1000) -> float:
    for _ in range(50):
        fn()
    c = time.process_time()
    for _ in range(n):
        fn()
    return round((time.process_time() - c) / n * 1e6, 1)


def main() -> None:
    conn = psycopg.connect(sys.argv[1], autocommit=True)
    pg = conn.pgconn

    def through_psycopg():
        with conn.pipeline():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(LOCK)
            epoch = conn.execute(EPOCH, prepare=True)
            cur = conn.execute(ROWS.format(s=S, p="%s"), (IDS,), binary=True, prepare=True)
        epoch.fetchone()
        rows = cur.fetchall()
        conn.execute("COMMIT")
        return rows

    pg.send_prepare(b"x_epoch", EPOCH.encode())
    pg.get_result(), pg.get_result()
    pg.send_prepare(b"x_rows", ROWS.format(s=S, p="$1").encode())
    pg.get_result(), pg.get_result()

    def through_libpq():
        pg.nonblocking = 1
        pg.enter_pipeline_mode()
        pg.send_query_params(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", None)
        pg.send_query_params(LOCK.encode(), None)
        pg.send_query_prepared(b"x_epoch", None, result_format=1)
        pg.send_query_prepared(b"x_rows", [IDS.encode()], result_format=1)
        pg.pipeline_sync()
        while pg.flush():
            select.select([], [pg.socket], [])
        results = []
        while True:
            if pg.is_busy():
                select.select([pg.socket], [], [])
            pg.consume_input()
            if pg.is_busy():
                continue
            r = pg.get_result()
            if r is None:
                continue
            if r.status == pq.ExecStatus.PIPELINE_SYNC:
                break
            results.append(r)
        pg.exit_pipeline_mode()
        pg.nonblocking = 0
        tx = Transformer(conn)
        tx.set_pgresult(results[-1])
        rows = tx.load_rows(0, results[-1].ntuples, tuple)
        conn.execute("COMMIT")
        return rows

    same = through_psycopg() == through_libpq()
    out = {"same_rows": same, "load_before": [round(x, 2) for x in os.getloadavg()]}
    for i in range(2):
        out[f"psycopg_pipeline_cpu_us_{i}"] = cpu_us(through_psycopg)
        out[f"libpq_pipeline_cpu_us_{i}"] = cpu_us(through_libpq)
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
