#!/usr/bin/env python
"""Verify's cost, two checkouts interleaved on one store (issue #11): a fair A/B on a busy machine.

    python bench/bench_verify_ab.py --size 30000 --code old=/tmp/base/src --code new=src --rounds 3

Builds one store with bench_erasure's layout (unique texts, 100-record subjects, interleaved;
kept under --dir for reuse), then, round after round, runs one child per checkout with
``PYTHONPATH`` set to its ``src``: open the store (background=False), forget a fresh
100-record subject, ``compact()``, time ``verify`` and each of its checks. The checkouts
alternate, so both see the same store size and the same machine load. Prints one JSON
document; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def child(args) -> dict:
    import efface

    from bench_erasure import TENANT, Layout

    lay = Layout(args.size, args.seed, "unique")
    store = efface.open(args.store, embedder="hashing", background=False)
    store.compact()
    t = time.perf_counter()
    receipt = store.forget(tenant=TENANT, subject=lay.subj(args.subject))
    forget_s = time.perf_counter() - t
    t = time.perf_counter()
    store.compact()
    compact_s = time.perf_counter() - t
    t = time.perf_counter()
    ver = store.verify(receipt.handle)
    verify_s = time.perf_counter() - t
    store.close()
    return {
        "subject_records": len(receipt.erased),
        "forget_s": round(forget_s, 4),
        "compact_s": round(compact_s, 3),
        "verify_s": round(verify_s, 3),
        "level": ver.level,
        "checks_s": {c.name: round(c.duration_s, 3) for c in ver.checks},
        "scanned_bytes": ver.scanned_bytes,
        "loadavg": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=30000)
    ap.add_argument("--code", action="append", required=False, help="NAME=SRC_DIR, repeatable")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--subject", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.subject is not None:
        print(json.dumps(child(args)))
        return
    from bench_erasure import Layout, build
    from bench_store import log

    codes = [c.split("=", 1) for c in (args.code or ["new=src"])]
    store = os.path.join(args.dir, f"efface-verify-ab-{args.size}")
    if not os.path.exists(store):
        log(f"building {args.size} records at {store}")
        build(Layout(args.size, args.seed, "unique"), store, 1000)
    doc: dict = {
        "benchmark": "verify, checkouts interleaved on one store",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "size": args.size,
        "codes": {},
        "runs": [],
    }
    for name, src in codes:
        commit = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        doc["codes"][name] = {"src": os.path.abspath(src), "commit": commit.stdout.strip()}
    n = 0
    for r in range(args.rounds):
        for name, src in codes:
            n += 1
            subject = f"user-{200 + n:06d}"  # the first 200 are left to other runs
            cmd = [sys.executable, os.path.abspath(__file__), "--size", str(args.size), "--seed", str(args.seed)]
            cmd += ["--store", store, "--subject", subject]
            proc = subprocess.run(
                cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.path.abspath(src))
            )
            res = json.loads(proc.stdout) if proc.returncode == 0 else {"error": f"exit {proc.returncode}"}
            res.update(code=name, round=r)
            log(f"round {r} {name}: verify {res.get('verify_s')} s ({res.get('level')}), load {res.get('loadavg')}")
            doc["runs"].append(res)
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
