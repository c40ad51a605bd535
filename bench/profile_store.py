#!/usr/bin/env python
"""Where recall, forget and wait() spend their time, component by component.

    python bench/profile_store.py --size 100000            # builds a store in tmp, ~3 min
    python bench/profile_store.py --store DIR --size N     # reuse a store built with the same N

DIAGNOSTIC ONLY: this reaches into efface's private internals (``store._fts``, ``store._ann``,
``store._origin``), so it may break whenever src/efface changes. bench/bench_store.py is the benchmark;
this explains its figures.
Output is human-readable text on stdout.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import efface
from efface.embed.hashing import HashingEmbedder
from efface.paths.base import Query

from bench_store import PURPOSE, TENANT, Corpus, pct


def build(path: str, n: int) -> None:
    corpus = Corpus(n)
    vecs = HashingEmbedder().embed(corpus.texts)
    with efface.open(path, embedder="hashing", background=False) as s:
        t = time.perf_counter()
        for start in range(0, n, 1000):
            stop = min(start + 1000, n)
            s.write_many(
                [corpus.item(i) for i in range(start, stop)],
                tenant=TENANT,
                purpose=PURPOSE,
                embeddings=vecs[start:stop],
            )
        print(f"built {n} records in {time.perf_counter() - t:.1f} s (write_many)")
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.runcall(s.compact)
        print(f"compact() after the build (ANN absorbs {n} writes, then saves): {time.perf_counter() - t:.1f} s")
        top(prof, 8, "tottime")


def top(prof: cProfile.Profile, n: int, key: str = "cumulative") -> None:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(n)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    print("\n".join("    " + ln for ln in lines[start:]))


def recall_breakdown(s, queries) -> None:
    print("\n== recall, component by component (ms) ==")
    parts = collections.defaultdict(list)
    tid = s._tenant(TENANT)  # below the facade a tenant is known by its keyed id
    for _, q in queries:
        t0 = time.perf_counter()
        s._origin.purposes(tid)
        t1 = time.perf_counter()
        vec = s.embedder.embed([q])[0]
        t2 = time.perf_counter()
        qq = Query(tid, q, vec, PURPOSE, None, time.time())
        f = s._fts.candidates(qq, 40)
        t3 = time.perf_counter()
        a = s._ann.candidates(qq, 40)
        t4 = time.perf_counter()
        s._origin.live_ids(list({*f, *a}), tid, PURPOSE, None, qq.now)
        t5 = time.perf_counter()
        s.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        t6 = time.perf_counter()
        for name, d in (
            ("purposes check", t1 - t0),
            ("embed query", t2 - t1),
            ("fts candidates", t3 - t2),
            ("ann candidates", t4 - t3),
            ("origin resolve", t5 - t4),
            ("whole recall()", t6 - t5),
        ):
            parts[name].append(d * 1000)
    for name, v in parts.items():
        p = pct(v)
        print(f"  {name:16s} p50 {p['p50']:8.3f}  p90 {p['p90']:8.3f}  p99 {p['p99']:8.3f}")


def forget_breakdown(s, n_subjects: int, count: int, seed: int) -> None:
    print(f"\n== forget of one subject (100 records), {count} subjects ==")
    conn = s._origin.connection
    agg = collections.defaultdict(lambda: [0, 0.0])

    def hook(sql, ns):
        k = " ".join(sql.split())[:80]
        agg[k][0] += 1
        agg[k][1] += ns / 1e6

    subjects = random.Random(seed).sample(range(n_subjects), 2 * count)
    plain = []
    for x in subjects[count:]:  # first without any instrumentation
        t = time.perf_counter()
        r = s.forget(tenant=TENANT, subject=f"user-{x:06d}")
        plain.append((time.perf_counter() - t) * 1000)
        s.wait(r.handle)
    print(f"  forget ms, uninstrumented {pct(plain)}")
    prof = cProfile.Profile()
    f_ms, w_ms = [], []
    waitprof = cProfile.Profile()
    for x in subjects[:count]:
        conn.set_profile(hook)
        prof.enable()
        t = time.perf_counter()
        r = s.forget(tenant=TENANT, subject=f"user-{x:06d}")
        f_ms.append((time.perf_counter() - t) * 1000)
        prof.disable()
        conn.set_profile(None)
        waitprof.enable()
        t = time.perf_counter()
        s.wait(r.handle)
        w_ms.append((time.perf_counter() - t) * 1000)
        waitprof.disable()
    print(f"  forget ms {pct(f_ms)}  <- inflated by the SQL hook and cProfile\n  wait ms   {pct(w_ms)}")
    print("  SQL statements inside forget (total ms over all forgets, count, statement):")
    for k, (cnt, ms) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"    {ms:8.1f} ms {cnt:6d}x  {k}")
    print("  cProfile of forget (cumulative; contextlib __exit__ -> next() is the COMMIT):")
    top(prof, 16)
    print("  cProfile of wait() right after forget (background=False: wait() -> compact()):")
    top(waitprof, 8, "tottime")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--store", default=None, help="an existing store built by this script with --size N")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--forgets", type=int, default=20)
    args = ap.parse_args()
    tmp = None
    path = args.store
    if path is None or not os.path.exists(path):
        tmp = tempfile.mkdtemp(prefix="efface-profile-")
        path = path or os.path.join(tmp, "store")
        build(path, args.size)
    corpus = Corpus(args.size)
    queries = corpus.queries(args.queries, seed=1235)
    try:
        with efface.open(path, embedder="hashing", background=False) as s:
            for _, q in queries[:20]:
                s.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
            recall_breakdown(s, queries)
            forget_breakdown(s, corpus.n_subjects, args.forgets, seed=int(time.time()))
    finally:
        if tmp and args.store is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
