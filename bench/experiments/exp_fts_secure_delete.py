#!/usr/bin/env python
"""One-off experiment: the FTS5 cost of erasing a 100-record subject, by store size, with
efface's way (delete, then a full 'optimize' in the compactor) vs FTS5 'secure-delete'
(the delete rewrites the pages holding the deleted tokens; no optimize needed).

    PYTHONPATH=src python bench/experiments/exp_fts_secure_delete.py 10000,100000

The ANN index is never brought up to date (no recall, no compact), so only the origin and
FTS5 work is timed. Uses bench_erasure's 'unique' layout. Prints one JSON document.
"""

import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import efface

from bench_erasure import PURPOSE, TENANT, Layout, log

out = {"loadavg_at_start": os.getloadavg()[0]}
for n in [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "10000,100000").split(",")]:
    lay = Layout(n, 1234)
    base = tempfile.mkdtemp(prefix="efface-fts-exp-")
    st = efface.open(os.path.join(base, "s"), embedder="hashing", background=False)
    for s in range(0, n, 1000):
        slots = lay.order[s : s + 1000]
        items = [lay.item(j) for j in slots]
        st.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=lay.vectors(slots, []))
    conn = st._origin.connection
    conn.execute("INSERT INTO fts(fts) VALUES('optimize')")
    st._origin.checkpoint()
    res = {}
    subjects = iter(range(lay.main.n_subjects))
    for mode in ("optimize", "secure-delete", "optimize"):
        conn.execute("INSERT INTO fts(fts, rank) VALUES('secure-delete', ?)", (1 if mode == "secure-delete" else 0,))
        f_ms, o_ms, c_ms = [], [], []
        for _ in range(5):
            s = next(subjects)
            t = time.perf_counter()
            st.forget(tenant=TENANT, subject=lay.subj(f"user-{s:06d}"))
            f_ms.append((time.perf_counter() - t) * 1000)
            if mode == "optimize":
                t = time.perf_counter()
                st._fts.purge()
                o_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            st._origin.checkpoint()
            c_ms.append((time.perf_counter() - t) * 1000)
        key = mode if mode not in res else mode + " (again)"
        res[key] = {
            "forget_ms_median": round(float(np.median(f_ms)), 1),
            "optimize_ms_median": round(float(np.median(o_ms)), 1) if o_ms else None,
            "checkpoint_ms_median": round(float(np.median(c_ms)), 1),
        }
        log(f"[{n}] {key}: {res[key]}")
    st.close()
    res["loadavg_1min"] = os.getloadavg()[0]
    out[str(n)] = res
    shutil.rmtree(base, ignore_errors=True)
print(json.dumps(out, indent=1))
