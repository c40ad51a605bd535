#!/usr/bin/env python
"""What a SAVEPOINT costs an import's inserts (issue #11 item 3; not a benchmark of record).

Builds a store of ``--records`` records with ``write_many`` (bench_store's corpus, hashing
vectors), then times ``--batches`` upserts of 1000 new records on its writer, each statement
run twice: as is, and inside ``SAVEPOINT`` ... ``RELEASE`` (what group commit wrapped every
member in before a group of one ran without one). Each batch is rolled back, so every timing
sees the same store.

    PYTHONPATH=src python bench/experiments/savepoint_cost.py --records 60000

Prints one JSON line: microseconds per record for each batch, without and with the savepoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from bench_store import PURPOSE, TENANT, Corpus  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args()
    import efface
    from efface.origin.sqlite.tx import _UPSERT

    n, extra = args.records, 1000 * args.batches
    corpus = Corpus(n + extra, 1234)
    with tempfile.TemporaryDirectory() as d:
        store = efface.open(os.path.join(d, "s"), embedder="hashing", background=False)
        vecs = store.embedder.embed(corpus.texts[:n])
        for s in range(0, n, 1000):
            items = [corpus.item(i) for i in range(s, min(s + 1000, n))]
            store.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[s : s + len(items)])
        o, tenant = store._origin, store._tenant(TENANT)
        w = o.writer
        rng = np.random.default_rng(0)
        emb = rng.random((extra, 384)).astype(np.float16)

        def batch(lo: int, savepoint: bool) -> float:
            rows = [
                (tenant, corpus.key(i), corpus.texts[i], "{}", "[]", b"\x01" + emb[i - n].tobytes(), 1.0, 1.0)
                for i in range(lo, lo + 1000)
            ]
            with o.write_lock:
                w.execute("BEGIN IMMEDIATE")
                if savepoint:
                    w.execute("SAVEPOINT member")
                t = time.perf_counter()
                for _ in w.executemany(_UPSERT, rows):
                    pass
                took = time.perf_counter() - t
                w.execute("ROLLBACK")
            return took / 1000 * 1e6

        out = {"records": n, "without_us_per_record": [], "in_savepoint_us_per_record": []}
        for lo in range(n, n + extra, 1000):
            out["without_us_per_record"].append(round(batch(lo, False), 1))
            out["in_savepoint_us_per_record"].append(round(batch(lo, True), 1))
        store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
