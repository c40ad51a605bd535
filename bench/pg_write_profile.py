#!/usr/bin/env python
"""Where a ``write_many`` batch goes on PostgreSQL, beside the floor of the same vectors (issue #34).

    PYTHONPATH=src python bench/pg_write_profile.py --n 30000 > /tmp/pg-write.json

Starts PostgreSQL 18 + pgvector from the wheel (bench/pg_local.py) with ``pg_stat_statements``
loaded, builds a store of ``--n`` records (the hashing embedder, one tenant, batches of
``--batch``), then times ``--batches`` more batches one by one: wall time, this process's CPU,
the server's CPU (every server process, from /proc), the statements sent and their server time
(``pg_stat_statements``); one more batch under cProfile (its top functions on stderr and in the
JSON). The floor: the same vectors into a bare table with the same HNSW index (``COPY`` in
binary, and ``executemany``), and into one without the index. One JSON document on stdout;
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402
from pg_speed import header, log, open_pg  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus  # noqa: E402

SETTINGS = {
    **pg_local.BENCH_SETTINGS,
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
}


def server_cpu(postmaster: int) -> float:
    """CPU seconds (user + system) of the server: the postmaster and every child it has now."""
    total = 0.0
    try:
        p = psutil.Process(postmaster)
        for q in [p, *p.children(recursive=True)]:
            with_ = q.cpu_times()
            total += with_.user + with_.system
    except psutil.Error:
        pass
    return total


def postmaster_pid(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    return psutil.Process(backend).ppid()


def statements(url: str, top: int = 14) -> list[dict]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT calls, rows, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), query"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " ORDER BY total_exec_time DESC LIMIT %s",
            (top,),
        ).fetchall()
    return [
        {"calls": c, "rows": r, "exec_ms": float(e), "plan_ms": float(p), "query": " ".join(q.split())[:160]}
        for c, r, e, p, q in rows
    ]


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")


def timed_batches(store, corpus, vecs, start: int, count: int, batch: int, pm: int) -> dict:
    walls, cpus, srvs = [], [], []
    for b in range(count):
        lo = start + b * batch
        items = [corpus.item(i) for i in range(lo, lo + batch)]
        s0, c0, t0 = server_cpu(pm), time.process_time(), time.perf_counter()
        store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[lo : lo + batch])
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        srvs.append(server_cpu(pm) - s0)
    return {
        "batches": count,
        "batch": batch,
        "wall_s": [round(x, 3) for x in walls],
        "client_cpu_s": [round(x, 3) for x in cpus],
        "server_cpu_s": [round(x, 3) for x in srvs],
        "records_per_s": round(count * batch / sum(walls), 1),
    }


def floor(url: str, vecs: np.ndarray, n: int, batch: int, count: int, pm: int) -> dict:
    """The same vectors (and a 600-byte payload standing for the sealed columns) into bare tables."""
    dim = vecs.shape[1]
    out: dict = {}
    payload = os.urandom(600)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        for name, index in (("floor_hnsw", True), ("floor_plain", False)):
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            conn.execute(
                f"CREATE TABLE {name}(id bigserial PRIMARY KEY, tenant text, payload bytea, embedding vector({dim}))"
            )
            conn.execute(f"ALTER TABLE {name} ALTER COLUMN embedding SET STORAGE MAIN")
            if index:
                conn.execute(f"CREATE INDEX ON {name} USING hnsw (embedding vector_cosine_ops)")
            t0 = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy(f"COPY {name}(tenant, payload, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp,
            ):
                cp.set_types(["text", "bytea", "vector"])
                for i in range(n):
                    cp.write_row((TENANT, payload, vecs[i]))
            load = time.perf_counter() - t0
            res = {"load_s": round(load, 1), "load_per_s": round(n / load, 1)}
            for h, how in enumerate(("copy_binary", "executemany")):
                walls, srvs = [], []
                for b in range(count):
                    lo = n + (h * count + b) * batch  # new vectors each time (a duplicate is cheaper)
                    rows = [(TENANT, payload, vecs[i]) for i in range(lo, lo + batch)]
                    s0, t0 = server_cpu(pm), time.perf_counter()
                    with conn.transaction():
                        if how == "copy_binary":
                            with (
                                conn.cursor() as cur,
                                cur.copy(
                                    f"COPY {name}(tenant, payload, embedding) FROM STDIN WITH (FORMAT BINARY)"
                                ) as cp,
                            ):
                                cp.set_types(["text", "bytea", "vector"])
                                for r in rows:
                                    cp.write_row(r)
                        else:
                            with conn.cursor() as cur:
                                cur.executemany(
                                    f"INSERT INTO {name}(tenant, payload, embedding) VALUES (%s, %s, %s)", rows
                                )
                    walls.append(time.perf_counter() - t0)
                    srvs.append(server_cpu(pm) - s0)
                res[how] = {
                    "wall_s": [round(x, 3) for x in walls],
                    "server_cpu_s": [round(x, 3) for x in srvs],
                    "records_per_s": round(count * batch / sum(walls), 1),
                }
            out[name] = res
            log(f"floor {name}: {json.dumps(res)}")
            conn.execute(f"DROP TABLE {name}")
    return out


def worker(args) -> None:
    """``--worker URL``: one store at URL, written batch by batch as the driver says on stdin
    (``lo hi``), each batch's wall time, CPU and round trips answered as a JSON line."""
    total = args.n + args.batches * args.batch
    corpus = Corpus(total)
    vecs = HashingEmbedder().embed(corpus.texts)
    with open_pg(args.worker, Path(args.tmp)) as store:
        print("ready", flush=True)
        for line in sys.stdin:
            lo, hi = (int(x) for x in line.split())
            items = [corpus.item(i) for i in range(lo, hi)]
            with count_round_trips() as trips:
                c0, t0 = time.process_time(), time.perf_counter()
                store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[lo:hi])
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(json.dumps({"wall": wall, "cpu": cpu, "trips": trips.n}), flush=True)


def wal_lsn(url: str) -> int:
    """The server's WAL insert position, in bytes (WAL written between two readings)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0])


def ab(cluster, args, tmp: Path) -> dict:
    """Two stores of ``--n`` records on one server, written batch by batch in turn (the same
    records) by two processes: one running the efface of ``--before`` (a ``src`` directory),
    one this worktree's."""
    srcs = {"before": args.before, "after": str(HERE.parent / "src")}
    procs = {}
    for label, src in srcs.items():
        (tmp / label).mkdir()
        url = cluster.fresh()
        procs[label] = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                url,
                "--tmp",
                str(tmp / label),
                "--n",
                str(args.n),
                "--batches",
                str(args.batches),
                "--batch",
                str(args.batch),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": src},
        )
        assert procs[label].stdout.readline().strip() == "ready"
    pm = postmaster_pid(url)
    rows: dict = {
        label: {
            "src": srcs[label],
            "wall_s": [],
            "client_cpu_s": [],
            "server_cpu_s": [],
            "round_trips": [],
            "wal_mib": [],
        }
        for label in srcs
    }
    try:
        total = args.n + args.batches * args.batch
        for b, lo in enumerate(range(0, total, args.batch)):
            for label in ("before", "after") if b % 2 == 0 else ("after", "before"):
                p = procs[label]
                s0, w0 = server_cpu(pm), wal_lsn(url)
                p.stdin.write(f"{lo} {lo + args.batch}\n")
                p.stdin.flush()
                got = json.loads(p.stdout.readline())
                srv, wal = server_cpu(pm) - s0, wal_lsn(url) - w0
                if lo >= args.n:  # the timed batches, past the build
                    r = rows[label]
                    r["wall_s"].append(round(got["wall"], 3))
                    r["client_cpu_s"].append(round(got["cpu"], 3))
                    r["server_cpu_s"].append(round(srv, 3))
                    r["round_trips"].append(got["trips"])
                    r["wal_mib"].append(round(wal / 2**20, 2))
            if lo % 10000 == 0:
                log(f"ab: {lo} written to each")
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(timeout=60)
    for r in rows.values():
        r["records_per_s"] = round(len(r["wall_s"]) * args.batch / sum(r["wall_s"]), 1)
        for k in ("wall_s", "client_cpu_s", "server_cpu_s", "wal_mib"):
            r[f"mean_{k}"] = round(sum(r[k]) / len(r[k]), 3)
    return rows


class count_round_trips:
    """Counts the statements the writer sends that wait for their answer (``Connection.execute``
    outside a pipeline, each one round trip) while the block runs."""

    def __enter__(self):
        self.n = 0
        self._saved = psycopg.Connection.execute
        me = self

        def execute(conn, *a, **kw):
            me.n += 1
            return me._saved(conn, *a, **kw)

        psycopg.Connection.execute = execute
        return self

    def __exit__(self, *exc):
        psycopg.Connection.execute = self._saved


def wal_experiment(args, vecs) -> list[dict]:
    """The floor's batches (``COPY`` into a bare table with the HNSW index, after ``--n``
    rows) on servers that checkpoint often or seldom: WAL written, full-page images among it
    (``pg_stat_wal``), the server's CPU and the wall time per batch."""
    out = []
    payload = os.urandom(600)
    for wal_size in ("64MB", "4GB"):
        settings = {**SETTINGS, "max_wal_size": wal_size, "fsync": "on", "synchronous_commit": "on"}
        with pg_local.cluster("start", settings) as cluster:
            url = cluster.fresh()
            pm = postmaster_pid(url)
            with psycopg.connect(url, autocommit=True) as conn:
                register_vector(conn)
                conn.execute(
                    f"CREATE TABLE f(id bigserial PRIMARY KEY, payload bytea, embedding vector({vecs.shape[1]}))"
                )
                conn.execute("ALTER TABLE f ALTER COLUMN embedding SET STORAGE MAIN")
                conn.execute("CREATE INDEX ON f USING hnsw (embedding vector_cosine_ops)")
                rows = {"max_wal_size": wal_size, "wall_s": [], "server_cpu_s": [], "wal_mib": [], "fpi": []}
                for lo in range(0, args.n + args.batches * args.batch, args.batch):
                    stat = "SELECT wal_bytes, wal_fpi FROM pg_stat_wal"
                    w0, f0 = conn.execute(stat).fetchone()
                    s0, t0 = server_cpu(pm), time.perf_counter()
                    copy = "COPY f(payload, embedding) FROM STDIN WITH (FORMAT BINARY)"
                    with conn.transaction(), conn.cursor() as cur, cur.copy(copy) as cp:
                        cp.set_types(["bytea", "vector"])
                        for i in range(lo, lo + args.batch):
                            cp.write_row((payload, vecs[i]))
                    wall, srv = time.perf_counter() - t0, server_cpu(pm) - s0
                    w1, f1 = conn.execute(stat).fetchone()
                    if lo >= args.n:
                        rows["wall_s"].append(round(wall, 3))
                        rows["server_cpu_s"].append(round(srv, 3))
                        rows["wal_mib"].append(round(float(w1 - w0) / 2**20, 2))
                        rows["fpi"].append(int(f1 - f0))
                log(f"wal experiment: {json.dumps(rows)}")
                out.append(rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=30000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--no-floor", action="store_true")
    ap.add_argument("--before", help="a src directory: only compare its write path with this worktree's, in turn")
    ap.add_argument("--wal", action="store_true", help="only the floor's WAL, checkpointing often or seldom")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    total = args.n + (2 * args.batches + 1) * args.batch
    corpus = Corpus(total)
    vecs = HashingEmbedder().embed(corpus.texts)
    result: dict = {**header("pg_write_profile", args.n), "settings": SETTINGS}
    if args.wal:
        result["wal"] = wal_experiment(args, np.asarray(vecs))
        print(json.dumps(result, indent=2))
        return
    tmp = Path(tempfile.mkdtemp(prefix="efface-pg-write-"))
    try:
        with pg_local.cluster("start", SETTINGS) as cluster:
            if args.before:
                result["ab"] = ab(cluster, args, tmp)
                log(f"ab: {json.dumps(result['ab'])}")
                print(json.dumps(result, indent=2))
                return
            url = cluster.fresh()
            pm = postmaster_pid(url)
            with open_pg(url, tmp) as store:
                t0 = time.perf_counter()
                build = []
                for lo in range(0, args.n, args.batch):
                    hi = min(lo + args.batch, args.n)
                    t1 = time.perf_counter()
                    items = [corpus.item(i) for i in range(lo, hi)]
                    store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[lo:hi])
                    build.append(round(time.perf_counter() - t1, 3))
                took = time.perf_counter() - t0
                result["build"] = {
                    "records": args.n,
                    "seconds": round(took, 1),
                    "records_per_s": round(args.n / took, 1),
                }
                result["build"]["batch_s_every_5"] = build[::5]
                log(f"built {args.n} in {took:.0f} s ({args.n / took:.0f}/s)")
                pg_local.Cluster.analyze(store)
                reset(url)
                result["write_many"] = timed_batches(store, corpus, vecs, args.n, args.batches, args.batch, pm)
                result["statements"] = statements(url)
                log(f"write_many: {json.dumps(result['write_many'])}")
                prof = cProfile.Profile()
                lo = args.n + args.batches * args.batch
                items = [corpus.item(i) for i in range(lo, lo + args.batch)]
                prof.runcall(
                    store.write_many, items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[lo : lo + args.batch]
                )
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
                log(f"profile of one batch:\n{buf.getvalue()}")
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
                result["profile_cumulative"] = buf.getvalue().splitlines()[:70]
            if not args.no_floor:
                result["floor"] = floor(url, np.asarray(vecs), args.n, args.batch, args.batches, pm)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
