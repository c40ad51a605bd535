#!/usr/bin/env python
"""One forget -> erased chain timed step by step, wall and CPU, on a copy of a built store:
what bench/results/erasure-pagelog/ab-*.jsonl holds (docs/benchmarks-history.md, "the page log").

    PYTHONPATH=<src of one code version> python bench/bench_erasure_ab.py TEMPLATE_STORE SIZE K FIRST

TEMPLATE_STORE is a store built by ``bench_erasure.py --build-only --template DIR`` (its
``DIR/store-SIZE-unique-1234/store``). The copy is opened with ``background=False`` and
compacted; then K 100-record subjects (``user-FIRST`` on) are forgotten one by one: forget,
compact() (the physical erasure), wait() (its scan of the origin's files), verify(). CPU is
the process's (every thread): on a loaded machine it moves less than wall time. Run it for
two code versions in turn, on the same subjects, to compare them. Prints one JSON line.
"""

import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import efface

from bench_erasure import TENANT, Layout


def timed(f):
    w, c = time.perf_counter(), time.process_time()
    r = f()
    return r, round(time.perf_counter() - w, 3), round(time.process_time() - c, 3)


def main() -> None:
    tpl, n, k, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    d = tempfile.mkdtemp(prefix="efface-ab-")
    path = os.path.join(d, "s")
    try:
        shutil.copytree(tpl, path)
        os.sync()  # the copy's dirty pages written back before anything is timed
        lay = Layout(n, 1234)
        st = efface.open(path, embedder="hashing", background=False)
        _, w0, c0 = timed(st.compact)
        out: dict = {"open_compact": [w0, c0], "loadavg": os.getloadavg(), "runs": []}
        for i in range(first, first + k):
            subject = lay.subj(f"user-{i:06d}")
            rec, *forget = timed(lambda s=subject: st.forget(tenant=TENANT, subject=s))
            _, *compact = timed(st.compact)
            _, *wait = timed(lambda h=rec.handle: st.wait(h, timeout=600))
            v, *verify = timed(lambda h=rec.handle: st.verify(h))
            b = next(c for c in v.checks if c.name == "bytes")
            out["runs"].append(
                {
                    "erased": len(rec.erased),
                    "forget": forget,
                    "compact": compact,
                    "wait": wait,
                    "verify": verify,
                    "level": v.level,
                    "bytes_check_s": round(b.duration_s, 3),
                    "scanned_MB": round(v.scanned_bytes / 1e6, 1),
                    "checks": {c.name: round(c.duration_s, 3) for c in v.checks},
                }
            )
        st.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
