#!/usr/bin/env python
"""One-off experiment: where efface's recall (encoding excluded) spends its CPU, leg by leg.

    PYTHONPATH=src python bench/experiments/exp_recall_components.py 100000 [STORE_DIR]

Builds (or reuses) a store of bench_store's corpus with hashing vectors, then times each
part of a recall on this thread's CPU clock (``time.thread_time``), which a busy shared
machine disturbs far less than the wall clock: the ANN leg, the full-text leg, the origin's
live check of ~80 candidates, hydrating 10 hits, and the gate's lookups. DIAGNOSTIC ONLY: it
calls private parts (``store._paths``, ``store._origin``). Prints one JSON document.
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import efface
from efface.embed.hashing import HashingEmbedder
from efface.paths.base import Query

from bench_store import PURPOSE, TENANT, Corpus


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    path = sys.argv[2] if len(sys.argv) > 2 else f"/tmp/efface-components-{n}"
    corpus = Corpus(n, seed=1234)
    emb = HashingEmbedder()
    if not os.path.exists(path):
        vecs = emb.embed(corpus.texts)
        with efface.open(path, embedder="hashing", background=False) as s:
            for a in range(0, n, 2000):
                items = [corpus.item(i) for i in range(a, min(a + 2000, n))]
                s.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=vecs[a : a + 2000])
            s.compact()
    queries = [q for _, q in corpus.queries(220, seed=1235)][20:]
    s = efface.open(path, embedder="hashing", background=False)
    tenant = s._tenant(TENANT)
    paths = {p.name: p for p in s._paths}
    acc: dict[str, list[float]] = {}

    def timed(name, fn, *args, **kwargs):
        t = time.thread_time()
        out = fn(*args, **kwargs)
        acc.setdefault(name, []).append((time.thread_time() - t) * 1000)
        return out

    for q in queries[:10]:
        s.recall(q, tenant=TENANT, purpose=PURPOSE)
    for q in queries:
        timed("recall, whole (query embedding included: hashing)", s.recall, q, tenant=TENANT, purpose=PURPOSE)
        query = Query(tenant, q, emb.embed([q])[0], PURPOSE, None, time.time())
        a = timed("ann leg (40 candidates)", paths["ann"].candidates, query, 40)
        f = timed("fts leg (40 candidates)", paths["fts"].candidates, query, 40)
        with s._origin.snapshot() as snap:
            live = timed(
                "live check of both legs' candidates",
                snap.live_ids,
                list(set(a) | set(f)),
                tenant,
                PURPOSE,
                None,
                time.time(),
            )
            timed("hydrate 10 hits", snap.records_by_id, sorted(live)[:10])
        timed("gate: known purposes", s._origin.purposes, tenant)
        timed("gate: newest put epoch", s._origin.latest_put_epoch, 0)
    s.close()
    print(
        json.dumps(
            {
                "n": n,
                "queries": len(queries),
                "thread_cpu_ms": {
                    k: {f"p{p}": round(float(np.percentile(v, p)), 3) for p in (50, 90, 99)} for k, v in acc.items()
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
