"""Recall's lists on one store (built by same_store_lists.py), with the state of each background
load noted per query: the copy of liveness (origin/sqlite/liveness.py), the postings in memory
(origin/sqlite/inmemory.py) and numba's compiled loops (efface.compiled). Issue: the same store
opened twice answered a few queries differently (session 28, determ).

    PYTHONPATH=src python bench/experiments/same_store_states.py /tmp/deb/s [N] > run.json
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_quality as bq
import corpora
import efface
from efface import compiled
from efface.embed import resolve

path = Path(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
full = corpora.CORPORA["debian"]()
c = full.subset(len(full.docs), 1000)
store = efface.open(path, embedder=resolve("minilm"), background=False)
origin = store._origin
out, states = [], []
t0 = time.perf_counter()
for q in c.queries[:n]:
    before = (origin.liveness._ready, origin.text._post is not None, compiled.ready())
    hits = store.recall(q, tenant=bq.TENANT, purpose=bq.PURPOSE, k=10)
    out.append([int(h.key[1:]) for h in hits])
    states.append([int(x) for x in before] + [round(time.perf_counter() - t0, 3)])
rel = c.relevant[:n]
r10 = sum(bool(set(r) & set(o)) for r, o in zip(rel, out, strict=True)) / len(out)
print(json.dumps({"recall@10": r10, "lists": out, "states": states}))
store.close()
