#!/usr/bin/env python
"""Repro (no efface needed): usearch reuses the slots freed by the *previous* scrub, so
efface's VectorIndex._scrub (add then remove as many noise vectors as were just removed)
overwrites the erased vectors only on the first erasure; from the second on, the erased
i8 vectors stay in the saved index file.  python bench/repro/repro_ann_scrub.py
Expected output with usearch 2.26.6: round 0 -> 0/100, rounds 1 and 2 -> 100/100.
"""

import os
import tempfile

import numpy as np
import usearch
from usearch.index import Index

print("usearch", usearch.__version__)
rng = np.random.default_rng(0)


def new():
    return Index(ndim=384, metric="cos", dtype="i8", connectivity=16, expansion_add=64, expansion_search=128)


idx = new()
N = 2000
v = rng.standard_normal((N, 384)).astype(np.float32)
idx.add(np.arange(N, dtype=np.uint64), v)
sent = 1 << 62


def present(idx, victims_q):
    fd, p = tempfile.mkstemp()
    os.close(fd)
    idx.save(p)
    with open(p, "rb") as f:
        data = f.read()
    os.unlink(p)
    return sum(1 for q in victims_q if q in data)


for rnd in range(3):
    victims = np.arange(rnd * 100, rnd * 100 + 100, dtype=np.uint64)
    q = [bytes(np.asarray(idx.get(k, dtype=np.int8), dtype=np.int8).tobytes()) for k in victims]
    idx.remove(victims)
    keys = np.arange(sent, sent + 100, dtype=np.uint64)
    sent += 100
    idx.add(keys, rng.standard_normal((100, 384)).astype(np.float32))
    idx.remove(keys)
    print("round", rnd, "erased vectors still in saved file:", present(idx, q), "/ 100")
