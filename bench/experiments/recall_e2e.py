#!/usr/bin/env python
"""Recall latency of one efface store, search only and end to end (the query encoded by the
default MiniLM runtime), in one process: for old/new pairs on the same store (issue #11
item 3; not a benchmark of record). The store is bench_peers --recall-latency's efface store,
as ``recall_pairs.py`` builds and keeps it:

    PYTHONPATH=src python bench/experiments/recall_e2e.py /tmp/efface-1000000
    PYTHONPATH=/tmp/old/src python bench/experiments/recall_e2e.py /tmp/efface-1000000

The store opens once and its postings load; then 300 recalls search only (the query's
vector looked up), 300 end to end, and both again. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from recall_pairs import open_kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    import efface
    from efface.embed.minilm_onnx import OnnxMiniLMEmbedder

    store, qs, Lookup, loaded = open_kept(args.path)
    out: dict = {"postings_loaded_s": loaded}
    onnx = OnnxMiniLMEmbedder()
    (getattr(onnx, "embed_query", None) or (lambda t: onnx.embed([t])))("warm up")  # an older efface has no embed_query
    for label, emb in (("search", Lookup()), ("e2e", onnx), ("search", Lookup()), ("e2e", onnx)):
        store.embedder = emb  # the same name, "minilm": the store does not care which
        for q in qs[:20]:
            store.recall(q, tenant="acme", purpose="assistant", k=10)
        lat = []
        for q in qs[20 : 20 + args.queries]:
            t = time.perf_counter()
            store.recall(q, tenant="acme", purpose="assistant", k=10)
            lat.append((time.perf_counter() - t) * 1000)
        out.setdefault(label, []).append([round(float(x), 2) for x in np.percentile(lat, [50, 90, 99])])
    store.close()
    out |= {"efface": efface.__file__, "load": round(os.getloadavg()[0], 2), "at": time.strftime("%H:%M:%S")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
