#!/usr/bin/env python
"""Fusion rules compared offline on dumped legs (bench/experiments/dump_legs.py): recall@10 and
MRR@10 of each rule on each set, in milliseconds (issue #11 item 2; not a benchmark of record).

    python bench/experiments/exp_fusion_rules.py /tmp/fusion/dumps/*.pkl
"""

from __future__ import annotations

import pickle
import sys

import numpy as np

K = 60


def order(s: dict) -> list:
    return sorted(s, key=lambda d: (-s[d], d))


def metrics(ranked, rel):
    r10 = mrr = 0.0
    for got, r in zip(ranked, rel, strict=True):
        r10 += len(r & set(got[:10])) / min(len(r), 10)
        mrr += next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in r), 0.0)
    return round(r10 / len(rel), 3), round(mrr / len(rel), 3)


def legs(qd, n_ann=100, n_fts=100):
    ann = qd["ann"][:n_ann]
    fts = dict(qd["fts"][:n_fts])
    union = set(ann) | set(fts)
    cos = {d: qd["cos"][d] for d in union}
    return ann, fts, cos


def rrf(orders, k=K):
    s: dict = {}
    for o in orders:
        for r, d in enumerate(o):
            s[d] = s.get(d, 0.0) + 1.0 / (k + r + 1)
    return s


def fuse_rrf_main(qd, lexical):
    _ann, fts, cos = legs(qd)
    if lexical:
        return order(rrf([order(fts)]))  # ties ignored here
    return order(rrf([order(cos), order(fts)]))


def fuse_rrf_depth(d):
    def f(qd, lexical):
        ann, fts, cos = legs(qd, d, d)
        ann_o = order({x: cos[x] for x in ann})
        if lexical:
            return order(rrf([order(fts)]))
        return order(rrf([ann_o, order(fts)]))

    return f


def dbsf(m):
    v = np.array(list(m.values()))
    mu, sd = v.mean(), v.std() or 1.0
    lo, hi = mu - 3 * sd, mu + 3 * sd
    return {d: (x - lo) / (hi - lo) for d, x in m.items()}


def fuse_dbsf(floor: bool):
    def f(qd, lexical):
        _ann, fts, cos = legs(qd)
        bm = {d: fts.get(d, 0.0) for d in cos} if floor else fts
        if lexical:
            return order(fts)
        s = dbsf(cos)
        for d, x in (dbsf(bm) if bm else {}).items():
            s[d] = s.get(d, 0.0) + x
        return order(s)

    return f


def ceiling(qd, k1=1.2):
    """The best BM25 any record could score for the query (FTS5's idf, tf saturated)."""
    n = qd["N"]
    return (k1 + 1) * sum(max(1e-6, np.log((n - df + 0.5) / (df + 0.5))) for df in qd["df"]) or 1.0


def fuse_share(vec: str, txt: str, wt=1.0):
    def f(qd, lexical):
        _ann, fts, cos = legs(qd)
        if lexical:
            return order(fts)
        bm = {d: fts.get(d, 0.0) for d in cos}
        v = dbsf(cos) if vec == "z" else dict(cos)
        if txt == "share":
            t = {d: x / ceiling(qd) for d, x in bm.items()}
        elif txt == "zconf":
            conf = max(bm.values()) / ceiling(qd)
            t = {d: conf * x for d, x in dbsf(bm).items()}
        else:
            t = dbsf(bm)
        return order({d: v[d] + wt * t[d] for d in cos})

    return f


def protect(f, p, k=10):
    """The fused order, but each voting leg's own best ``p`` are kept in the top ``k`` (they
    displace the lowest fused records that no leg put in its own best ``p``)."""

    def g(qd, lexical):
        fused = f(qd, lexical)
        if lexical or p == 0:
            return fused
        _ann, fts, cos = legs(qd)
        keep = set(order(cos)[:p]) | set(order(fts)[:p])
        top = fused[:k]
        missing = [d for d in fused if d in keep and d not in top]
        for d in missing:
            for j in range(len(top) - 1, -1, -1):
                if top[j] not in keep:
                    top[j] = d
                    break
        top = sorted(set(top), key=fused.index)
        return top + [d for d in fused if d not in set(top)]

    return g


RULES = {
    **{f"z_cos+share/p{p}": protect(fuse_share("z", "share"), p) for p in (1, 2, 3, 4, 5)},
    **{f"dbsf_floor/p{p}": protect(fuse_dbsf(True), p) for p in (1, 2, 3, 5)},
    "z_cos+share": fuse_share("z", "share"),
    "raw_cos+share": fuse_share("raw", "share"),
    "z_cos+zconf": fuse_share("z", "zconf"),
    "z_cos+2share": fuse_share("z", "share", 2.0),
    "raw_cos+2share": fuse_share("raw", "share", 2.0),
    "raw_cos+.5share": fuse_share("raw", "share", 0.5),
    "rrf_main": fuse_rrf_main,
    "rrf_depth10": fuse_rrf_depth(10),
    "rrf_depth20": fuse_rrf_depth(20),
    "rrf_depth50": fuse_rrf_depth(50),
    "dbsf": fuse_dbsf(False),
    "dbsf_floor": fuse_dbsf(True),
}


def sets(paths):
    for p in paths:
        with open(p, "rb") as fh:
            d = pickle.load(fh)
        yield from (d if isinstance(d, list) else [d])


def main(paths):
    for d in sets(paths):
        rel, pq, lex = d["relevant"], d["per_query"], d["lexical"]
        tiny = "keys" in d
        print("==", d["set"])
        base = {
            "ann_leg": [order({x: q["cos"][x] for x in q["ann"][:100]}) for q in pq],
            "exact": [q["exact"] for q in pq],
            "bm25": [order(dict(q["fts"][:100])) for q in pq],
        }
        # ceiling: is the answer anywhere in each leg's top n
        for n in (5, 10, 20):
            hit = sum(
                bool(r & (set(q["ann"][:n]) | {x for x, _ in q["fts"][:n]})) for q, r in zip(pq, rel, strict=True)
            ) / len(rel)
            print(f"  union@{n} holds answer: {hit:.3f}")
        for name, ranked in base.items():
            print(f"  {name:22s} {metrics(ranked, rel)}")
        for name, f in RULES.items():
            got = [f(q, lex) for q in pq]
            wrong = [
                f"{d['queries'][i]!r}->{d['keys'][g[0]]}" for i, g in enumerate(got) if tiny and g[0] not in rel[i]
            ]
            print(f"  {name:22s} {metrics(got, rel)} {' '.join(wrong)}")


if __name__ == "__main__":
    main(sys.argv[1:])
