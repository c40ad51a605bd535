#!/usr/bin/env python
"""What recall's coordination step costs (issue #36, session 26; not a benchmark of record):
one store of N records (recall_latency.py's corpus and MiniLM vectors, queries' vectors looked
up), the same queries recalled with the step on (``COORDINATED`` = 2: the first 2k read and
re-scored) and off (1: k read, as before session 26), in alternating blocks in one process, so
the host's load falls on both alike. Prints JSON: wall p50/p90/p99 and CPU time per recall.

    PYTHONPATH=src python bench/experiments/coordination_cost.py [N] [QUERIES] [ROUNDS]
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import recall_latency as rl
from efface.paths import recall as R

from bench_store import Corpus


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    nq = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    corpus = Corpus(n, seed=1234)
    qs = [q for _, q in corpus.queries(nq, seed=1235)]
    vecs, _ = rl.record_vectors(corpus, 10_000, 1234)  # cached by recall_latency.py
    qvec = rl.encoder().embed(qs)
    store, _emb, _ = rl.build_efface(Path(tempfile.mkdtemp()) / "s", corpus, vecs, dict(zip(qs, qvec, strict=True)))
    for q in qs[:30]:
        store.recall(q, tenant=rl.TENANT, purpose=rl.PURPOSE, k=10)
    wall: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, float] = {"on": 0.0, "off": 0.0}
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            R.COORDINATED = 2 if mode == "on" else 1
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            for q in qs:
                t0 = time.perf_counter()
                store.recall(q, tenant=rl.TENANT, purpose=rl.PURPOSE, k=10)
                wall[mode].append((time.perf_counter() - t0) * 1000)
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu[mode] += (ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime) * 1000
    store.close()
    out = {
        "n": n,
        "queries": nq,
        "rounds": rounds,
        "recall_ms": {m: rl.pct(v) for m, v in wall.items()},
        "cpu_ms_per_recall": {m: round(c / len(wall[m]), 3) for m, c in cpu.items()},
    }
    out["p50_on_over_off"] = round(out["recall_ms"]["on"]["p50"] / out["recall_ms"]["off"]["p50"], 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
