#!/usr/bin/env python
"""Fusion variants on efface's real legs, offline: which rule keeps hybrid >= both legs with
either embedder, on both corpora? (issue #11 item 2; not a benchmark of record)

    PYTHONPATH=src python bench/experiments/exp_fusion.py debian hashing 20000 500
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _legs
import apsw

import bench_quality as bq
import corpora
from efface.paths.base import Query
from efface.text import index_text, query_words

corpus, emb_name, n_docs, n_q = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
full = corpora.CORPORA[corpus]()
c = full.subset(min(n_docs, len(full.docs)), n_q)
emb = bq.embedder(emb_name)
dvec = bq.encode(emb, c.docs, c.name)
qvec = bq.encode(emb, c.queries, c.name + "-queries")
REL = c.relevant
N = 100


def side_fts(tokenize: str):
    db = apsw.Connection(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{tokenize}')")
    with db:
        db.executemany("INSERT INTO t(rowid, text) VALUES(?,?)", ((i, index_text(d)) for i, d in enumerate(c.docs)))
    return db


plain, porter = side_fts("unicode61 remove_diacritics 2"), side_fts("porter unicode61 remove_diacritics 2")


def bm25(db, i, n=N):
    words = query_words(c.queries[i])
    if not words:
        return {}
    match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    return {r: -s for r, s in db.execute("SELECT rowid, bm25(t) FROM t WHERE t MATCH ? ORDER BY 2 LIMIT ?", (match, n))}


def exact(i, n=N):
    s = dvec @ qvec[i]
    top = np.argpartition(-s, n)[:n]
    return {int(d): float(s[d]) for d in top}


store = _legs.build(c, emb, dvec)
th = store._tenant("t")
key_of = {}


def rid_to_doc(ids):
    rows = store._origin.snapshot().__enter__().records_by_id(ids)
    return [int(rows[r].key[1:]) for r in ids]


def ann_leg(i):
    q = Query(th, c.queries[i], qvec[i], "p", None, time.time())
    return rid_to_doc(store._ann.candidates(q, N))


def order(scores: dict) -> list:
    return sorted(scores, key=lambda d: (-scores[d], d))


def rrf(orders, weights=None, k=60):
    s = {}
    for j, o in enumerate(orders):
        w = 1.0 if weights is None else weights[j]
        for r, d in enumerate(o):
            s[d] = s.get(d, 0.0) + w / (k + r + 1)
    return order(s)


def dbsf(score_maps):
    s = {}
    for m in score_maps:
        if not m:
            continue
        v = np.array(list(m.values()))
        mu, sd = v.mean(), v.std() or 1.0
        lo, hi = mu - 3 * sd, mu + 3 * sd
        for d, x in m.items():
            s[d] = s.get(d, 0.0) + (x - lo) / (hi - lo)
    return order(s)


def minmax(score_maps, w=None):
    s = {}
    for j, m in enumerate(score_maps):
        if not m:
            continue
        v = np.array(list(m.values()))
        lo, hi = v.min(), v.max()
        for d, x in m.items():
            s[d] = s.get(d, 0.0) + (1.0 if w is None else w[j]) * ((x - lo) / (hi - lo) if hi > lo else 1.0)
    return order(s)


results = {
    k: []
    for k in [
        "ann_leg",
        "exact",
        "bm25",
        "bm25_porter",
        "rrf_now",
        "rrf_now_porter",
        "rrf_annonly",
        "dbsf_union",
        "dbsf_union_porter",
        "minmax_union",
        "rrf_agree",
        "rrf_agree_porter",
        "rrf_bm25cand",
        "dbsf_bm25cand",
    ]
}
for i in range(len(c.queries)):
    ann = ann_leg(i)
    for name, db in (("", plain), ("_porter", porter)):
        bm = bm25(db, i)
        union = set(ann) | set(bm)
        cos = {d: float(dvec[d] @ qvec[i]) for d in union}
        bm_order = order(bm)
        cos_order = order(cos)
        if name == "":
            results["ann_leg"].append(ann)
            results["exact"].append(order(exact(i)))
            results["bm25"].append(bm_order)
            results["rrf_now"].append(rrf([cos_order, bm_order]))
            results["rrf_annonly"].append(rrf([ann, bm_order]))
            results["minmax_union"].append(minmax([cos, bm]))
            # the vector order only over what the words found, plus ann's own
            results["rrf_bm25cand"].append(rrf([order({d: cos[d] for d in bm}), bm_order]))
            results["dbsf_bm25cand"].append(dbsf([{d: cos[d] for d in union}, bm]))
        else:
            results["bm25_porter"].append(bm_order)
            results["rrf_now_porter"].append(rrf([cos_order, bm_order]))
        results["dbsf_union" + name].append(dbsf([cos, bm]))
        # agreement weight: a leg's weight is how much of its top 10 the other leg's top 100 holds
        a10, b10 = set(cos_order[:10]), set(bm_order[:10])
        wa = (len(a10 & set(bm_order)) + 1) / 11
        wb = (len(b10 & set(cos_order)) + 1) / 11
        results["rrf_agree" + name].append(rrf([cos_order, bm_order], [wa, wb]))

out = {}
for k, v in results.items():
    sc = bq.score(v, REL, [0.0])
    out[k] = (sc["recall@10"], sc["mrr@10"])
print(json.dumps({"set": [corpus, emb_name, len(c.docs), len(c.queries)], **out}))
store.close()
