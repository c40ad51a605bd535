#!/usr/bin/env python
"""What a second server sees while the PostgreSQL maintenance runs (issue #34): the outage.

    PYTHONPATH=src python bench/pg_maintenance_outage.py --sizes 30000 --modes full,online > out.json

Starts PostgreSQL 18 + pgvector from the wheel (bench/pg_local.py, the settings of
bench/pg_maintenance.py), grows one store (hashing embedder, one tenant, batches of 1,000) to
each size, then for each ``--modes`` in turn (alternated, so both see the same load): forgets one
subject from store A, and runs A's maintenance (``full``: ``VACUUM FULL`` of every touched table,
the design before; ``online``: ``records`` rewritten online, src/efface/origin/postgres/online.py)
while store B, a second handle on the same database (its own pool, as another server would have),
runs recalls, reads and writes in three threads, back to back. Each operation's start, latency
and error (its type and efface's message class) is kept; reported per kind: count, the longest
latency (the stall), the median outside the maintenance, the errors. One JSON document on
stdout; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402

import efface  # noqa: E402
import pg_local  # noqa: E402
from efface.embed.hashing import HashingEmbedder  # noqa: E402
from pg_maintenance import SETTINGS  # noqa: E402
from pg_speed import header, log  # noqa: E402

from bench_store import PURPOSE, TENANT, Corpus  # noqa: E402


def open_store(url: str, tmp: Path, name: str):
    """A handle on the store at ``url``: the key file shared (one store), its own cache."""
    return efface.open(
        url, embedder="hashing", background=False, kek_file=str(tmp / "kek"), cache_dir=str(tmp / f"cache-{name}")
    )


class Timed:
    """A connection that notes every statement of the maintenance taking over 0.1 s: when,
    how long, its first words (to name what a long operation of the load overlapped)."""

    def __init__(self, conn: psycopg.Connection):
        self._conn = conn
        self.slow: list[tuple[float, float, str]] = []

    def execute(self, sql, *args, **kw):
        t0 = time.perf_counter()
        try:
            return self._conn.execute(sql, *args, **kw)
        finally:
            t1 = time.perf_counter()
            if t1 - t0 > 0.1:
                self.slow.append((t0, t1, " ".join(str(sql).split())[:60]))

    def __getattr__(self, name):
        return getattr(self._conn, name)


class Load:
    """Recalls, reads and writes from store B in three threads until stopped."""

    def __init__(self, store, corpus: Corpus, n: int, mode: str):
        self.store, self.corpus, self.n, self.mode = store, corpus, n, mode
        self.ops: list[tuple[str, float, float, str | None]] = []  # kind, start, seconds, error
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def _loop(self, kind: str) -> None:
        qs = self.corpus.queries(200)
        i = 0
        while not self.stop.is_set():
            i += 1
            t0 = time.perf_counter()
            err = None
            try:
                if kind == "recall":
                    self.store.recall(qs[i % len(qs)][1], tenant=TENANT, purpose=PURPOSE, k=5)
                elif kind == "read":
                    self.store.read(self.corpus.key((i * 7919) % self.n), tenant=TENANT, purpose=PURPOSE)
                else:
                    self.store.write(
                        f"bench/outage/{self.mode}/{i:07d}",
                        f"a new note {i} written during the maintenance",
                        tenant=TENANT,
                        subject=f"writer-{i % 50:03d}",
                        purpose=PURPOSE,
                    )
            except Exception as e:
                err = f"{type(e).__module__}.{type(e).__name__}: {str(e)[:160]}"
            with self.lock:
                self.ops.append((kind, t0, time.perf_counter() - t0, err))

    def __enter__(self):
        self.threads = [
            threading.Thread(target=self._loop, args=(k,), daemon=True) for k in ("recall", "read", "write")
        ]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=600)

    def report(self, t_start: float, t_end: float) -> dict:
        out: dict = {}
        for kind in ("recall", "read", "write"):
            mine = [o for o in self.ops if o[0] == kind]
            during = [o for o in mine if o[1] + o[2] >= t_start and o[1] <= t_end]
            outside = [o[2] for o in mine if o[1] + o[2] < t_start or o[1] > t_end]
            errors: dict[str, int] = {}
            for o in mine:
                if o[3]:
                    errors[o[3]] = errors.get(o[3], 0) + 1
            out[kind] = {
                "ops": len(mine),
                "ops_during_maintenance": len(during),
                "longest_s": round(max((o[2] for o in during), default=0.0), 3),
                "longest_outside_s": round(max(outside, default=0.0), 3),
                "median_outside_ms": round(1000 * statistics.median(outside), 1) if outside else None,
                "errors": errors,
            }
        return out


def one_run(a, b, url: str, corpus: Corpus, n: int, mode: str, subject: str) -> dict:
    o = a._origin
    o._maint.online = mode == "online"
    receipt = a.forget(tenant=TENANT, subject=subject)
    load = Load(b, corpus, n, mode)
    with load:
        time.sleep(3.0)  # the load's own pace before
        with psycopg.connect(url, autocommit=True) as raw:
            conn = Timed(raw)
            t_start = time.perf_counter()
            report = o._maint.run(conn)
            t_end = time.perf_counter()
        time.sleep(3.0)
    out = {
        "mode": mode,
        "records": n,
        "forgotten_records": len(receipt.erased),
        "maintenance_s": round(t_end - t_start, 2),
        "report": report,
        "load": load.report(t_start, t_end),
        "slow_statements": [(round(a - t_start, 2), round(b - a, 2), w) for a, b, w in conn.slow],
        "longest_overlaps": {},
    }
    for kind in ("recall", "read", "write"):
        mine = [op for op in load.ops if op[0] == kind and op[1] + op[2] >= t_start and op[1] <= t_end]
        if mine:
            _k, t0, took, _ = max(mine, key=lambda op: op[2])
            out["longest_overlaps"][kind] = {
                "at_s": round(t0 - t_start, 2),
                "s": round(took, 3),
                "statements": [w for a, b, w in conn.slow if a < t0 + took and b > t0],
            }
    log(f"{n} {mode}: maintenance {t_end - t_start:.1f} s; {json.dumps(out['load'])[:400]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="30000")
    ap.add_argument("--modes", default="full,online", help="maintenance designs, run alternately at each size")
    ap.add_argument("--rounds", type=int, default=1, help="times each mode runs at each size")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    modes = args.modes.split(",")
    corpus = Corpus(max(sizes))
    vecs = HashingEmbedder().embed(corpus.texts)
    result: dict = {**header("pg_maintenance_outage", max(sizes)), "settings": SETTINGS, "runs": []}
    tmp = Path(tempfile.mkdtemp(prefix="efface-pg-outage-"))
    try:
        with pg_local.cluster("start", SETTINGS) as cluster:
            url = cluster.fresh()
            with psycopg.connect(url, autocommit=True) as conn:
                os.environ["EFFACE_PG_DATA_DIR"] = conn.execute("SHOW data_directory").fetchone()[0]
            with open_store(url, tmp, "a") as a:
                written, k = 0, 0
                for n in sizes:
                    t0 = time.perf_counter()
                    for lo in range(written, n, 1000):
                        hi = min(lo + 1000, n)
                        items = [corpus.item(i) for i in range(lo, hi)]
                        a.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[lo:hi])
                    log(f"grew to {n} in {time.perf_counter() - t0:.0f} s")
                    written = n
                    a.compact()
                    with open_store(url, tmp, "b") as b:
                        for _ in range(args.rounds):
                            for mode in modes:
                                run = one_run(a, b, url, corpus, n, mode, corpus.subject(k))
                                k += 1
                                result["runs"].append(run)
                                print(json.dumps(run), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
