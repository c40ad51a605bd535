#!/usr/bin/env python
"""The everyday memories of tests/test_recall_fusion.py dumped like dump_legs.py does, so a fusion
rule is checked on a tiny store beside the large sets (issue #11 item 2).

    PYTHONPATH=src:tests python bench/experiments/dump_tiny.py OUT.pkl
"""

from __future__ import annotations

import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import _legs

import efface
from efface.embed.minilm import MiniLMEmbedder
from efface.paths.base import Query
from test_recall_fusion import EVERYDAY, QUESTIONS, SIX

emb = MiniLMEmbedder()
sets = []
for name, memories, questions in (
    ("six", SIX, {"What does Alice like to drink?": "tea"}),
    ("everyday", EVERYDAY, QUESTIONS),
):
    keys = list(memories)
    texts = [memories[k] for k in keys]
    root = Path(tempfile.mkdtemp())
    store = efface.open(root / "s", embedder=emb, background=False)
    store.write_many([{"key": k, "text": t} for k, t in memories.items()], tenant="t", purpose="p", subject="x")
    store.compact()
    dvec = emb.embed(texts)
    with store._origin.snapshot() as snap:
        doc_of = {rid: keys.index(r.key) for rid, r in snap.records_by_id(list(range(1, 100))).items()}
    pq, rel, qs = [], [], []
    for qtext, want in questions.items():
        qv = emb.embed([qtext])[0]
        q = Query(store._tenant("t"), qtext, qv, "p", None, time.time())
        s = dvec @ qv
        ann = [doc_of[r] for r in store._ann.candidates(q, 100)]
        fts = [(doc_of[r], float(x)) for r, x in store._fts.scored(q, 100)]
        pq.append(
            {
                "ann": ann,
                "fts": fts,
                "exact": [int(i) for i in np.argsort(-s)],
                "df": _legs.dfs(store, qtext),
                "N": _legs.n_rows(store),
                "cos": {i: float(s[i]) for i in range(len(keys))},
            }
        )
        rel.append({keys.index(want)})
        qs.append(qtext)
    store.close()
    sets.append(
        {
            "set": [name, "minilm", len(keys), len(qs)],
            "relevant": rel,
            "queries": qs,
            "keys": keys,
            "lexical": False,
            "per_query": pq,
        }
    )
with open(sys.argv[1], "wb") as f:
    pickle.dump(sets, f)
