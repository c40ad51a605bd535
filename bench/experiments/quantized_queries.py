#!/usr/bin/env python
"""Retrieval quality with the query encoded by an int8 (dynamically quantized) export of
all-MiniLM-L6-v2, the documents by the full-precision model (issue #11 item 3: the query
encode is most of an end-to-end recall; not a benchmark of record):

    PYTHONPATH=src python bench/experiments/quantized_queries.py --corpora debian,manpages > OUT.json

For each corpus: recall@1 / recall@10 / MRR@10 of exact vector search and of efface's recall
(``hybrid`` given the query vector), with the queries' vectors from the cached torch model
(as bench_quality.py) and from the int8 model efface would use for queries; plus the
cosine of each int8 query vector to its full-precision one, and the encode times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import bench_quality as bq  # noqa: E402
import corpora  # noqa: E402


def exact(dvec: np.ndarray, qvec: np.ndarray) -> list[list[int]]:
    out = []
    for q in qvec:
        s = dvec @ q
        top = np.argpartition(-s, 40)[:40]
        out.append([int(d) for d in top[np.argsort(-s[top], kind="stable")]])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="debian,manpages")
    args = ap.parse_args()
    from efface.embed import minilm_onnx as mo

    fp32 = mo.OnnxMiniLMEmbedder(quantized=False)
    int8 = mo.OnnxMiniLMEmbedder(quantized=True)
    torch_emb = bq.embedder("minilm")
    result: dict = {"bench": "quantized-queries", "load_before": os.getloadavg()[0], "runs": []}
    for name in args.corpora.split(","):
        c = corpora.CORPORA[name]()
        bq.REL = c.relevant
        dvec = bq.encode(torch_emb, c.docs, c.name)
        q_torch = bq.encode(torch_emb, c.queries, c.name + "-queries")
        times: dict[str, list[float]] = {"fp32": [], "int8": []}
        vecs: dict[str, list[np.ndarray]] = {"fp32": [], "int8": []}
        for emb, label in ((fp32, "fp32"), (int8, "int8")):
            emb.embed_query(c.queries[0])
            for q in c.queries:
                t = time.perf_counter()
                vecs[label].append(emb.embed_query(q))
                times[label].append((time.perf_counter() - t) * 1000)
        q8 = np.stack(vecs["int8"]).astype(np.float32)
        q32 = np.stack(vecs["fp32"]).astype(np.float32)
        cos = (q8 * q_torch).sum(1) / np.linalg.norm(q8, axis=1) / np.linalg.norm(q_torch, axis=1)
        run: dict = {
            "corpus": name,
            "docs": len(c.docs),
            "queries": len(c.queries),
            "cosine_int8_to_torch": {p: round(float(np.percentile(cos, p)), 4) for p in (0, 1, 50)},
            "encode_ms_p50_p99": {
                k: [round(float(np.percentile(v, p)), 2) for p in (50, 99)] for k, v in times.items()
            },
            "systems": {},
        }
        for label, qv in (("torch", q_torch), ("onnx-fp32", q32), ("onnx-int8", q8)):
            run["systems"][f"exact:{label}"] = bq.score(exact(dvec, qv), c.relevant, [0.0])
            bq.log(name, label, "exact", run["systems"][f"exact:{label}"])
        for label, qv in (("torch", q_torch), ("onnx-int8", q8)):
            root = Path(tempfile.mkdtemp(prefix="efface-q8-"))
            try:
                got: dict = {}
                bq.run_efface(root, c.docs, c.queries, dvec, qv, torch_emb, got)
                run["systems"][f"hybrid:{label}"] = got["efface.hybrid"]
                run["systems"][f"ann_leg:{label}"] = got["efface.ann_leg"]
            finally:
                shutil.rmtree(root, ignore_errors=True)
        result["runs"].append(run)
    result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
