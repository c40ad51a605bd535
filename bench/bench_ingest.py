#!/usr/bin/env python
"""Ingest until recallable: a bulk import, then recall at once, with the background compactor on (issue #11).

    PYTHONPATH=src python bench/bench_ingest.py --sizes 200000 > bench/results/results-ingest.json
    python bench/bench_ingest.py --sizes 50000 --code new=src --code old=/tmp/base/src   # side by side

Prints ONE JSON document on stdout; progress goes to stderr. Each (code, size) runs in its own
child process with ``PYTHONPATH`` set to that code's ``src``, so an older checkout can be
measured beside the current one in the same run, on the same data (bench_store's ``Corpus``,
hashing embeddings computed up front and handed to ``write_many(embeddings=...)``, 1000
records per batch, ``background=True`` as a served store runs).

Per child: the import is timed; then the first recall whose query is the text of the last
record written is timed until it returns that record ("ingest until recallable" = records /
(import + that recall)); then 40 recalls are timed while the compactor absorbs the import
(p50/p99), a subject is forgotten and its texts recalled (an erased record must never come
back), and the time until the ANN index has absorbed everything is recorded.

Target (reported, never asserted): ingest until recallable >= 20,000 records/s at 200k.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_store import PURPOSE, TENANT, Corpus, log, pct, peak_rss_mib  # noqa: E402

TARGET_RPS = 20_000.0


def run_child(args) -> dict[str, Any]:
    import efface

    n = args.child_size
    corpus = Corpus(n, args.seed)
    for i in range(max(0, n - args.batch), n):  # the last batch's texts are unique: a recall can name them
        corpus.texts[i] += f" tag{i:07d}q"
    base = tempfile.mkdtemp(prefix=f"efface-ingest-{n}-", dir=args.dir)
    out: dict[str, Any] = {"records": n, "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    store = efface.open(os.path.join(base, "store"), embedder="hashing", background=True)
    vectors = store.embedder.embed(corpus.texts)
    t0 = time.perf_counter()
    for start in range(0, n, args.batch):
        stop = min(start + args.batch, n)
        store.write_many(
            [corpus.item(i) for i in range(start, stop)], tenant=TENANT, purpose=PURPOSE, embeddings=vectors[start:stop]
        )
        if stop % (n // 5 or 1) == 0:
            log(f"[{n}]   {stop}/{n} written")
    t_write = time.perf_counter() - t0
    last = corpus.key(n - 1)
    t1 = time.perf_counter()
    hits = store.recall(corpus.texts[n - 1], tenant=TENANT, purpose=PURPOSE, k=10)
    t_first = time.perf_counter() - t1
    found = last in {h.key for h in hits}
    ann = getattr(store, "_ann", None)
    current = store._origin.current_epoch()
    out["import"] = {
        "write_many_s": round(t_write, 3),
        "write_many_rps": round(n / t_write, 1),
        "first_recall_s": round(t_first, 4),
        "first_recall_found_last_record": found,
        "first_recall_via": next((list(h.via) for h in hits if h.key == last), None),
        "ingest_until_recallable_rps": round(n / (t_write + t_first), 1) if found else None,
        "ann_applied_share_at_first_recall": round(ann.applied_epoch() / current, 3) if ann else None,
    }
    log(f"[{n}] import {t_write:.1f} s, first recall {t_first * 1000:.1f} ms (found last: {found})")
    queries = [q for _kind, q in corpus.queries(40, seed=args.seed + 5)]
    lat = []
    for q in queries:
        t = time.perf_counter()
        store.recall(q, tenant=TENANT, purpose=PURPOSE, k=10)
        lat.append((time.perf_counter() - t) * 1000)
    out["recall_while_absorbing_ms"] = pct(lat, ps=(50, 99))
    subject = corpus.subject(n - 1)
    erased = {corpus.key(i) for i in range(n - 1, -1, -corpus.n_subjects)}
    t = time.perf_counter()
    store.forget(tenant=TENANT, subject=subject)
    out["forget_ms"] = round((time.perf_counter() - t) * 1000, 2)
    leaked = 0
    for i in list(range(n - 1, -1, -corpus.n_subjects))[:20]:
        leaked += sum(1 for h in store.recall(corpus.texts[i], tenant=TENANT, purpose=PURPOSE, k=10) if h.key in erased)
    out["erased_records_returned_after_forget"] = leaked
    t = time.perf_counter()
    absorbed = None
    while ann is not None and time.perf_counter() - t < args.absorb_timeout:
        if ann.applied_epoch() >= store._origin.current_epoch():
            absorbed = round(time.perf_counter() - t0, 2)
            break
        time.sleep(0.25)
    out["ann_absorbed_everything_s_after_import_start"] = absorbed
    out["peak_rss_mib"] = peak_rss_mib()
    out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    store.close()
    shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200000")
    ap.add_argument("--code", action="append", default=None, help="NAME=SRC_DIR (repeatable); default new=src")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--absorb-timeout", type=float, default=300.0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child-size", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_size is not None:
        print(json.dumps(run_child(args)))
        return
    codes = [c.split("=", 1) for c in (args.code or ["new=src"])]
    doc: dict[str, Any] = {
        "benchmark": "efface ingest until recallable (background compactor on)",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "results": {},
    }
    for size in [int(s) for s in args.sizes.split(",")]:
        for name, src in codes:
            src = os.path.abspath(src)
            commit = subprocess.run(
                ["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            log(f"=== {name} ({src}, {commit}) at {size} ===")
            cmd = [sys.executable, os.path.abspath(__file__), "--child-size", str(size), "--seed", str(args.seed)]
            cmd += ["--batch", str(args.batch), "--absorb-timeout", str(args.absorb_timeout)]
            if args.dir:
                cmd += ["--dir", args.dir]
            env = dict(os.environ, PYTHONPATH=src)
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
            res = json.loads(proc.stdout) if proc.returncode == 0 else {"error": f"exit {proc.returncode}"}
            res["code"] = {"name": name, "src": src, "commit": commit}
            doc["results"][f"{name}@{size}"] = res
    doc["targets"] = [
        {
            "target": "ingest_until_recallable_rps",
            "run": k,
            "value": (r.get("import") or {}).get("ingest_until_recallable_rps"),
            "threshold": f">= {TARGET_RPS:g}",
            "pass": ((r.get("import") or {}).get("ingest_until_recallable_rps") or 0) >= TARGET_RPS,
        }
        for k, r in doc["results"].items()
    ]
    doc["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
