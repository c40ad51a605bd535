#!/usr/bin/env python
"""Recall latency of one efface store, search only (the query vector given), with the
full-text leg timed inside the same recalls: for old/new pairs on the same store (issue #11
item 3; not a benchmark of record). The store is bench_peers --recall-latency's efface
store, built once and kept:

    PYTHONPATH=src python bench/experiments/recall_pairs.py /tmp/efface-100000 --n 100000
    PYTHONPATH=/tmp/old/src python bench/experiments/recall_pairs.py /tmp/efface-100000

Prints one JSON line. A large store's postings load in the background from its first recall; the run waits
for them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))


def open_kept(path: str):
    """The kept store opened with an embedder that looks each query's vector up (the
    encode excluded), once its postings have loaded: (store, queries, a factory of such
    embedders, seconds the load took)."""
    import efface

    qs = json.loads(Path(path + ".qs.json").read_text())
    table = dict(zip(qs, np.load(path + ".qvec.npy"), strict=True))

    class Lookup:
        name, dim = "minilm", 384

        def embed(self, texts):
            return np.stack([table[t] for t in texts])

    store = efface.open(path, embedder=Lookup())
    text = store._origin.text
    t0 = time.time()
    store.recall(qs[0], tenant="acme", purpose="assistant", k=10)  # a large store's load starts here
    while getattr(text, "_post", "x") is None and getattr(text, "_post_queue", None) is not None:
        time.sleep(0.1)
    return store, qs, Lookup, round(time.time() - t0, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--n", type=int, default=100_000, help="records, when the store is built here")
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    import efface
    from efface.paths import recall as R

    path = args.path
    if not os.path.exists(path + ".qs.json"):
        import recall_latency as rl

        from bench_store import Corpus

        corpus = Corpus(args.n, seed=1234)
        vecs, _ = rl.record_vectors(corpus, 10000, 1234)
        qs = [q for _, q in corpus.queries(args.queries + 20, seed=1235)]
        qvec = rl.encoder().embed(qs)
        np.save(path + ".qvec.npy", qvec)
        Path(path + ".qs.json").write_text(json.dumps(qs))
        store, _emb, _b = rl.build_efface(Path(path), corpus, vecs, dict(zip(qs, qvec, strict=True)))
        store.close()
    store, qs, _lookup, loaded = open_kept(path)
    leg: list[float] = []
    real = R._text_leg

    def timed(*a):
        t = time.perf_counter()
        try:
            return real(*a)
        finally:
            leg.append((time.perf_counter() - t) * 1000)

    R._text_leg = timed
    for q in qs[:20]:
        store.recall(q, tenant="acme", purpose="assistant", k=10)
    leg.clear()
    lat = []
    for q in qs[20 : 20 + args.queries]:
        t = time.perf_counter()
        store.recall(q, tenant="acme", purpose="assistant", k=10)
        lat.append((time.perf_counter() - t) * 1000)
    store.close()

    def pct(v):
        return [round(float(np.percentile(v, p)), 2) for p in (50, 90, 99)]

    print(
        json.dumps(
            {
                "recall_ms_p50_p90_p99": pct(lat),
                "text_leg_ms_p50_p90_p99": pct(leg),
                "postings_loaded_after_s": loaded,
                "efface": efface.__file__,
                "load": os.getloadavg()[0],
                "at": time.strftime("%H:%M:%S"),
            }
        )
    )


if __name__ == "__main__":
    main()
