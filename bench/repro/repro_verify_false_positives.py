#!/usr/bin/env python
"""Repro: on bench_store's realistic synthetic memories, verify() cannot reach 'erased' even
when every erased byte is gone, because the byte scan meets fingerprint windows that live
records legitimately hold, and only the first ATTRIBUTE_MAX (32) hits are attributed.

    PYTHONPATH=src python bench/repro/repro_verify_false_positives.py [--dense]

Builds a 5,100-record store (bench_erasure's 'realistic' layout: 'user-000123' subjects,
template sentences, hashing embeddings; --dense swaps in random dense vectors), forgets
one 100-record subject, compacts, then scans every file with that erasure's fingerprints
and counts the hits by item kind and by whether a live record holds the window.
"""

import collections
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import efface
from efface.erasure.fingerprint import Fingerprints

from bench_erasure import PURPOSE, TENANT, Layout

dense = "--dense" in sys.argv
lay = Layout(5100, 1234, "realistic")
path = os.path.join(tempfile.mkdtemp(), "store")
st = efface.open(path, embedder="hashing", background=False)
rng = np.random.default_rng(0)
for s in range(0, lay.n, 1000):
    slots = lay.order[s : s + 1000]
    items = [lay.item(j) for j in slots]
    if dense:
        v = rng.standard_normal((len(items), 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
    else:
        v = lay.vectors(slots, [it["text"] for it in items])
    st.write_many(items, tenant=TENANT, purpose=PURPOSE, embeddings=v)
st.compact()
r = st.forget(tenant=TENANT, subject="user-000000")
st.compact()
fp = Fingerprints.from_blob(st._origin.evidence(r.handle)["fingerprints"])
files = sorted(os.path.join(a, f) for a, _, n in os.walk(path) for f in n)
hits, _ = st._verifier._fp.scan(files, fp, path)
by_kind = collections.Counter(h.kind for h in hits)
held = collections.Counter()
windows = []
for h in hits:
    if h.kind == "vector":
        continue
    with open(os.path.join(path, h.file), "rb") as f:
        f.seek(h.offset)
        windows.append((h.kind, f.read(h.width)))
# live_contains (one instr() scan per window) became live_holding (one Aho-Corasick pass) in cebab66
if hasattr(st._origin, "live_holding"):
    live = st._origin.live_holding({w for _k, w in windows}, embeddings=True)
    for k, w in windows:
        held[k] += w in live
else:
    for k, w in windows:
        held[k] += bool(st._origin.live_contains(w))
print("vectors:", "dense random" if dense else "hashing")
print("fingerprints per kind:", {k: int(a.size) for g in (fp.w16, fp.w8, fp.u8) for k, a in g.items()})
print("hits per kind:", dict(by_kind))
print("non-vector hits held by a live record (allowed copies):", dict(held))
v = st.verify(r.handle)
print("verify level:", v.level)
for c in v.checks:
    if c.rung == "erased":
        print(f"  {c.name}: {c.outcome}: {c.detail[:160]}")
st.close()
