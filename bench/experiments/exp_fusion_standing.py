#!/usr/bin/env python
"""Which background says how far the vector leg's best cosine stands out (issue #36 item 2):
the tenant's every cosine, a random sample of 256 or 128, or the records only the words found
(what recall has: paths/recall.py ``_standing``), each gating the vector leg's vote from a to b
standard deviations; on fusion_sim's model of all three sets (MiniLM). Not a benchmark of record.

    PYTHONPATH=src python bench/experiments/exp_fusion_standing.py
"""

import sys

sys.path.insert(0, "bench/experiments")
sys.path.insert(0, "bench")

import exp_fusion_sim as ex
import fusion_sim as fs
import numpy as np

from efface.paths.recall import _keeping

K = 10


def est(q, how):
    if how == "tenant":
        tc = q.tenant_cos
    elif how.startswith("sample"):
        n = int(how[6:])
        tc = q.tenant_cos
        if len(tc) > n:
            tc = tc[np.random.default_rng(len(tc) + int(q.union[0])).choice(len(tc), n, replace=False)]
    elif how == "textonly":
        m = ~np.isin(q.union, q.vec_order)
        tc = q.cos[m]
        if len(tc) < 10:
            tc = q.cos
    elif how == "union":
        tc = q.cos
    return (q.cos.max() - tc.mean()) / (tc.std() or 1)


def rule(a, bb, how):
    def f(q, lexical):
        z = est(q, how)
        wv = min(1.0, max(0.0, (z - a) / (bb - a))) if bb > a else float(z >= a)
        T = q.bm / q.ceiling
        V = ex.dbsf(q.cos)
        bt = ex.best(q.union, q.bm, q.matched)
        bv = ex.best(q.union, q.cos)
        kept = bt | bv if wv >= 1 else bt
        return _keeping(ex.ranked(q.union, T + wv * V), kept, K)

    return f


sets = [fs.load(n, "minilm") for n in ("conversations", "manpages", "debian")]
Q = {s.name: (fs.build(s, fs.Index(s)), s.relevant) for s in sets}
base = {n: fs.metrics([ex.shipped(q, False) for q in qs], rel) for n, (qs, rel) in Q.items()}
print("shipped", base)
for how in ("tenant", "sample256", "sample128", "textonly"):
    for n, (qs, _rel) in Q.items():
        z = np.array([est(q, how) for q in qs])
        print(how, n, np.percentile(z, [5, 25, 50, 75, 95]).round(2))
    for a, bb in ((2, 3), (2.5, 3), (2, 2.5), (3, 3.5), (3, 4)):
        r = rule(a, bb, how)
        m = {n: fs.metrics([r(q, False) for q in qs], rel) for n, (qs, rel) in Q.items()}
        ok = all(m[n][i] >= base[n][i] for n in ("manpages", "debian") for i in range(3))
        print("  ", how, a, bb, ok, m)
