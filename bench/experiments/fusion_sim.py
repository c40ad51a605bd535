#!/usr/bin/env python
"""An offline model of efface's hybrid recall, fast enough to compare text-leg and fusion
rules on all three sets (issue #36 item 2; not a benchmark of record).

Each set is loaded once and cached (``/tmp/fusion-sim/<set>-<embedder>.pkl``): every record's
terms as efface's word index holds them (SQLite FTS5's own ``porter unicode61
remove_diacritics 2`` tokenizer over :func:`efface.text.index_text`), its length, its
tenant, and the bench's cached vectors. A query's text leg is BM25 (FTS5's k1, b and idf,
over every record of the store, as efface's in-memory postings score it) over every query
word, the records any word finds, ``DEPTH`` deep; its vector leg the exact cosine over its
tenant's records, ``DEPTH`` deep (efface's ANN leg equals exact cosine on these sets). The
fusion then sees what recall's sees: the union, the cosine of every record of it, the text
leg's BM25 of its own candidates and the query's ceiling.

    PYTHONPATH=src python bench/experiments/fusion_sim.py
"""

from __future__ import annotations

import math
import os
import pickle
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CACHE = Path(os.environ.get("FUSION_SIM_CACHE", "/tmp/fusion-sim"))
K1, B = 1.2, 0.75
DEPTH = 100


@dataclass
class Set:
    name: str
    embedder: str
    lexical: bool
    terms: list[dict[str, int]]  # per record: term -> tf
    length: np.ndarray
    tenant: np.ndarray
    dvec: np.ndarray
    queries: list[list[str]]  # per query: its distinct terms, in order (query_words -> term)
    qwords: list[list[str]]
    qtenant: np.ndarray
    qvec: np.ndarray
    relevant: list[set[int]]
    kinds: list[str]


def _tokenizer():
    db = apsw.Connection(":memory:")
    tok = db.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])

    def terms(text: str) -> list[str]:
        got = tok(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False, include_colocated=False)
        return [g if isinstance(g, str) else str(g[0]) for g in got]

    return db, terms


def load(name: str, emb_name: str, n_docs: int = 5000, n_q: int = 500) -> Set:
    CACHE.mkdir(parents=True, exist_ok=True)
    tag = f"{name}-{emb_name}" + (f"-{n_docs}-{n_q}" if name == "debian" else "")
    path = CACHE / f"{tag}.pkl"
    if path.exists():
        with open(path, "rb") as f:
            return pickle.load(f)
    import bench_quality as bq
    import conversations as cv
    import corpora
    from efface.text import index_text, query_words

    emb = bq.embedder(emb_name)
    if name == "conversations":
        c = cv.build()
        docs, tenants = c.turns, c.tenants
        queries = [q.text for q in c.questions]
        qt = [q.tenant for q in c.questions]
        relevant = [set(q.evidence) for q in c.questions]
        kinds = [q.kind for q in c.questions]
        dvec = bq.encode(emb, docs, "chitchat")
        qvec = bq.encode(emb, queries, "chitchat-questions")
    else:
        fc = corpora.CORPORA[name]()
        cc = fc.subset(min(n_docs, len(fc.docs)), n_q) if name == "debian" else fc
        docs, queries, relevant = cc.docs, cc.queries, [set(r) for r in cc.relevant]
        tenants = [0] * len(docs)
        qt = [0] * len(queries)
        kinds = ["known-item"] * len(queries)
        dvec = bq.encode(emb, docs, name)
        qvec = bq.encode(emb, queries, name + "-queries")
    _db, tok = _tokenizer()
    terms, length = [], []
    for d in docs:
        t = tok(index_text(d))
        terms.append(dict(Counter(t)))
        length.append(len(t) + 1)  # + the tenant column's token, as efface's index counts it
    qterms, qwords = [], []
    for q in queries:
        ws = query_words(q)
        ts = []
        kept = []
        for w in ws:
            got = tok(w)
            if len(got) == 1 and got[0] not in ts:
                ts.append(got[0])
                kept.append(w)
        qterms.append(ts)
        qwords.append(kept)
    s = Set(
        name,
        emb_name,
        bool(getattr(emb, "lexical", False)),
        terms,
        np.asarray(length, dtype=np.float64),
        np.asarray(tenants),
        dvec.astype(np.float32),
        qterms,
        qwords,
        np.asarray(qt),
        qvec.astype(np.float32),
        relevant,
        kinds,
    )
    with open(path, "wb") as f:
        pickle.dump(s, f)
    return s


class Index:
    """Postings of a set: term -> (ids, tf), document frequencies over the whole store."""

    def __init__(self, s: Set):
        post: dict[str, tuple[list[int], list[int]]] = {}
        for i, ts in enumerate(s.terms):
            for t, f in ts.items():
                a = post.setdefault(t, ([], []))
                a[0].append(i)
                a[1].append(f)
        self.post = {t: (np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.float64)) for t, (a, b) in post.items()}
        self.rows = len(s.terms)
        self.avgdl = float(s.length.mean())
        self.norm = K1 * (1 - B + B * s.length / self.avgdl)
        self.tenant = s.tenant
        # per tenant: rows and document frequencies (for a scoped idf)
        self.tenant_rows = Counter(s.tenant.tolist())

    def df(self, t: str) -> int:
        return len(self.post[t][0]) if t in self.post else 0

    def idf(self, df: int, rows: int | None = None) -> float:
        n = self.rows if rows is None else rows
        return max(1e-6, math.log((n - df + 0.5) / (df + 0.5)))

    def df_in(self, t: str, tenant: int) -> int:
        if t not in self.post:
            return 0
        return int((self.tenant[self.post[t][0]] == tenant).sum())

    def per_term(self, terms: list[str], tenant: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """The tenant's records any of ``terms`` finds, and each term's BM25 tf part
        ``tf (k1 + 1) / (tf + norm)`` for them (a matrix: record x term), and each term's df."""
        ids_all = []
        for t in terms:
            if t in self.post:
                ids = self.post[t][0]
                ids_all.append(ids[self.tenant[ids] == tenant])
        if not ids_all:
            return np.empty(0, dtype=np.int64), np.empty((0, len(terms))), [self.df(t) for t in terms]
        cands = np.unique(np.concatenate(ids_all))
        m = np.zeros((len(cands), len(terms)))
        for j, t in enumerate(terms):
            if t not in self.post:
                continue
            ids, tf = self.post[t]
            pos = np.searchsorted(cands, ids)
            pos = np.minimum(pos, len(cands) - 1)
            hit = cands[pos] == ids
            p, f = pos[hit], tf[hit]
            m[p, j] = f * (K1 + 1) / (f + self.norm[cands[p]])
        return cands, m, [self.df(t) for t in terms]


def metrics(lists: list[list[int]], rel: list[set[int]], mask=None) -> tuple[float, float, float]:
    per = []
    for got, r in zip(lists, rel, strict=True):
        per.append(
            (
                len(r & set(got[:5])) / min(len(r), 5),
                len(r & set(got[:10])) / min(len(r), 10),
                next((1.0 / (i + 1) for i, d in enumerate(got[:10]) if d in r), 0.0),
            )
        )
    a = np.asarray(per)
    if mask is not None:
        a = a[mask]
    return tuple(round(float(x), 3) for x in a.mean(axis=0))  # type: ignore[return-value]


POSTING_BUDGET = 20000


@dataclass
class Q:
    """What a fusion rule is given for one query."""

    union: np.ndarray  # ids, ascending
    cos: np.ndarray  # cosine of each id of the union
    bm: np.ndarray  # the text leg's score of each id of the union (0: not its candidate)
    matched: np.ndarray  # bool: the text leg's candidate
    ceiling: float
    text_order: list[int]
    vec_order: list[int]
    tenant_cos: np.ndarray  # every cosine of the tenant (for analysis only)


def text_scores(ix: Index, terms: list[str], tenant: int, weight=None, idf_rows=None):
    """BM25 of the tenant's records the query's words find (finders within the posting
    budget), scored over every term; ``weight(idfs, dfs) -> per-term weights`` replaces idf."""
    cands, m, dfs = ix.per_term(terms, tenant)
    present = sorted((j for j, d in enumerate(dfs) if d), key=lambda j: dfs[j])
    finders, read = [], 0
    for j in present:
        if finders and read + dfs[j] > POSTING_BUDGET:
            break
        finders.append(j)
        read += dfs[j]
    idfs = np.asarray([ix.idf(d) for d in dfs])
    w = idfs if weight is None else np.asarray(weight(idfs, np.asarray(dfs), ix), dtype=np.float64)
    if len(cands) and finders:
        keep = (m[:, finders] > 0).any(axis=1)
        cands, m = cands[keep], m[keep]
    elif not finders:
        cands, m = cands[:0], m[:0]
    score = m @ w if len(cands) else np.empty(0)
    ceiling = (K1 + 1) * float(np.sum(idfs if weight is None else w))
    return cands, score, ceiling, m, w


def build(s: Set, ix: Index, depth: int = DEPTH, weight=None) -> list[Q]:
    out = []
    by_t: dict[int, np.ndarray] = {}
    for t in np.unique(s.tenant):
        by_t[int(t)] = np.flatnonzero(s.tenant == t)
    for qi, terms in enumerate(s.queries):
        t = int(s.qtenant[qi])
        mine = by_t[t]
        tc = s.dvec[mine] @ s.qvec[qi]
        order = np.lexsort((mine, -tc))[:depth]
        vec_ids = mine[order]
        cands, score, ceiling, _, _ = text_scores(ix, terms, t, weight)
        torder = np.lexsort((cands, -score))[:depth]
        text_ids, text_sc = cands[torder], score[torder]
        union = np.union1d(vec_ids, text_ids)
        cos = s.dvec[union] @ s.qvec[qi]
        bm = np.zeros(len(union))
        pos = np.searchsorted(union, text_ids)
        bm[pos] = text_sc
        matched = np.zeros(len(union), dtype=bool)
        matched[pos] = True
        out.append(Q(union, cos.astype(np.float64), bm, matched, ceiling, text_ids.tolist(), vec_ids.tolist(), tc))
    return out
