#!/usr/bin/env python
"""Dump efface's real legs per query (ANN ids, full-text BM25, exact cosine of the union,
brute-force top list) so fusion rules can be compared offline in milliseconds
(bench/experiments/exp_fusion_rules.py; issue #11 item 2; not a benchmark of record).

    PYTHONPATH=src python bench/experiments/dump_legs.py debian minilm 10000 500 OUT.pkl
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _legs

import bench_quality as bq
import corpora
from efface.paths.base import Query

corpus, emb_name, n_docs, n_q, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
DEPTH = int(sys.argv[6]) if len(sys.argv) > 6 else 300


full = corpora.CORPORA[corpus]()
c = full.subset(min(n_docs, len(full.docs)), n_q) if (n_docs < len(full.docs) or n_q < len(full.queries)) else full
emb = bq.embedder(emb_name)
dvec = bq.encode(emb, c.docs, c.name)
qvec = bq.encode(emb, c.queries, c.name + "-queries")

t0 = time.perf_counter()
store = _legs.build(c, emb, dvec)
print(f"built in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
th = store._tenant("t")
doc_of: dict[int, int] = {}
with store._origin.snapshot() as snap:
    for lo in range(1, len(c.docs) * 2 + 10, 500):
        doc_of.update({rid: int(r.key[1:]) for rid, r in snap.records_by_id(list(range(lo, lo + 500))).items()})
assert len(doc_of) == len(c.docs), (len(doc_of), len(c.docs))
per_query = []
for i in range(len(c.queries)):
    q = Query(th, c.queries[i], qvec[i], "p", None, time.time())
    ann = [doc_of[r] for r in store._ann.candidates(q, DEPTH)]
    fts = [(doc_of[r], float(s)) for r, s in store._fts.scored(q, DEPTH)]
    s = dvec @ qvec[i]
    top = np.argpartition(-s, DEPTH)[:DEPTH]
    exact = [int(d) for d in top[np.argsort(-s[top], kind="stable")]]
    union = set(ann) | {d for d, _ in fts} | set(exact)
    cos = {d: float(s[d]) for d in union}
    per_query.append(
        {
            "ann": ann,
            "fts": fts,
            "exact": exact,
            "df": _legs.dfs(store, c.queries[i]),
            "N": _legs.n_rows(store),
            "cos": cos,
        }
    )
store.close()
with open(out_path, "wb") as f:
    pickle.dump(
        {
            "set": [corpus, emb_name, len(c.docs), len(c.queries)],
            "relevant": c.relevant,
            "queries": c.queries,
            "lexical": getattr(emb, "lexical", False),
            "per_query": per_query,
        },
        f,
    )
print("dumped", out_path, file=sys.stderr)
