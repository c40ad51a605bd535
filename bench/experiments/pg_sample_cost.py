#!/usr/bin/env python
"""What a draw of the PostgreSQL origin's vector sample costs (:mod:`efface.origin.postgres.sample`),
and a kept one, by tenant size (the hashing embedder's vectors, one tenant).

    PYTHONPATH=src nice -n 10 python bench/experiments/pg_sample_cost.py --sizes 1000,10000,50000

Prints one JSON document: per size, the p50 of a draw (two round trips) and of a kept draw
(no round trip), in milliseconds, on a loaded two-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from pgserver import start_primary


def main() -> None:
    import efface

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="efface-pgsample-"))
    os.chmod(work, 0o755)  # the server runs as a system user (tests/pgserver.py)
    server = start_primary(work / "pg")
    out: dict = {"bench": "pg-sample-cost", "reps": args.reps, "sizes": {}}
    try:
        with server.connect() as conn:
            conn.execute("CREATE DATABASE d")
        store = efface.open(
            server.url("d"), embedder="hashing", kek_file=str(work / "kek"), cache_dir=str(work / "c"), background=False
        )
        origin, have = store._origin, 0
        for size in sorted(int(x) for x in args.sizes.split(",")):
            for s in range(have, size, 1000):
                store.write_many(
                    [{"key": f"k{i}", "text": f"note {i} on topic {i % 97}"} for i in range(s, min(size, s + 1000))],
                    tenant="t",
                    purpose="p",
                    subject=f"s{s}",
                )
            have = size
            with server.connect("d") as conn:
                conn.execute("ANALYZE")
            tid, now = store._tenant("t"), time.time()
            draws, kept = [], []
            for _ in range(args.reps):
                t = time.perf_counter()
                origin._sample._draw(tid, "p", now, 256)
                draws.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                origin.vector_sample(tid, "p", now, 256)
                kept.append((time.perf_counter() - t) * 1000)
            out["sizes"][size] = {
                "draw_p50_ms": round(statistics.median(draws), 3),
                "kept_p50_ms": round(statistics.median(kept), 4),
            }
            print(size, out["sizes"][size], file=sys.stderr)
        store.close()
    finally:
        server.stop()
    out["load"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
