#!/usr/bin/env python
"""Text-leg query forms compared on fusion_sim's model (issue #36 item 2, lever 1): BM25 over
every query word (shipped), idf squared, and query words dropped by their document frequency
(a per-store stop-word rule, no language list); the text leg alone and fused with the shipped
gate (paths/recall.py ``_standing``). Not a benchmark of record.

    PYTHONPATH=src python bench/experiments/exp_text_leg.py [minilm|hashing]
"""

from __future__ import annotations

import sys

sys.path.insert(0, "bench/experiments")
sys.path.insert(0, "bench")

import exp_fusion_sim as ex
import fusion_sim as fs
import numpy as np

from efface.paths.recall import _keeping

K = 10


def gate(q: fs.Q) -> float:
    own = np.isin(q.union, q.vec_order)
    others = q.cos[~own]
    if len(others) < 10 or others.std() == 0:
        return 1.0
    z = (q.cos.max() - others.mean()) / others.std()
    return min(1.0, max(0.0, z - 2.0))


def fused(q: fs.Q, lexical: bool) -> list[int]:
    t = q.bm / q.ceiling if q.ceiling else q.bm
    v = ex.dbsf(q.cos)
    bt = ex.best(q.union, q.bm, q.matched)
    if lexical:
        return _keeping(ex.ranked(q.union, t, v), bt, K)
    w = gate(q)
    kept = bt | ex.best(q.union, q.cos) if w >= 1 else bt
    return _keeping(ex.ranked(q.union, t + w * v), kept, K)


def build(s: fs.Set, ix: fs.Index, keep=None, weight=None) -> list[fs.Q]:
    """fusion_sim.build with the query's terms first filtered by ``keep(terms, dfs, ix, tenant)``."""
    if keep is None:
        return fs.build(s, ix, weight=weight)
    saved = s.queries
    try:
        s.queries = [keep(ts, [ix.df(t) for t in ts], ix, int(s.qtenant[i])) for i, ts in enumerate(saved)]
        return fs.build(s, ix, weight=weight)
    finally:
        s.queries = saved


def drop_share(f: float):
    """Words found in more than ``f`` of the store's records are not asked (all, when every
    word is)."""

    def keep(ts, dfs, ix, tenant):
        kept = [t for t, d in zip(ts, dfs, strict=True) if d <= f * ix.rows]
        return kept or ts

    return keep


def drop_share_tenant(f: float):
    def keep(ts, dfs, ix, tenant):
        n = ix.tenant_rows[tenant]
        kept = [t for t in ts if ix.df_in(t, tenant) <= f * n]
        return kept or ts

    return keep


def drop_rel(f: float):
    """Words whose idf is under ``f`` times the query's rarest word's are not asked."""

    def keep(ts, dfs, ix, tenant):
        idf = [ix.idf(d) if d else ix.idf(0) for d in dfs]
        top = max(idf, default=0.0)
        return [t for t, i in zip(ts, idf, strict=True) if i >= f * top] or ts

    return keep


def idf_pow(p: float):
    return lambda idfs, dfs, ix: idfs**p


def tenant_idf(p: float = 1.0):
    """idf over the query's tenant's records (its own document frequencies), as one table
    per tenant would have it."""

    def w(idfs, dfs, ix):
        t = ix.current_tenant
        n = ix.tenant_rows[t]
        return np.asarray([ix.idf(ix.df_in(term, t), n) for term in ix.current_terms]) ** p

    return w


SNOWBALL = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by could did do does doing down during each few for from further had has have having he
    her here hers herself him himself his how i if in into is it its itself me more most my myself no nor not
    of off on once only or other ought our ours ourselves out over own same she should so some such than that
    the their theirs them themselves then there these they this those through to too under until up very was
    we were what when where which while who whom why with would you your yours yourself yourselves
    s t m d ll re ve don doesn didn isn aren wasn weren hasn haven hadn wouldn shouldn couldn mustn""".split()
)


def stoplist(s: fs.Set):
    """The Snowball English stop words dropped (bench/experiments/stop_words_text_leg.patch), by
    the query's words (fusion_sim keeps a query's words beside its terms)."""
    words = {tuple(ts): ws for ts, ws in zip(s.queries, s.qwords, strict=True)}

    def keep(ts, dfs, ix, tenant):
        ws = words[tuple(ts)]
        return [t for t, w in zip(ts, ws, strict=True) if w not in SNOWBALL] or ts

    return keep


def main(emb: str) -> None:
    sets = [fs.load(n, emb) for n in ("conversations", "manpages", "debian")]
    variants: dict[str, tuple] = {"all words": (None, None)}
    variants["idf^2"] = (None, idf_pow(2))
    variants["tenant idf"] = (None, tenant_idf())
    variants["tenant idf^2"] = (None, tenant_idf(2))
    for f in (0.2, 0.1, 0.05, 0.03, 0.02, 0.01):
        variants[f"df <= {f} N"] = (drop_share(f), None)
    for f in (0.1, 0.05, 0.02):
        variants[f"df <= {f} tenant"] = (drop_share_tenant(f), None)
    for f in (0.3, 0.4, 0.5):
        variants[f"idf >= {f} max"] = (drop_rel(f), None)
    only = sys.argv[2:] or None
    for s in sets:
        ix = fs.Index(s)
        print(f"\n{s.name}/{emb}: text leg | fused (r@5, r@10, MRR@10)", flush=True)
        variants["snowball"] = (stoplist(s), None)
        variants["snowball + tenant idf"] = (stoplist(s), tenant_idf())
        variants["snowball + idf^2"] = (stoplist(s), idf_pow(2))
        for name, (keep, weight) in variants.items():
            if only and name not in only and name != "all words":
                continue
            qs = build(s, ix, keep, weight)
            t = fs.metrics([q.text_order for q in qs], s.relevant)
            f = fs.metrics([fused(q, s.lexical) for q in qs], s.relevant)
            print(f"  {name:20s} {t} | {f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "minilm")
