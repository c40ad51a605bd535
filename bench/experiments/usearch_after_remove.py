#!/usr/bin/env python
"""The first usearch call after a removal, on a large index (session 22 finding).

    python bench/experiments/usearch_after_remove.py STORE/ann/<tenant>.usearch

Loads a saved ANN file (an efface store's, at 1M records: 509 MiB), removes keys and times the
next add and search. On the AMD EPYC 2-core host, at 1M: whichever of add or search comes first
after any removal (even of one key) took 34-38 ms, the next one 1-2.5 ms; len() and contains()
do not pay it. usearch's Python binding holds the GIL through both calls, so a recall issued
right after a forget waits for the compactor's first scrub add (docs/benchmarks-history.md, session 22).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from usearch.index import Index


def main() -> None:
    path = sys.argv[1]
    idx = Index(ndim=384, metric="cos", dtype="i8", connectivity=16, expansion_add=64, expansion_search=128)
    idx.load(path)
    keys = [int(k) for k in np.asarray(idx.keys)[:3000]]
    rng = np.random.default_rng(1)
    label = [10**15]

    def add(n: int) -> float:
        t = time.perf_counter()
        idx.add(np.arange(label[0], label[0] + n, dtype=np.uint64), rng.standard_normal((n, 384)).astype(np.float32))
        label[0] += n
        return (time.perf_counter() - t) * 1000

    def search() -> float:
        t = time.perf_counter()
        idx.search(rng.standard_normal(384).astype(np.float32), 10)
        return (time.perf_counter() - t) * 1000

    print(f"{len(idx)} vectors; add 4, no removal: {add(4):.1f} ms, again {add(4):.1f} ms")
    idx.remove(keys[0])
    print(f"remove 1, then add 4: {add(4):.1f} ms, again {add(4):.1f} ms")
    for k in keys[1:101]:
        idx.remove(k)
    print(f"remove 100, then add 1: {add(1):.1f} ms, again {add(1):.1f} ms")
    for k in keys[101:201]:
        idx.remove(k)
    print(f"remove 100, then search: {search():.1f} ms, then add 1: {add(1):.1f} ms")
    for k in keys[201:301]:
        idx.remove(k)
    t = time.perf_counter()
    len(idx), idx.contains(keys[500])
    print(f"remove 100, then len and contains: {(time.perf_counter() - t) * 1000:.1f} ms, then add 1: {add(1):.1f} ms")


if __name__ == "__main__":
    main()
