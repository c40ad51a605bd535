#!/usr/bin/env python
"""Capture what efface's fusion is given, per query: each leg's ids and raw scores (the cosine
over the union, the full-text leg's BM25 and its ceiling) as ``paths/recall.py``'s ``_scaled``
receives them, and the ids recall returned; so fusion rules can be compared offline on all
three sets (bench/experiments/exp_fusion_confidence.py; issue #36 item 2; not a benchmark of
record).

    PYTHONPATH=src python bench/experiments/capture_fusion.py conversations minilm OUT.pkl
    PYTHONPATH=src python bench/experiments/capture_fusion.py debian minilm OUT.pkl [DOCS QUERIES]

The sets are those of ``--quick`` (conversations: every fourth tenant, ``conversations-all``
every tenant; debian: 2,000 documents
and 200 queries; manpages: all its documents, 200 queries), with the bench's cached vectors.
"""

from __future__ import annotations

import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_quality as bq
import conversations as cv
import corpora
import efface
from efface.paths import recall as R
from efface.paths.base import Query

name, emb_name, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
emb = bq.embedder(emb_name)
if name in ("conversations", "conversations-all"):
    full = cv.build()
    c = full if name == "conversations-all" else full.only(list(range(0, len(full.pairs), 4)))
    docs, subjects, tenants = c.turns, c.speakers, c.tenants
    queries = [q.text for q in c.questions]
    q_tenant = [q.tenant for q in c.questions]
    relevant = [q.evidence for q in c.questions]
    kinds = [q.kind for q in c.questions]
    dvec = bq.encode(emb, docs, "chitchat")
    qvec = bq.encode(emb, queries, "chitchat-questions")
else:
    n_docs = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    n_q = int(sys.argv[5]) if len(sys.argv) > 5 else 200
    fc = corpora.CORPORA[name]()
    cc = fc.subset(min(n_docs, len(fc.docs)), n_q)
    docs, queries, relevant = cc.docs, cc.queries, cc.relevant
    subjects = [f"s{i % 997}" for i in range(len(docs))]
    tenants = [0] * len(docs)
    q_tenant = [0] * len(queries)
    kinds = ["known-item"] * len(queries)
    dvec = bq.encode(emb, docs, name)
    qvec = bq.encode(emb, queries, name + "-queries")

store = efface.open(Path(tempfile.mkdtemp()) / "s", embedder=emb, background=False)
by_t: dict[int, list[int]] = {}
for i, t in enumerate(tenants):
    by_t.setdefault(t, []).append(i)
for t, ids in sorted(by_t.items()):
    for s in range(0, len(ids), 5000):
        part = ids[s : s + 5000]
        store.write_many(
            [{"key": f"d{i}", "text": docs[i], "subject": subjects[i]} for i in part],
            tenant=f"t{t}",
            purpose="p",
            embeddings=dvec[part],
        )
store.compact()
lexical = getattr(emb, "lexical", False)
doc_of: dict[int, int] = {}
with store._origin.snapshot() as snap:
    for lo in range(1, len(docs) * 2 + 10, 500):
        doc_of.update({rid: int(r.key[1:]) for rid, r in snap.records_by_id(list(range(lo, lo + 500))).items()})

seen: list = []
_scaled = R._scaled


def recording(vector_leg, ids, v, ceiling):
    seen.append((bool(vector_leg), np.array([doc_of[int(i)] for i in ids]), np.array(v, dtype=np.float64), ceiling))
    return _scaled(vector_leg, ids, v, ceiling)


R._scaled = recording
_background = R._background
backgrounds: list = []


def recording_background(origin, q):
    got = _background(origin, q)
    backgrounds.append(None if got is None else np.array(got, dtype=np.float64))
    return got


R._background = recording_background
per_query = []
t0 = time.perf_counter()
for i, text in enumerate(queries):
    seen.clear()
    backgrounds.clear()
    q = Query(store._tenant(f"t{q_tenant[i]}"), text, qvec[i], "p", None, time.time())
    hits = R.hybrid(store._origin, store._paths, q, 10, lexical=lexical)
    per_query.append(
        {
            "legs": list(seen),
            "got": [int(h.key[1:]) for h in hits],
            "background": backgrounds[0] if backgrounds else None,
        }
    )
print(f"{len(queries)} queries in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
store.close()
with open(out_path, "wb") as f:
    pickle.dump(
        {
            "set": name,
            "embedder": emb.name,
            "lexical": lexical,
            "relevant": relevant,
            "kinds": kinds,
            "q": per_query,
            "texts": list(docs),  # for rules that read the records' words (coordination)
            "questions": list(queries),
        },
        f,
    )
