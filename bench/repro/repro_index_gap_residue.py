#!/usr/bin/env python
"""Repro: after forget + compact, fragments of erased keys and subject names can stay in the
origin's SQLite file, in the unallocated gap between the cell-pointer array and the cell
content area of live *index* b-tree leaf pages (sqlite_autoindex_records_1, claims_subject),
although the origin runs with PRAGMA secure_delete=ON. verify()'s byte scan finds them (and
rightly refuses 'erased'); the structural checks all pass.

    PYTHONPATH=src python bench/repro/repro_index_gap_residue.py [size] [max_cases]

Builds a store (bench_erasure's 'unique' layout, default 10,000 records), forgets 100-record
subjects one by one (compact() after each) until max_cases (default 3) verifies fail, and for
each residue hit prints the b-tree that owns the page, where in the page the hit lies (parsed
from the page header), whether a live record holds the window, and the bytes around it.
Seen at 2590cff: 'unallocated gap' for every hit; none held by a live record.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import efface
from efface.erasure.fingerprint import Fingerprints

from bench_erasure import PURPOSE, TENANT, Layout

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
max_cases = int(sys.argv[2]) if len(sys.argv) > 2 else 3
lay = Layout(n, 1234)
path = os.path.join(tempfile.mkdtemp(), "s")
st = efface.open(path, embedder="hashing", background=False)
for s in range(0, n, 1000):
    slots = lay.order[s : s + 1000]
    st.write_many([lay.item(j) for j in slots], tenant=TENANT, purpose=PURPOSE, embeddings=lay.vectors(slots, []))
st.recall("warm up", tenant=TENANT, purpose=PURPOSE)
st.compact()
o = st._origin
page = o.page_size()
cases = tried = 0
for i in range(lay.main.n_subjects):
    name = f"user-{i:06d}"
    r = st.forget(tenant=TENANT, subject=lay.subj(name))
    st.compact()
    tried += 1
    fp = Fingerprints.from_blob(o.evidence(r.handle)["fingerprints"])
    files = sorted(os.path.join(a, f) for a, _, nn in os.walk(path) for f in nn)
    hits, _ = st._verifier._fp.scan(files, fp, path)
    v = st.verify(r.handle)
    if v.level == "erased":
        continue
    cases += 1
    owner = {pno: nm for nm, pno in o._c.execute("SELECT name, pageno FROM dbstat")}
    print(f"{name}: verify {v.level}:", [c.detail for c in v.checks if c.outcome != "pass"])
    for h in hits:
        with open(os.path.join(path, h.file), "rb") as f:
            f.seek(h.offset)
            w = f.read(h.width)
            pno = h.offset // page + 1
            f.seek((pno - 1) * page)
            pg = f.read(page)
        base = 100 if pno == 1 else 0
        hdr = 12 if pg[base] in (2, 5) else 8
        ncell = int.from_bytes(pg[base + 3 : base + 5], "big")
        cstart = int.from_bytes(pg[base + 5 : base + 7], "big") or 65536
        at = h.offset - (pno - 1) * page
        where = "unallocated gap" if base + hdr + 2 * ncell <= at < cstart else "cell content area"
        print(
            f"  {h.kind} in {h.file} page {pno} ({owner.get(pno, 'not a b-tree page')}, type {pg[base]}, "
            f"{ncell} cells, gap {base + hdr + 2 * ncell}-{cstart}): at {at} -> {where}; "
            f"held by a live record: {bool(o.live_holding({w}, embeddings=False))}"
        )
        print("    bytes:", pg[max(0, at - 24) : at + h.width + 24])
    if cases >= max_cases:
        break
print(f"{cases} of {tried} forgets left residue; secure_delete =", o._c.execute("PRAGMA secure_delete").fetchone()[0])
st.close()
