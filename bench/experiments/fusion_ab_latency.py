#!/usr/bin/env python
"""Recall latency of two checkouts' code on one store, alternated (issue #36, session 27; not a
benchmark of record): a store of N records is built once (recall_latency.py's corpus; its
MiniLM vectors with the queries' vectors looked up, or the hashing embedder), then opened by
each checkout's ``src`` in turn, in child processes alternating A B B A ..., each timing the
same queries (wall p50/p90/p99 and CPU per recall), so the host's load falls on both alike.

    python bench/experiments/fusion_ab_latency.py KIND N QUERIES ROUNDS SRC_A SRC_B > out.json

KIND: ``minilm`` (the query vectors looked up: search only) or ``hashing``. With
``EFFACE_AB_SETTLE=S`` each child waits S seconds after its warm-up before it times.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))


def _store(path: Path, kind: str, qs: list[str]):
    import efface
    import recall_latency as rl

    if kind == "hashing":
        return efface.open(path, embedder="hashing", background=False)
    qvec = np.load(path.parent / "qvec.npy")
    emb = rl.BenchEmbedder(dict(zip(qs, qvec, strict=True)))
    return efface.open(path, embedder=emb, background=False)


def build(path: Path, kind: str, n: int, nq: int) -> None:
    import recall_latency as rl

    from bench_store import Corpus

    corpus = Corpus(n, seed=1234)
    qs = [q for _, q in corpus.queries(nq, seed=1235)]
    if kind == "minilm":
        np.save(path.parent / "qvec.npy", rl.encoder().embed(qs))
        vecs, _ = rl.record_vectors(corpus, 10_000, 1234)
        store, _emb, _ = rl.build_efface(
            path, corpus, vecs, dict(zip(qs, np.load(path.parent / "qvec.npy"), strict=True))
        )
    else:
        import efface

        store = efface.open(path, embedder="hashing", background=False)
        for s in range(0, n, 5000):
            store.write_many([corpus.item(i) for i in range(s, min(s + 5000, n))], tenant=rl.TENANT, purpose=rl.PURPOSE)
        store.compact()
    store.close()
    (path.parent / "queries.json").write_text(json.dumps(qs))


def timing(path: Path, kind: str) -> dict:
    import recall_latency as rl

    qs = json.loads((path.parent / "queries.json").read_text())
    store = _store(path, kind, qs)
    for q in qs[:50]:
        store.recall(q, tenant=rl.TENANT, purpose=rl.PURPOSE, k=10)
    # EFFACE_AB_SETTLE seconds after the warm-up: what the store loads in the background after
    # open (its copy of liveness) is then done, and the timing is of a store in its steady state
    time.sleep(float(os.environ.get("EFFACE_AB_SETTLE", "0")))
    wall = []
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    for q in qs:
        t0 = time.perf_counter()
        store.recall(q, tenant=rl.TENANT, purpose=rl.PURPOSE, k=10)
        wall.append((time.perf_counter() - t0) * 1000)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    store.close()
    cpu = (ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime) * 1000 / len(qs)
    return {"recall_ms": rl.pct(wall), "cpu_ms_per_recall": round(cpu, 3)}


def main() -> None:
    if sys.argv[1] == "--build":
        build(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    if sys.argv[1] == "--child":
        print(json.dumps(timing(Path(sys.argv[2]), sys.argv[3])))
        return
    kind, n, nq, rounds, src_a, src_b = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        *sys.argv[5:7],
    )
    root = Path(tempfile.mkdtemp(prefix="fusion-ab-"))
    path = root / "store"
    env = {**os.environ, "PYTHONPATH": src_b}
    subprocess.run([sys.executable, __file__, "--build", str(path), kind, str(n), str(nq)], env=env, check=True)
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    load = [round(x, 2) for x in os.getloadavg()]
    for r in range(rounds):
        for which in ("a", "b") if r % 2 == 0 else ("b", "a"):
            src = src_a if which == "a" else src_b
            got = subprocess.run(
                [sys.executable, __file__, "--child", str(path), kind],
                env={**os.environ, "PYTHONPATH": src},
                check=True,
                capture_output=True,
                text=True,
            )
            runs[which].append(json.loads(got.stdout))
            print(f"[ab] round {r} {which}: {runs[which][-1]}", file=sys.stderr, flush=True)
    p50 = {w: float(np.median([x["recall_ms"]["p50"] for x in v])) for w, v in runs.items()}
    cpu = {w: float(np.median([x["cpu_ms_per_recall"] for x in v])) for w, v in runs.items()}
    print(
        json.dumps(
            {
                "kind": kind,
                "n": n,
                "queries": nq,
                "rounds": rounds,
                "a": src_a,
                "b": src_b,
                "load_before": load,
                "load_after": [round(x, 2) for x in os.getloadavg()],
                "runs": runs,
                "median_p50_ms": p50,
                "median_cpu_ms": cpu,
                "b_over_a_p50": round(p50["b"] / p50["a"], 3),
                "b_over_a_cpu": round(cpu["b"] / cpu["a"], 3),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
