"""One all-of-Debian MiniLM store, built once, and recall's lists from whichever efface is on
PYTHONPATH, so two checkouts' recall can be compared on the very same store (issue #36, session 28;
not a benchmark of record; ``session28/minilm-debian-same-store.txt``).

    PYTHONPATH=src python bench/experiments/same_store_lists.py build /tmp/deb/s
    PYTHONPATH=OTHER/src python bench/experiments/same_store_lists.py query /tmp/deb/s > a.json
    PYTHONPATH=src python bench/experiments/same_store_lists.py query /tmp/deb/s > b.json
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_quality as bq
import corpora
import efface
from efface.embed import resolve

mode, path = sys.argv[1], Path(sys.argv[2])
full = corpora.CORPORA["debian"]()
c = full.subset(len(full.docs), 1000)
if mode == "build":
    dvec = bq.encode(bq.embedder("minilm"), c.docs, "debian")
    store = efface.open(path, embedder=resolve("minilm"), background=False)
    for s in range(0, len(c.docs), 5000):
        store.write_many(
            [
                {"key": f"d{i}", "text": c.docs[i], "subject": f"s{i % 997}"}
                for i in range(s, min(s + 5000, len(c.docs)))
            ],
            tenant=bq.TENANT,
            purpose=bq.PURPOSE,
            embeddings=dvec[s : s + 5000],
        )
    store.compact()
    store.close()
else:
    store = efface.open(path, embedder=resolve("minilm"), background=False)
    out = [[int(h.key[1:]) for h in store.recall(q, tenant=bq.TENANT, purpose=bq.PURPOSE, k=10)] for q in c.queries]
    rel = c.relevant
    r10 = sum(bool(set(r) & set(o)) for r, o in zip(rel, out, strict=True)) / len(out)
    print(json.dumps({"efface": efface.__file__, "recall@10": r10, "lists": out}))
    store.close()
