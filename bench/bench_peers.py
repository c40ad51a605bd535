#!/usr/bin/env python
"""Peers side by side: efface, Chroma, LanceDB and Qdrant (local mode) on the same data.

    PYTHONPATH=src python bench/bench_peers.py --n 10000 --subject-records 100 > bench/results/results-peers.json
    PYTHONPATH=src python bench/bench_peers.py --recall-latency --n 100000 > bench/results/results-recall-latency.json

For each store: build it with N records (vectors from efface's hashing embedder, handed to
every store, so no store loads a model), then run ``efface audit`` with ``--maintenance`` on
it: what its delete returns, how long the delete (and closing the store) takes, which read
paths still return the forgotten subject, how many of its texts and vectors remain in the
store's files after the delete and after the store's own maintenance calls, and the time to
physical erasure where it is reachable at all. Prints ONE JSON document on stdout; progress
goes to stderr. Nothing here asserts a time.

``--recall-latency`` measures recall p50/p99 instead, side by side, on the same MiniLM vectors,
encoding excluded and included (``bench/recall_latency.py`` says how).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from efface.audit import Selection, run_audit
from efface.audit.driver import version
from efface.embed import resolve

SUBJECT = "subject-0001"
KINDS = ("efface", "chroma", "lancedb", "qdrant")
_WORDS = (
    "amber basil cobalt dune ember fjord garnet harbor indigo juniper kelp lantern meadow nectar onyx "
    "pepper quartz raven saffron thistle umber violet willow xenon yarrow zephyr"
).split()


def dataset(n: int, subject_records: int, seed: int = 5):
    """ids, texts, subjects, vectors: the first ``subject_records`` belong to SUBJECT, the rest
    to other subjects (ten records each)."""
    rng = random.Random(seed)
    texts = [
        f"Memory {i}: " + " ".join(rng.choice(_WORDS) for _ in range(14)) + f" (ticket {rng.randrange(10**9):09d})"
        for i in range(n)
    ]
    ids = [f"r{i:07d}" for i in range(n)]
    subjects = [SUBJECT if i < subject_records else f"subject-{2 + i // 10:04d}" for i in range(n)]
    return ids, texts, subjects, resolve("hashing", None).embed(texts)


def build(kind: str, path: Path, data) -> None:
    """Write ``data`` into a new store of ``kind`` at ``path`` with the store's own API."""
    ids, texts, subjects, vectors = data
    if kind == "efface":
        import efface

        with efface.open(path, embedder="hashing", background=False) as s:
            s.write_many(
                [{"key": k, "text": t, "subject": u} for k, t, u in zip(ids, texts, subjects, strict=True)],
                tenant="default",
                purpose="support",
                embeddings=vectors,
            )
    elif kind == "chroma":
        import chromadb
        from chromadb.config import Settings

        client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        col = client.create_collection("memories", embedding_function=None, metadata={"hnsw:space": "cosine"})
        for i in range(0, len(ids), 5000):
            col.add(
                ids=ids[i : i + 5000],
                documents=texts[i : i + 5000],
                embeddings=vectors[i : i + 5000],
                metadatas=[{"subject": s} for s in subjects[i : i + 5000]],
            )
        client.close()
        client.clear_system_cache()
    elif kind == "lancedb":
        import lancedb

        lancedb.connect(str(path)).create_table(
            "memories",
            data=[
                {"id": ids[i], "text": texts[i], "subject": subjects[i], "vector": vectors[i]} for i in range(len(ids))
            ],
        )
    elif kind == "qdrant":
        from qdrant_client import QdrantClient, models

        c = QdrantClient(path=str(path))
        c.create_collection(
            "memories", vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
        )
        for i in range(0, len(ids), 1000):
            c.upsert(
                "memories",
                points=[
                    models.PointStruct(
                        id=j,
                        vector=vectors[j].tolist(),
                        payload={"key": ids[j], "text": texts[j], "subject": subjects[j]},
                    )
                    for j in range(i, min(len(ids), i + 1000))
                ],
            )
        c.close()
    else:
        raise ValueError(kind)


def libraries() -> dict[str, str]:
    return {
        "efface": version("efface"),
        "chroma": version("chromadb"),
        "lancedb": f"{version('lancedb')}, {version('pylance')}",
        "qdrant": version("qdrant-client"),
        "numpy": version("numpy"),
        "python": platform.python_version(),
    }


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _residue(stage) -> dict:
    return {
        "level": stage.level,
        "texts_left": stage.scan.texts,
        "vectors_left": stage.scan.vectors,
        "files": {r.file: {"texts": r.texts, "vectors": r.vectors} for r in stage.scan.files},
        "paths_returning": {p.path: p.returned for p in stage.probes if p.returned},
    }


def summarize(report) -> dict:
    """The bench's figures for one audit report."""
    delete = report.stages[0]
    out = {
        "library": report.library,
        "delete_returned": report.delete_returned,
        "delete_and_close_s": delete.seconds,
        "after_delete": _residue(delete),
    }
    erasure = delete.seconds if delete.level == "erased" else None
    elapsed = delete.seconds
    out["maintenance"] = []
    for m in report.stages[1:]:
        elapsed += m.seconds
        out["maintenance"].append({"stage": m.name, "calls": list(m.calls), "seconds": m.seconds, **_residue(m)})
        if erasure is None and m.level == "erased":
            erasure = elapsed
    out["time_to_physical_erasure_s"] = None if erasure is None else round(erasure, 4)
    out["physical_erasure"] = (
        "reached" if erasure is not None else "not reached by the store's delete or any maintenance stage"
    )
    return out


def run(n: int, subject_records: int, kinds=KINDS, workdir: str | None = None) -> dict:
    data = dataset(n, subject_records)
    tmp = Path(tempfile.mkdtemp(prefix="efface-peers-", dir=workdir))
    results: dict = {}
    reports: dict = {}
    try:
        for kind in kinds:
            print(f"[{kind}] building {n} records", file=sys.stderr)
            t0 = time.perf_counter()
            build(kind, tmp / kind, data)
            built = time.perf_counter() - t0
            print(f"[{kind}] auditing", file=sys.stderr)
            t0 = time.perf_counter()
            report = run_audit(
                kind,
                tmp / kind,
                Selection(subject=SUBJECT),
                maintenance=True,
                collection="memories" if kind != "efface" else None,
                workdir=str(tmp),
            )
            results[kind] = {
                "build_s": round(built, 3),
                "audit_s": round(time.perf_counter() - t0, 3),
                **summarize(report),
            }
            reports[kind] = report
            shutil.rmtree(tmp / kind, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = {
        "n": n,
        "subject_records": subject_records,
        "embedder": "hashing-384 (efface), handed to every store",
        "machine": machine(),
        "libraries": libraries(),
        "stores": results,
    }
    return doc, reports


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="records per store (default 10000)")
    p.add_argument("--subject-records", type=int, default=100, help="records of the forgotten subject")
    p.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="comma-separated store kinds (with --recall-latency: which of chroma, lancedb run beside efface)",
    )
    p.add_argument("--recall-latency", action="store_true", help="recall p50/p99 beside Chroma and LanceDB instead")
    p.add_argument("--queries", type=int, default=500, help="--recall-latency: queries asked of every system")
    p.add_argument("--encode", type=int, default=None, help="--recall-latency: record texts encoded (default all)")
    p.add_argument("--profile", action="store_true", help="--recall-latency: add a cProfile of efface's search")
    a = p.parse_args()
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    if a.recall_latency:
        import recall_latency

        peers = tuple(k for k in a.kinds.split(",") if k in ("chroma", "lancedb"))
        doc = recall_latency.run(a.n, a.queries, a.encode or a.n, profile=a.profile, peers=peers)
        print(json.dumps({"machine": machine(), "libraries": libraries(), **doc}, indent=2))
        return
    doc, _ = run(a.n, a.subject_records, tuple(k for k in a.kinds.split(",") if k))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
