"""Recall's lists on one store (built by same_store_lists.py) with each background load forced
to one state for the whole run: the copy of liveness (origin/sqlite/liveness.py: ``live`` loaded
or not) and the postings in memory (origin/sqlite/inmemory.py: ``post`` loaded or not, FTS5
ranking then). Prints JSON: recall@10, MRR@10, the lists and each recall's wall and CPU time (the process's).

    PYTHONPATH=src python bench/experiments/same_store_forced.py /tmp/deb/s live=1 post=1 [N]
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_quality as bq
import corpora
import efface
from efface.embed import resolve

path = Path(sys.argv[1])
opts = dict(a.split("=") for a in sys.argv[2:] if "=" in a)
rest = [a for a in sys.argv[2:] if "=" not in a]
n = int(rest[0]) if rest else 1000
full = corpora.CORPORA["debian"]()
c = full.subset(len(full.docs), 1000)
store = efface.open(path, embedder=resolve("minilm"), background=False)
origin = store._origin
live, text = origin.liveness, origin.text
if opts.get("live") == "1":
    live.usable(None)
    while not live._ready:
        time.sleep(0.05)
else:
    live._later = False  # never loaded: recalls check in SQLite
if opts.get("post") == "1":
    text._postings()
    text._post_loaded.wait()
    assert text._post is not None
else:
    text._post_later = False  # never loaded: FTS5 ranks
out, wall, cpu = [], [], []
for q in c.queries[:n]:
    t, u = time.perf_counter(), time.process_time()
    hits = store.recall(q, tenant=bq.TENANT, purpose=bq.PURPOSE, k=10)
    wall.append(round((time.perf_counter() - t) * 1000, 2))
    cpu.append(round((time.process_time() - u) * 1000, 2))
    out.append([int(h.key[1:]) for h in hits])
assert (live._ready) == (opts.get("live") == "1") and (text._post is not None) == (opts.get("post") == "1")
rel = c.relevant[:n]
r10 = sum(bool(set(r) & set(o)) for r, o in zip(rel, out, strict=True)) / len(out)
mrr = sum(
    next((1 / (i + 1) for i, x in enumerate(o) if x in set(r)), 0.0) for r, o in zip(rel, out, strict=True)
) / len(out)
print(json.dumps({"opts": opts, "recall@10": r10, "mrr@10": round(mrr, 4), "lists": out, "ms": wall, "cpu_ms": cpu}))
store.close()
